/**
 * `txbox torture --inbox` over HTTP as CI runs it: 20,000 events and 20 relay
 * kills on PostgreSQL, webhook consumer processes with the inbox killed
 * mid-handler and between commit and answer; every event applied exactly
 * once, every projection at its last version.
 */
import { describe } from 'node:test';
import { itTortureRun } from '../helpers/torture-runs.ts';

describe('txbox torture --inbox over HTTP', { timeout: 900_000 }, () => {
  itTortureRun('http', true);
});
