/**
 * `txbox torture` over NATS JetStream as CI runs it: the CLI as a subprocess,
 * 20,000 events and 20 relay kills on PostgreSQL; exit 0 and every zero count.
 * With --inbox: torture-nats-inbox.test.ts. The HTTP runs are torture.test.ts.
 */
import { describe } from 'node:test';
import { itTortureRun } from '../helpers/torture-runs.ts';

describe('txbox torture over NATS JetStream', { timeout: 900_000 }, () => {
  itTortureRun('nats', false);
});
