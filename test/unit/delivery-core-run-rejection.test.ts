/**
 * DeliveryCore's key runs (keyRun > 1, the SQS consumer): one inbox call
 * for a key's messages, whose outcomes it awaits one at a time, dead-lettering
 * or acking each. While it awaits the dead-letter copy of the first, the
 * later outcomes can reject (the inbox store went down): they must not be
 * unhandled rejections, which end a Node process by default. An in-memory
 * inbox store (a unit of the consumer core, not of a database).
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { createInbox, uuidv7, type OutboxEvent } from '../../src/index.ts';
import { ConsumerCore } from '../../src/inbox/consumer/consumer-core.ts';
import { DeliveryCore } from '../../src/inbox/consumer/delivery-core.ts';
import { silentLogger } from '../../src/core/logger.ts';
import { memoryInboxStore } from '../helpers/memory-inbox-store.ts';

function event(version: number, quantity: number): OutboxEvent {
  return { id: uuidv7(), type: 'StockChanged', aggregateType: 'Sku', aggregateId: 'a', key: 'Sku:a', destination: 'stock', payload: { quantity }, headers: {}, occurredAt: new Date(), version };
}

it("a key run's later outcomes that reject while the first is dead-lettered are not unhandled", async () => {
  const refused = (): Error => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
  let down = false;
  const store = memoryInboxStore({
    before: async () => {
      await new Promise((r) => setTimeout(r, 5));
      if (down) throw refused();
    },
    async recordFailure() {
      if (down) throw refused();
      setTimeout(() => (down = true), 0); // its last attempt; the database goes down right after
      return { attempts: 12, dead: true };
    },
  });
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  const inbox = createInbox({ store: store as never, consumer: 'c', autoStart: false });
  inbox.on('StockChanged', async (e) => {
    if ((e.payload as { quantity: number }).quantity === 0) throw new Error('poison');
  });
  const core = new ConsumerCore({ name: 'test', logger: silentLogger, context: () => ({}), onError: () => {} });
  const settled: string[] = [];
  const deliveries = new DeliveryCore<string>({
    core,
    handler: { kind: 'inbox', inbox },
    concurrency: 4,
    batch: 10,
    keyRun: 10,
    port: {
      ack: (m) => void settled.push(`ack ${m}`),
      deadLetter: async (m) => {
        await new Promise((r) => setTimeout(r, 50)); // the dead-letter copy's round trip
        settled.push(`dead ${m}`);
        return true;
      },
      release: (m) => void settled.push(`release ${m}`),
    },
  });
  try {
    [event(1, 0), event(2, 1), event(3, 1)].forEach((e, i) => deliveries.accept(`m${i}`, { ok: true, event: e }));
    setTimeout(() => (down = false), 200);
    await new Promise((r) => setTimeout(r, 700));
    assert.deepEqual(unhandled, []);
    assert.ok(settled.includes('dead m0'), settled.join(', '));
  } finally {
    process.off('unhandledRejection', onUnhandled);
    core.abort?.();
  }
});
