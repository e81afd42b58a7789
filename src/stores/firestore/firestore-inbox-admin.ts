import { FieldValue, Timestamp, type DocumentReference, type Firestore, type Query, type QueryDocumentSnapshot } from '@google-cloud/firestore';
import { ConfigError } from '../../core/errors.ts';
import { canonicalEventId } from '../../core/inbound-event.ts';
import type { DeadEvent, HeldEvent, InboxConsumerStatus } from '../postgres/postgres-inbox-admin.ts';
import { checkConsumer, firestoreInboxNames, type FirestoreInboxNames, type FirestoreInboxNamesOptions } from './firestore-names.ts';

export type { DeadEvent, HeldEvent, InboxConsumerStatus } from '../postgres/postgres-inbox-admin.ts';

type Selector = { ids: readonly string[] } | { all: true; consumer?: string };

/** Documents per transaction of an action (each is a write, and an audit write: under Firestore's 500 writes a commit). */
const CHUNK = 200;
/** Deletes per batch of `prune` (Firestore commits at most 500 writes). */
const MAX_PRUNE_BATCH = 500;
const IN_LIMIT = 30;

const num = (v: unknown): number => Number(v ?? 0);
const date = (v: unknown): Date | null => (v === null || v === undefined ? null : (v as Timestamp).toDate());

/**
 * Operations on a Firestore inbox: status, dead and held events (list,
 * operator retry, discard) and retention of processed documents; each retry
 * or discard is audited in `<collection>_audit`. The same operations as
 * `PostgresInboxAdmin` and `MysqlInboxAdmin`, except that `status` takes the
 * consumers to count (Firestore cannot group by consumer).
 */
export class FirestoreInboxAdmin {
  readonly names: FirestoreInboxNames;
  readonly #db: Firestore;

  constructor(firestore: Firestore, options: FirestoreInboxNamesOptions = {}) {
    if (!firestore || typeof (firestore as { collection?: unknown }).collection !== 'function') throw new ConfigError('firestore', 'is required: pass a Firestore instance');
    this.names = firestoreInboxNames(options);
    this.#db = firestore;
  }

  /**
   * Processed, failed, dead, held and retry counts of each named consumer
   * (aggregation queries: Firestore cannot list the consumers of a
   * collection, so name them), with the processed count of the last minute
   * and the last processing time, by the database's clock.
   */
  async status(consumers: readonly string[]): Promise<InboxConsumerStatus[]> {
    if (!Array.isArray(consumers) || consumers.length === 0) throw new ConfigError('consumers', 'name at least one consumer, e.g. ["billing"] (Firestore cannot list them)');
    return Promise.all(
      [...consumers].sort().map(async (consumer) => {
        const of = (status: string) => this.#status(status, consumer);
        const [last, ...counts] = await Promise.all([
          of('processed').orderBy('processedAt', 'desc').limit(1).select('processedAt').get(),
          ...['processed', 'failed', 'dead', 'held', 'retry'].map(async (status) => (await of(status).count().get()).data().count),
        ]);
        const lastAt = (last.docs[0]?.get('processedAt') as Timestamp | undefined) ?? null;
        const minuteAgo = Timestamp.fromMillis(last.readTime.toMillis() - 60_000);
        const recent = lastAt !== null && lastAt.toMillis() > minuteAgo.toMillis() ? (await of('processed').where('processedAt', '>', minuteAgo).count().get()).data().count : 0;
        const [processed, failed, dead, held, retry] = counts as number[];
        return { consumer, processed: processed!, failed: failed!, dead: dead!, held: held!, retry: retry!, processedLastMinute: recent, lastProcessedAt: lastAt?.toDate() ?? null };
      }),
    );
  }

  async listDead(options: { consumer?: string; limit?: number } = {}): Promise<DeadEvent[]> {
    return (await this.#list('dead', options)).map(({ version: _v, heldAt: _h, ...dead }) => dead);
  }

  /**
   * Held events (waiting for an earlier version of their key), oldest first:
   * `lastError` is the hold reason, `version` the event's version, `heldAt`
   * when it was last held or re-checked.
   */
  listHeld(options: { consumer?: string; limit?: number } = {}): Promise<HeldEvent[]> {
    return this.#list('held', options);
  }

  #status(status: string, consumer: string | null): Query {
    const q = this.#db.collection(this.names.inbox).where('status', '==', status);
    return consumer === null ? q : q.where('consumer', '==', checkConsumer(consumer));
  }

  async #list(status: 'dead' | 'held', options: { consumer?: string; limit?: number }): Promise<HeldEvent[]> {
    const limit = options.limit ?? 100;
    if (!Number.isSafeInteger(limit) || limit < 1) throw new ConfigError('limit', 'must be a positive integer, e.g. 100');
    const docs = (await this.#status(status, options.consumer ?? null).orderBy('receivedAt').limit(limit).get()).docs;
    return docs.map((d) => ({
      consumer: String(d.get('consumer')),
      id: String(d.get('eventId')),
      type: String(d.get('type')),
      key: String(d.get('key')),
      attempts: num(d.get('attempts')),
      lastError: (d.get('lastError') as string | null) ?? null,
      receivedAt: date(d.get('receivedAt'))!,
      version: d.get('version') === null || d.get('version') === undefined ? null : Number(d.get('version')),
      heldAt: date(d.get('heldAt')),
    }));
  }

  /** Marks dead events for another run; the consumer's inbox picks them up (`inbox.start()` or `redrive()`). Returns the ids changed. */
  retryDead(selector: Selector, actor: string): Promise<string[]> {
    return this.#act('retry', 'dead', { status: 'retry', attempts: 0 }, selector, actor);
  }

  /** Marks held events to run again now, like operator retries: one whose missing version was applied is applied, one whose gap is still open is held again. */
  retryHeld(selector: Selector, actor: string): Promise<string[]> {
    return this.#act('retry-held', 'held', { status: 'retry' }, selector, actor);
  }

  /** Deletes dead events (their ids stay in the audit collection); a later redelivery would run the handler again. */
  discardDead(selector: Selector, actor: string): Promise<string[]> {
    return this.#act('discard', 'dead', null, selector, actor);
  }

  async #act(action: string, status: 'dead' | 'held', change: Record<string, unknown> | null, selector: Selector, actor: string): Promise<string[]> {
    const ids = 'ids' in selector ? selector.ids.map((id) => canonicalEventId(id) ?? id) : null;
    if (ids !== null && ids.length === 0) throw new ConfigError('ids', 'name at least one event id, or choose all');
    const consumer = 'all' in selector ? (selector.consumer ?? null) : null;
    const queries: Query[] = [];
    if (ids === null) queries.push(this.#status(status, consumer));
    else for (let i = 0; i < ids.length; i += IN_LIMIT) queries.push(this.#status(status, null).where('eventId', 'in', ids.slice(i, i + IN_LIMIT)));
    const found = (await Promise.all(queries.map((q) => q.select().get()))).flatMap((s) => s.docs.map((d) => d.ref));
    const changed: string[] = [];
    for (let i = 0; i < found.length; i += CHUNK) {
      const part: DocumentReference[] = found.slice(i, i + CHUNK);
      // Each document changes only if it is still in `status` when the transaction commits.
      const done = await this.#db.runTransaction(async (tx) => {
        const snaps = await tx.getAll(...part);
        const out: { id: string; at: number }[] = [];
        for (const snap of snaps) {
          if (!snap.exists || snap.get('status') !== status) continue;
          if (change === null) tx.delete(snap.ref);
          else tx.update(snap.ref, change);
          tx.set(this.#db.collection(this.names.audit).doc(), {
            at: FieldValue.serverTimestamp(),
            action,
            consumer: snap.get('consumer'),
            eventId: snap.get('eventId'),
            actor,
            detail: snap.get('lastError') ?? null,
          });
          out.push({ id: snap.get('eventId') as string, at: (snap.get('receivedAt') as Timestamp | null)?.toMillis() ?? 0 });
        }
        return out;
      });
      changed.push(...done.sort((a, b) => a.at - b.at).map((d) => d.id));
    }
    return changed;
  }

  /**
   * Deletes processed documents older than `olderThanMs` (by `processedAt`,
   * on the database's clock: a query's read time) in batches of at most 500
   * deletes. A redelivery older than that would run its handler again: keep
   * them longer than any broker may redeliver.
   */
  async prune(olderThanMs: number, batchSize = MAX_PRUNE_BATCH): Promise<number> {
    if (!Number.isFinite(olderThanMs) || olderThanMs < 0) throw new ConfigError('olderThanMs', `must be a duration in ms (0 or more), got ${String(olderThanMs)}`);
    if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw new ConfigError('batchSize', 'must be a positive integer, e.g. 500');
    const size = Math.min(batchSize, MAX_PRUNE_BATCH);
    let total = 0;
    for (;;) {
      const page = await this.#status('processed', null).orderBy('processedAt').limit(size).select('processedAt').get();
      const cutoff = page.readTime.toMillis() - olderThanMs;
      const old = page.docs.filter((d: QueryDocumentSnapshot) => (d.get('processedAt') as Timestamp).toMillis() < cutoff);
      if (old.length > 0) {
        const batch = this.#db.batch();
        for (const d of old) batch.delete(d.ref);
        await batch.commit();
      }
      total += old.length;
      if (old.length < size) return total;
    }
  }
}
