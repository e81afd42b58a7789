/**
 * `txbox torture` over NATS JetStream as CI runs it: the CLI as a subprocess,
 * 20,000 events and 20 relay kills on PostgreSQL, with and without --inbox
 * (consumer processes killed mid-handler and between commit and ack); exit 0
 * and every zero count. The HTTP runs are torture.test.ts.
 */
import { describe } from 'node:test';
import { itTortureRuns } from '../helpers/torture-runs.ts';

describe('txbox torture over NATS JetStream', { timeout: 1_800_000 }, () => {
  itTortureRuns('nats');
});
