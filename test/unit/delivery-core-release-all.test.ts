/**
 * DeliveryCore at a stop that ran out of time: `releaseAll()` hands every
 * message still held back to the broker (a RabbitMQ nack with requeue, an SQS
 * visibility reset). A message whose inbox transaction was still running then
 * must not be acked or dead-lettered as well when it finishes: the broker has
 * it back (RabbitMQ closes the channel on an ack of a settled delivery tag,
 * and a dead-letter copy would duplicate a message that is redelivered).
 * Before 28 Nov 2026 both went out. An in-memory inbox store (a unit of the
 * consumer core, not of a database).
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox, uuidv7, type OutboxEvent } from '../../src/index.ts';
import { ConsumerCore } from '../../src/inbox/consumer/consumer-core.ts';
import { DeliveryCore } from '../../src/inbox/consumer/delivery-core.ts';
import { silentLogger } from '../../src/core/logger.ts';
import { memoryInboxStore } from '../helpers/memory-inbox-store.ts';

function event(key: string, poison: boolean): OutboxEvent {
  return { id: uuidv7(), type: 'Noted', aggregateType: 'Note', aggregateId: key, key, destination: 'notes', payload: { poison }, headers: {}, occurredAt: new Date(), version: null };
}

it('a message released by releaseAll() is neither acked nor dead-lettered when its inbox call ends', async () => {
  const store = memoryInboxStore({ recordFailure: async () => ({ attempts: 1, dead: true }) });
  const inbox = createInbox({ store: store as never, consumer: 'c', autoStart: false, batch: { maxSize: 1 } });
  inbox.on('Noted', async (e) => {
    await new Promise((r) => setTimeout(r, 200)); // a slow handler, still running at the stop's deadline
    if ((e.payload as { poison: boolean }).poison) throw new Error('poison');
  });
  const core = new ConsumerCore({ name: 'test', logger: silentLogger, context: () => ({}), onError: () => {} });
  const settled: string[] = [];
  const deliveries = new DeliveryCore<string>({
    core,
    handler: { kind: 'inbox', inbox },
    concurrency: 4,
    batch: 10,
    port: {
      ack: (m) => void settled.push(`ack ${m}`),
      deadLetter: async (m) => {
        settled.push(`dead ${m}`);
        return true;
      },
      release: (m) => void settled.push(`release ${m}`),
    },
  });
  deliveries.accept('ok', { ok: true, event: event('a', false) });
  deliveries.accept('poison', { ok: true, event: event('b', true) });
  await new Promise((r) => setTimeout(r, 50));
  deliveries.releaseAll(); // the stop's deadline
  await deliveries.onIdle();
  await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(settled.sort(), ['release ok', 'release poison']);
});
