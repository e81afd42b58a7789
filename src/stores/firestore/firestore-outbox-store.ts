import { FieldValue, Timestamp, type DocumentReference, type Firestore, type Transaction, type WriteBatch } from '@google-cloud/firestore';
import { ConfigError, InvalidEventError, PayloadTooLargeError } from '../../core/errors.ts';
import type { OutboxStore, PreparedEvent, TransactionProblem } from '../../core/ports.ts';
import { uuidv7 } from '../../core/uuid.ts';
import { bucketOf, collections, documentBytes, DOCUMENT_OVERHEAD_BYTES, firestoreNames, MAX_COMMIT_BYTES, MAX_DOCUMENT_BYTES, MAX_QUERIED_BYTES, type FirestoreCollections, type FirestoreNames, type FirestoreNamesOptions } from './firestore-names.ts';

/**
 * The caller's transaction on Firestore: the `Transaction` that
 * `firestore.runTransaction` passes to its callback, or a `WriteBatch`
 * (`firestore.batch()`) the caller commits. A `pg` client does not fit.
 */
export type FirestoreTx = Transaction | WriteBatch;

export interface FirestoreOutboxStoreOptions extends FirestoreNamesOptions {
  /** The Firestore instance the caller's transactions belong to. Required. */
  readonly firestore: Firestore;
}

/**
 * The write side of a Firestore outbox: one document per event, written
 * through the caller's `Transaction` or `WriteBatch` (a `set`, no read), so
 * the events exist exactly when the caller's transaction commits.
 *
 * Outbox order is commit order: each event carries `ts`, a server timestamp
 * that Firestore fills in with its transaction's commit time, and its
 * document id is a UUIDv7 made here, which orders the events of one
 * transaction (and ties). Two transactions that write the
 * same document (the aggregate) commit one after the other with increasing
 * commit times, so one aggregate's events are ordered as its writes were
 * (docs/stores/firestore.md#per-key-order). No counter document, no extra
 * read and no contention of its own.
 *
 * @example
 * const outbox = createOutbox({ store: new FirestoreOutboxStore({ firestore }), events: [OrderCreated] });
 * await firestore.runTransaction(async (tx) => {
 *   const order = await tx.get(orderRef);           // reads first: Firestore's rule
 *   tx.set(orderRef, { ...order.data(), total });
 *   await outbox.enqueue(tx, OrderCreated({ aggregateId: id, payload }));
 * });
 */
export class FirestoreOutboxStore implements OutboxStore<FirestoreTx> {
  readonly names: FirestoreNames;
  readonly #cols: FirestoreCollections;

  constructor(options: FirestoreOutboxStoreOptions) {
    if (!options?.firestore || typeof (options.firestore as { collection?: unknown }).collection !== 'function') {
      throw new ConfigError('firestore', 'is required: pass the Firestore instance your transactions come from, e.g. new FirestoreOutboxStore({ firestore: new Firestore() })');
    }
    this.names = firestoreNames(options);
    this.#cols = collections(options.firestore, this.names);
  }

  async insert(tx: FirestoreTx, events: readonly PreparedEvent[]): Promise<void> {
    if (events.length === 0) return;
    const docs: [DocumentReference, Record<string, unknown>][] = [];
    const autocommit = isFirestore(tx);
    let total = autocommit ? 0 : earlierBytes(tx);
    events.forEach((e, i) => {
      const at = events.length === 1 ? 'event' : `events[${i}]`;
      // Counted, not encoded: a TextEncoder would copy every payload once more on the producer's path.
      const bytes = Buffer.byteLength(e.payloadJson, 'utf8') + Buffer.byteLength(JSON.stringify(e.headers), 'utf8');
      if (bytes > MAX_DOCUMENT_BYTES - DOCUMENT_OVERHEAD_BYTES) {
        throw new PayloadTooLargeError(`${at}.payload`, bytes, MAX_DOCUMENT_BYTES - DOCUMENT_OVERHEAD_BYTES);
      }
      const keyBytes = Buffer.byteLength(e.key, 'utf8');
      if (keyBytes > MAX_QUERIED_BYTES) {
        throw new InvalidEventError(
          `${at}.key`,
          `is ${keyBytes} bytes in UTF-8, over the ${MAX_QUERIED_BYTES} bytes Firestore queries look at (they compare only a string's first ${MAX_QUERIED_BYTES} bytes, so the relay could not tell this key from another with the same beginning); pass a shorter key, e.g. a hash of the aggregate id`,
        );
      }
      const ref = this.#cols.outbox.doc(uuidv7());
      const data = eventDocument(e);
      total += documentBytes(ref.path, data);
      if (total > MAX_COMMIT_BYTES) {
        throw new InvalidEventError(
          at,
          `would bring the outbox documents of this ${autocommit ? 'batch' : 'transaction'} to ${total} bytes, over the ${MAX_COMMIT_BYTES} bytes txbox writes in one Firestore commit (Firestore refuses a request over 10 MiB, and your own writes share it); enqueue these events in separate transactions, or make the payloads smaller`,
          { code: 'TXBOX_PAYLOAD_TOO_LARGE' },
        );
      }
      docs.push([ref, data]);
    });
    const target = tx as { set(ref: DocumentReference, data: Record<string, unknown>): unknown };
    if (autocommit) {
      // allowAutocommit: the events commit on their own, in one batch.
      const batch = (tx as unknown as Firestore).batch();
      for (const [ref, data] of docs) batch.set(ref, data);
      await batch.commit();
      return;
    }
    for (const [ref, data] of docs) target.set(ref, data);
    const ops = writesOf(tx);
    written.set(tx, { bytes: total, writes: ops?.length ?? 0, last: ops?.[ops.length - 1] });
  }

  /** A Firestore `Transaction` or `WriteBatch`; the Firestore instance itself writes outside any transaction (autocommit). */
  checkTransaction(tx: unknown): TransactionProblem | undefined {
    if (isFirestore(tx)) {
      return {
        kind: 'autocommit',
        message: 'is the Firestore instance, not a transaction: the events would commit on their own even if your business change fails. Pass the Transaction of firestore.runTransaction(async (tx) => ...), or a WriteBatch (firestore.batch()) that also holds your business writes',
      };
    }
    const t = tx as { set?: unknown; create?: unknown; delete?: unknown; update?: unknown; get?: unknown; commit?: unknown };
    const writes = typeof t.set === 'function' && typeof t.create === 'function' && typeof t.delete === 'function' && typeof t.update === 'function';
    if (!writes || (typeof t.get !== 'function' && typeof t.commit !== 'function')) {
      return { kind: 'invalid', message: 'is not a Firestore Transaction or WriteBatch: pass the tx of firestore.runTransaction(async (tx) => ...), or a firestore.batch() you commit yourself' };
    }
    if (finishedTransaction(tx)) {
      return {
        kind: 'invalid',
        message: 'is a Transaction that already committed or rolled back (its runTransaction callback returned or threw): Firestore would drop the events without an error. Call enqueue inside the callback and await it there',
      };
    }
    return undefined;
  }
}

/**
 * A Transaction whose attempt ended: it had begun on the server (a read) and
 * then committed or rolled back, and no read began it again. Read from
 * @google-cloud/firestore 8.x's private fields (no public state says it; a
 * write-only transaction that ended cannot be told apart from a fresh one).
 * A retried attempt is not taken for it: Firestore allows reads only before
 * writes, so by the time an attempt that reads calls enqueue, its first read
 * has begun it again.
 */
function finishedTransaction(tx: unknown): boolean {
  const t = tx as { get?: unknown; _writeBatch?: unknown; _transactionIdPromise?: unknown; _prevTransactionId?: unknown };
  return typeof t.get === 'function' && t._writeBatch !== undefined && t._prevTransactionId !== undefined && t._transactionIdPromise === undefined;
}

/**
 * The bytes of outbox documents each transaction or batch got so far, with
 * its writes then and the last of them: Firestore runs a contended
 * transaction's callback again with the same Transaction, its writes cleared.
 */
const written = new WeakMap<object, { bytes: number; writes: number; last: unknown }>();

/** The writes a Transaction or WriteBatch holds, read from @google-cloud/firestore 8.x's private fields; undefined for another object (its bytes then only add up). */
function writesOf(tx: unknown): readonly unknown[] | undefined {
  const t = tx as { _ops?: unknown; _writeBatch?: { _ops?: unknown } };
  const ops = t._writeBatch !== undefined ? t._writeBatch._ops : t._ops;
  return Array.isArray(ops) ? ops : undefined;
}

/** The bytes earlier enqueue calls wrote in `tx`: 0 when Firestore cleared its writes since (the last one recorded is gone). */
function earlierBytes(tx: object): number {
  const sent = written.get(tx);
  if (sent === undefined) return 0;
  const ops = writesOf(tx);
  return ops === undefined || ops[sent.writes - 1] === sent.last ? sent.bytes : 0;
}

function isFirestore(value: unknown): boolean {
  const v = value as { collection?: unknown; runTransaction?: unknown; batch?: unknown };
  return v !== null && typeof v === 'object' && typeof v.collection === 'function' && typeof v.runTransaction === 'function' && typeof v.batch === 'function';
}

/** The document of one event (docs/stores/firestore.md#documents). */
export function eventDocument(e: PreparedEvent, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: e.id,
    type: e.type,
    aggregateType: e.aggregateType,
    aggregateId: e.aggregateId,
    key: e.key,
    bucket: bucketOf(e.key),
    destination: e.destination,
    payload: e.payloadJson,
    headers: { ...e.headers },
    occurredAt: Timestamp.fromDate(e.occurredAt),
    version: e.version,
    ...pendingFields(),
    replayId: null,
    ...extra,
  };
}

/** The fields of an event not yet published: its position (commit time), state and delivery record. Also what a replay resets. */
export function pendingFields(): Record<string, unknown> {
  return { ts: FieldValue.serverTimestamp(), state: 'pending', attempts: 0, nextAttemptAt: null, lastError: null, routesDone: [], doneAt: null };
}
