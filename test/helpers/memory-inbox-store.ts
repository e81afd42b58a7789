/**
 * An in-memory inbox store for unit tests of the consumer core (not of a
 * database): runs every handler of a batch, each event counted as new;
 * `before` runs first in each batch (a delay, an outage), `recordFailure`
 * says what a failed attempt becomes. Held events and retries: none.
 */
import type { OutboxEvent } from 'txbox';
import { InboxBatchError } from '../../src/core/inbox-ports.ts';

export function memoryInboxStore(options: {
  before?: () => Promise<void>;
  recordFailure: () => Promise<{ attempts: number; dead: boolean }>;
}) {
  return {
    async runBatch(_consumer: string, events: readonly OutboxEvent[], handler: (tx: unknown, e: OutboxEvent) => Promise<void>) {
      await options.before?.();
      for (let i = 0; i < events.length; i++) {
        try {
          await handler({}, events[i]!);
        } catch (err) {
          throw new InboxBatchError(i, err);
        }
      }
      return { ran: events.map(() => true), heldKeys: [] as string[] };
    },
    recordFailure: options.recordFailure,
    async recheckHeld() {
      return [] as string[];
    },
    async hold() {},
    async redrivable() {
      return [] as OutboxEvent[];
    },
  };
}
