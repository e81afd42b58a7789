/**
 * `txbox torture --inbox` over NATS JetStream as CI runs it: 20,000 events and
 * 20 relay kills on PostgreSQL, consumer processes (NatsConsumer and the
 * inbox) killed mid-handler and between commit and ack; every event applied
 * exactly once, every projection at its last version.
 */
import { describe } from 'node:test';
import { itTortureRun } from '../helpers/torture-runs.ts';

describe('txbox torture --inbox over NATS JetStream', { timeout: 900_000 }, () => {
  itTortureRun('nats', true);
});
