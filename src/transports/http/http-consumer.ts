import type { InboxProcessor } from '../../core/inbox-ports.ts';
import type { InboxQueue } from '../../inbox/inbox-worker.ts';
import { ConfigError } from '../../core/errors.ts';
import { createWebhookReceiver, WebhookRefusedError, WebhookUnavailableError, type WebhookReceiver, type WebhookReceiverOptions } from './http-receiver.ts';
import { thrownText } from '../../core/error-text.ts';
import { isStoreUnreachable } from '../../core/store-errors.ts';

/** The inbox store out of reach (down, connection lost, full): 503. Any other rejection stays a 500, a failure of this event. */
function unavailableOnRejection<T>(call: Promise<T>): Promise<T> {
  return call.catch((err: unknown) => {
    if (isStoreUnreachable(err)) throw new WebhookUnavailableError(`the inbox store is unreachable: ${thrownText(err)}`);
    throw err;
  });
}

export interface WebhookConsumerOptions extends Omit<WebhookReceiverOptions, 'onEvent'> {
  /** Runs handlers at once: the answer is 2xx only after the handler's transaction committed. Give this or `queue`. */
  readonly inbox?: InboxProcessor;
  /** Worker mode: only stores the event in the inbox queue, answers 2xx, and lets inbox workers run handlers. */
  readonly queue?: InboxQueue;
}

/**
 * The HTTP side of the inbox: a webhook receiver that verifies the Standard
 * Webhooks signature (401 otherwise; malformed bodies get 400 and never
 * reach the inbox) and answers 2xx only after the inbox committed. A handler
 * failure answers 500, so the sender retries; a redelivered id is answered
 * 204 without running the handler again. The inbox store failing (an outage)
 * answers 503 (the sender pauses, counting no attempt); an event the store
 * refuses and cannot record answers 422 (the sender parks it).
 *
 * @example
 * const consumer = createWebhookConsumer({ inbox, secret: process.env.WEBHOOK_SECRET }); // unset throws
 * const { url } = await consumer.listen({ port: 8080 });
 */
export function createWebhookConsumer(options: WebhookConsumerOptions): WebhookReceiver {
  const { inbox, queue, ...receiver } = options;
  if (!inbox === !queue) throw new ConfigError('inbox', 'give exactly one of inbox (handle at once) or queue (worker mode)');
  return createWebhookReceiver({
    ...receiver,
    onEvent: async (event) => {
      if (queue) {
        // The parser refused what the inbox can never hold (400); a refusal left is the store's: 422, the sender parks it.
        const [refused] = await unavailableOnRejection(queue.receive([event]));
        if (refused) throw new WebhookRefusedError(refused.reason);
        return;
      }
      // A rejection with the inbox store out of reach: 503, the sender pauses the destination without
      // counting attempts, as for a broker that is down; handler failures are outcomes.
      const outcome = await unavailableOnRejection(inbox!.process(event));
      if (outcome.status === 'retry') throw new Error(`handler failed (attempt ${outcome.attempts}); retry`);
      // Dead without an inbox row (the store refused the event itself): acking it would leave no trace.
      if (outcome.status === 'dead' && outcome.unrecorded) throw new WebhookRefusedError(outcome.error);
    },
  });
}
