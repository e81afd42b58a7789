/**
 * DeliveryCore when the adapter's `admit` gives up on a message unhandled
 * (NATS, Redis: delivered `maxDeliveries` times): the event is recorded dead
 * in the inbox (`recordDead`) before the dead letter, retried while the
 * store does not answer, and the message is released, not dead-lettered
 * without its row, when the stop comes first. An in-memory inbox (a unit of
 * the consumer core, not of a database).
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { uuidv7, type InboxOutcome, type OutboxEvent } from '../../src/index.ts';
import { ConsumerCore } from '../../src/inbox/consumer/consumer-core.ts';
import { DeliveryCore } from '../../src/inbox/consumer/delivery-core.ts';
import { silentLogger } from '../../src/core/logger.ts';

function event(): OutboxEvent {
  return { id: uuidv7(), type: 'Noted', aggregateType: 'Note', aggregateId: 'n', key: 'n', destination: 'notes', payload: {}, headers: {}, occurredAt: new Date(), version: null };
}

function setup(recordDead: (e: OutboxEvent, reason: string) => Promise<boolean>) {
  const log: string[] = [];
  const core = new ConsumerCore({ name: 'test', logger: silentLogger, context: () => ({}), onError: (operation) => void log.push(`error ${operation}`) });
  const inbox = {
    process: async (): Promise<InboxOutcome> => {
      log.push('handled');
      return { status: 'processed' };
    },
    recordDead,
  };
  const deliveries = new DeliveryCore<string>({
    core,
    handler: { kind: 'inbox', inbox },
    concurrency: 4,
    batch: 10,
    port: {
      ack: (m) => void log.push(`ack ${m}`),
      deadLetter: async (m, reason, _e, _a, kept) => {
        log.push(`dead ${m}: ${reason}${kept ? '' : ' (not kept)'}`);
        return true;
      },
      release: (m) => void log.push(`release ${m}`),
      admit: () => ({ deadLetter: 'delivered 12 times' }),
    },
  });
  return { core, deliveries, log };
}

it('records the event dead in the inbox, retrying through an outage, then dead-letters the message without handling it', async () => {
  let calls = 0;
  const { core, deliveries, log } = setup(async (_e, reason) => {
    if (++calls < 3) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    log.push(`recorded: ${reason}`);
    return true;
  });
  await core.start(async () => {});
  deliveries.accept('m1', { ok: true, event: event() });
  await deliveries.onIdle();
  assert.deepEqual(log, ['error inbox', 'error inbox', 'recorded: delivered 12 times', 'dead m1: delivered 12 times']);
  await core.stop(async () => {});
});

it('a stop during the outage releases the message: no dead letter without the inbox row', async () => {
  const { core, deliveries, log } = setup(async () => {
    throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
  });
  await core.start(async () => {});
  deliveries.accept('m1', { ok: true, event: event() });
  await new Promise((r) => setTimeout(r, 50));
  await core.stop(async () => {
    await deliveries.onIdle();
  });
  assert.ok(!log.some((l) => l.startsWith('dead') || l === 'handled'), log.join('\n'));
  assert.equal(log.at(-1), 'release m1');
});
