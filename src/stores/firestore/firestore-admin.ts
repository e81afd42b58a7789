import { FieldValue, type Firestore, type QueryDocumentSnapshot, type Timestamp } from '@google-cloud/firestore';
import { ConfigError } from '../../core/errors.ts';
import { uuidv7 } from '../../core/uuid.ts';
import { BUCKETS, collections, comparePositions, documentBytes, firestoreNames, MAX_COMMIT_BYTES, type FirestoreCollections, type FirestoreNames, type FirestoreNamesOptions } from './firestore-names.ts';
import { pendingFields } from './firestore-outbox-store.ts';
import { FirestoreStatusReader, type FirestoreOutboxStatus } from './firestore-status.ts';

export interface FirestoreParkedEvent {
  /** The event document's id (a UUIDv7; the outbox position is its `ts`, then this id). */
  readonly docId: string;
  readonly id: string;
  readonly type: string;
  readonly key: string;
  readonly destination: string;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly parkedAt: Date | null;
  readonly occurredAt: Date;
}

/** Which parked events an action applies to: some event ids, or all of them (optionally of one destination). An array is ids. */
export type FirestoreParkedSelector = readonly string[] | { readonly ids: readonly string[] } | { readonly all: true; readonly destination?: string };

export interface FirestoreReplayFilter {
  /** By `occurredAt`, inclusive. */
  readonly from?: Date;
  /** By `occurredAt`, exclusive. */
  readonly to?: Date;
  readonly key?: string;
  readonly type?: string;
  readonly destination?: string;
}

/** Documents per transaction or batch of an admin action (each is a write, and an audit write). */
const CHUNK = 200;
const IN_LIMIT = 30;

/**
 * Operator actions on a Firestore outbox: status, parked events (list,
 * retry, skip, discard) and replay, each action audited in
 * `<collection>_audit`, and `prepare` (the bucket documents). Used by the
 * CLI (`txbox migrate|status|parked|replay` on a firestore:// URL).
 */
export class FirestoreAdmin {
  readonly names: FirestoreNames;
  readonly #db: Firestore;
  readonly #cols: FirestoreCollections;
  readonly #status: FirestoreStatusReader;

  constructor(firestore: Firestore, options: FirestoreNamesOptions = {}) {
    if (!firestore || typeof (firestore as { collection?: unknown }).collection !== 'function') throw new ConfigError('firestore', 'is required: pass a Firestore instance');
    this.names = firestoreNames(options);
    this.#db = firestore;
    this.#cols = collections(firestore, this.names);
    this.#status = new FirestoreStatusReader(firestore, this.names);
  }

  /**
   * Creates the bucket documents that do not exist yet (relays would create
   * them on their first lease), in one transaction: it reads and writes, so
   * it also proves the credentials may. Returns how many it created (0 the
   * second time).
   */
  async prepare(): Promise<number> {
    const refs = Array.from({ length: BUCKETS }, (_, b) => this.#cols.buckets.doc(String(b)));
    return this.#db.runTransaction(async (tx) => {
      const snaps = await tx.getAll(...refs);
      const missing = snaps.filter((s) => !s.exists);
      for (const s of missing) tx.create(s.ref, { owner: null, token: 0, leaseUntil: null });
      return missing.length;
    });
  }

  /** One snapshot for `txbox status`: backlog per destination, relays, the collection's size. */
  status(): Promise<FirestoreOutboxStatus> {
    return this.#status.status();
  }

  /** Parked events, oldest first, without payloads. */
  async listParked(options: { destination?: string; limit?: number } = {}): Promise<FirestoreParkedEvent[]> {
    let q = this.#cols.outbox.where('state', '==', 'parked');
    if (options.destination !== undefined) q = q.where('destination', '==', options.destination);
    const docs = sortByPosition((await q.get()).docs).slice(0, options.limit ?? 100);
    return docs.map((d) => ({
      docId: d.id,
      id: d.get('id') as string,
      type: d.get('type') as string,
      key: d.get('key') as string,
      destination: d.get('destination') as string,
      attempts: Number(d.get('attempts') ?? 0),
      lastError: (d.get('lastError') as string | null) ?? null,
      parkedAt: d.get('parkedAt')?.toDate() ?? null,
      occurredAt: d.get('occurredAt').toDate(),
    }));
  }

  /** Makes parked events pending again with a fresh attempt count. Returns the ids changed, in outbox order. */
  retryParked(selector: FirestoreParkedSelector, actor: string): Promise<string[]> {
    return this.#parked('retry', selector, actor, { state: 'pending', attempts: 0, nextAttemptAt: null });
  }

  /** Marks parked events as skipped: they will not be published and no longer hold their key. */
  skipParked(selector: FirestoreParkedSelector, actor: string): Promise<string[]> {
    return this.#parked('skip', selector, actor, { state: 'skipped', doneAt: FieldValue.serverTimestamp() });
  }

  /** Deletes parked events. The audit collection keeps their ids. */
  discardParked(selector: FirestoreParkedSelector, actor: string): Promise<string[]> {
    return this.#parked('discard', selector, actor, null);
  }

  async #parked(action: string, selector: FirestoreParkedSelector, actor: string, change: Record<string, unknown> | null): Promise<string[]> {
    const ids = Array.isArray(selector) ? (selector as readonly string[]) : 'ids' in (selector as object) ? (selector as { ids: readonly string[] }).ids : null;
    const destination = ids === null ? ((selector as { destination?: string }).destination ?? null) : null;
    if (ids !== null && ids.length === 0) throw new ConfigError('ids', 'name at least one event id, or choose all');
    const queries = [];
    const base = this.#cols.outbox.where('state', '==', 'parked');
    if (ids === null) queries.push(destination === null ? base : base.where('destination', '==', destination));
    else for (let i = 0; i < ids.length; i += IN_LIMIT) queries.push(base.where('id', 'in', ids.slice(i, i + IN_LIMIT).map((id) => id.toLowerCase())));
    const found = sortByPosition((await Promise.all(queries.map((q) => q.get()))).flatMap((s) => s.docs));
    const changed: string[] = [];
    for (let i = 0; i < found.length; i += CHUNK) {
      const part = found.slice(i, i + CHUNK);
      // Each document changes only if it is still parked when the transaction commits.
      const done = await this.#db.runTransaction(async (tx) => {
        const snaps = await tx.getAll(...part.map((d) => d.ref));
        const ids: string[] = [];
        for (const snap of snaps) {
          if (!snap.exists || snap.get('state') !== 'parked') continue;
          if (change === null) tx.delete(snap.ref);
          else tx.update(snap.ref, change);
          tx.set(this.#cols.audit.doc(), { at: FieldValue.serverTimestamp(), action, eventId: snap.get('id'), docId: snap.id, actor, detail: snap.get('lastError') ?? null });
          ids.push(snap.get('id') as string);
        }
        return ids;
      });
      changed.push(...done);
    }
    return changed;
  }

  /**
   * Re-publishes published events matching `filter` as new deliveries with
   * their original ids, appended in their original order after whatever is
   * pending (each batch commits after the previous one, and a batch's copies
   * keep their order in their UUIDv7 ids), `chunk` documents per batch (at
   * most 250) and at most `maxBytes` of documents (Firestore refuses a request
   * over 10 MiB; a document alone may be up to 1 MiB). Audited before the
   * first copy (`replay-start`) and after the last (`replay`, with the
   * count), as on PostgreSQL.
   */
  async replay(filter: FirestoreReplayFilter, actor: string, onProgress?: (copied: number) => void, chunk = 250, maxBytes = MAX_COMMIT_BYTES): Promise<{ replayId: string; copied: number }> {
    const replayId = uuidv7();
    await this.#cols.audit.doc().set({ at: FieldValue.serverTimestamp(), action: 'replay-start', actor, detail: JSON.stringify({ replayId, ...filter }) });
    let q = this.#cols.outbox.where('state', '==', 'published').where('replayId', '==', null);
    if (filter.destination !== undefined) q = q.where('destination', '==', filter.destination);
    if (filter.key !== undefined) q = q.where('key', '==', filter.key);
    if (filter.type !== undefined) q = q.where('type', '==', filter.type);
    // Firestore would need a composite index per combination of filters for a range on occurredAt: the range is applied here.
    const inRange = (d: QueryDocumentSnapshot): boolean => {
      const at = (d.get('occurredAt') as Timestamp).toMillis();
      return (filter.from === undefined || at >= filter.from.getTime()) && (filter.to === undefined || at < filter.to.getTime());
    };
    const docs = sortByPosition((await q.get()).docs.filter(inRange));
    const perBatch = Math.min(chunk, 250);
    let copied = 0;
    let batch = this.#db.batch();
    let inBatch = 0;
    let bytes = 0;
    const commit = async (): Promise<void> => {
      await batch.commit();
      copied += inBatch;
      onProgress?.(copied);
      [batch, inBatch, bytes] = [this.#db.batch(), 0, 0];
    };
    for (const d of docs) {
      const data = d.data();
      const ref = this.#cols.outbox.doc(uuidv7());
      const copy = {
        ...data,
        headers: { ...(data.headers as Record<string, string>), 'txbox-replay-id': replayId },
        ...pendingFields(),
        replayId,
      };
      const size = documentBytes(ref.path, copy);
      // A batch ends at `chunk` documents, or before the document that would take it past `maxBytes`.
      if (inBatch > 0 && (inBatch >= perBatch || bytes + size > maxBytes)) await commit();
      batch.set(ref, copy);
      inBatch++;
      bytes += size;
    }
    if (inBatch > 0) await commit();
    await this.#cols.audit.doc().set({ at: FieldValue.serverTimestamp(), action: 'replay', actor, detail: JSON.stringify({ replayId, copied, ...filter }) });
    return { replayId, copied };
  }
}

function sortByPosition(docs: QueryDocumentSnapshot[]): QueryDocumentSnapshot[] {
  return docs.sort((a, b) => comparePositions({ ts: a.get('ts'), docId: a.id }, { ts: b.get('ts'), docId: b.id }));
}
