import { ConfigError } from '../../core/errors.ts';
import type { InboxProcessor } from '../../core/inbox-ports.ts';
import type { InboxQueue } from '../inbox-worker.ts';

/** Where a consumer hands events: the inbox (handlers run here), or the inbox queue (worker mode). */
export type ConsumerHandler = { readonly kind: 'inbox'; readonly inbox: InboxProcessor } | { readonly kind: 'queue'; readonly queue: InboxQueue };

/**
 * Checks a consumer's `inbox` / `queue` options: exactly one, of the right kind.
 *
 * @example
 * const handler = resolveConsumerHandler(options.inbox, options.queue); // { kind: 'inbox', inbox }
 */
export function resolveConsumerHandler(inbox: InboxProcessor | undefined, queue: InboxQueue | undefined): ConsumerHandler {
  if (!inbox === !queue) throw new ConfigError('inbox', 'give exactly one of inbox (handle at once) or queue (worker mode)');
  if (inbox && typeof inbox.process !== 'function') throw new ConfigError('inbox', 'must be an Inbox (createInbox(...))');
  if (queue && typeof queue.receive !== 'function') throw new ConfigError('queue', 'must be an InboxQueue');
  return inbox ? Object.freeze({ kind: 'inbox' as const, inbox }) : Object.freeze({ kind: 'queue' as const, queue: queue! });
}
