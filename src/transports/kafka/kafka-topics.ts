/**
 * Which topics exist, asked of the cluster with the admin client. With
 * auto-creation off, kafkajs meets a missing topic by refreshing metadata and
 * retrying until its retries run out, and only then fails, with a retriable
 * error; asking first turns that into a permanent "unroutable" at once. A
 * topic seen to exist is remembered for the transport's lifetime (forget()
 * drops it when a send reports it unknown); a missing one is asked about
 * again on its next event, so creating the topic is enough to unblock it.
 */
import type { Logger } from '../../core/logger.ts';
import type { AdminHandle, KafkaClient } from './kafka-client.ts';
import { untilAborted } from '../../core/abort.ts';

export class TopicCatalog {
  readonly #client: KafkaClient;
  readonly #logger: Logger;
  readonly #known = new Set<string>();
  #admin: Promise<AdminHandle> | null = null;
  /** One listing at a time, shared by the calls that ask meanwhile. */
  #listing: Promise<Set<string>> | null = null;
  /** Admin clients being closed after a failure. */
  readonly #dropping = new Set<Promise<void>>();

  constructor(client: KafkaClient, logger: Logger) {
    this.#client = client;
    this.#logger = logger;
  }

  /** The topics among `topics` that do not exist. Rejects with the client's error (cluster unreachable) or the signal's reason. */
  async missing(topics: Iterable<string>, signal: AbortSignal): Promise<Set<string>> {
    const unknown = new Set([...topics].filter((t) => !this.#known.has(t)));
    if (unknown.size === 0) return unknown;
    const existing = await untilAborted(this.#list(), signal);
    for (const t of unknown) {
      if (existing.has(t)) {
        this.#known.add(t);
        unknown.delete(t);
      }
    }
    return unknown;
  }

  forget(topic: string): void {
    this.#known.delete(topic);
  }

  /** Connects the admin client now (start() uses it to verify the cluster). */
  async connect(signal: AbortSignal): Promise<void> {
    await untilAborted(this.#adminHandle(), signal);
  }

  async close(): Promise<void> {
    const admin = this.#admin;
    this.#admin = null;
    await Promise.allSettled([this.#listing, ...this.#dropping]);
    if (admin) await admin.then((a) => a.close()).catch(() => {});
  }

  #list(): Promise<Set<string>> {
    this.#listing ??= (async () => {
      try {
        const admin = await this.#adminHandle();
        return new Set(await admin.listTopics());
      } catch (err) {
        this.#dropAdmin();
        throw err;
      } finally {
        this.#listing = null;
      }
    })();
    return this.#listing;
  }

  #adminHandle(): Promise<AdminHandle> {
    if (this.#admin === null) {
      const opening = this.#client.openAdmin();
      opening.catch(() => {
        if (this.#admin === opening) this.#admin = null;
      });
      this.#admin = opening;
    }
    return this.#admin;
  }

  /** After a failed listing: reconnect next time rather than trust the old connection. */
  #dropAdmin(): void {
    const admin = this.#admin;
    this.#admin = null;
    if (admin === null) return;
    const done = admin
      .then((a) => a.close())
      .catch((err: unknown) => this.#logger.debug({ component: 'kafka', error: String(err) }, 'closing the admin client failed'))
      .finally(() => this.#dropping.delete(done));
    this.#dropping.add(done);
  }
}
