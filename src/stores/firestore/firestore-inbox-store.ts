import { createHash } from 'node:crypto';
import {
  FieldValue,
  Timestamp,
  type DocumentData,
  type DocumentReference,
  type DocumentSnapshot,
  type Firestore,
  type Query,
  type QueryDocumentSnapshot,
  type Transaction,
} from '@google-cloud/firestore';
import { withoutPayloadText, type OutboxEvent } from '../../core/envelope.ts';
import { ConfigError, InvalidEventError } from '../../core/errors.ts';
import { canonicalEventId, quoteId, storableText } from '../../core/inbound-event.ts';
import { InboxBatchError, type InboxStore, type RunBatchOptions } from '../../core/inbox-ports.ts';
import { checkConsumer, documentBytes, DOCUMENT_OVERHEAD_BYTES, firestoreInboxNames, inboxDocId, MAX_DOCUMENT_BYTES, type FirestoreInboxNames, type FirestoreInboxNamesOptions } from './firestore-names.ts';

export interface FirestoreInboxStoreOptions extends FirestoreInboxNamesOptions {
  /** The Firestore instance the inbox runs its transactions on (the consumer service's database). Required. */
  readonly firestore: Firestore;
}

/** Statuses a new delivery (or an operator retry) may run again. */
const REOPENABLE = new Set(['failed', 'retry', 'held']);
/** Firestore's `in` filter takes at most 30 values. */
const IN_LIMIT = 30;
/** Held documents one re-check stamps at most (a transaction commits at most 500 writes). */
const RECHECK_STAMPS = 450;

const encoder = new TextEncoder();

const chunks = <T>(list: readonly T[], size: number): T[][] => {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += size) out.push(list.slice(i, i + size));
  return out;
};

/** The id as the inbox stores it (lower case, hyphenated); throws before any read for an id that is not a UUID (so nothing is marked). */
function storedId(id: string): string {
  const canonical = canonicalEventId(id);
  if (canonical === null) throw new InvalidEventError('id', `${quoteId(id)} is not a UUID; the inbox cannot store it`);
  return canonical;
}

/**
 * The event as JSON text, without `payloadJson` (the payload is in it
 * already, parsed). An envelope that cannot fit in a document is refused
 * with SQLSTATE 54000 (program limit exceeded): a deterministic store error,
 * so the inbox dead-letters the event after a bounded number of tries
 * instead of retrying it for ever (docs/inbox.md, input the inbox cannot store).
 */
function envelopeJson(e: OutboxEvent): string {
  const text = JSON.stringify(withoutPayloadText(e));
  const bytes = encoder.encode(text).length;
  if (bytes > MAX_DOCUMENT_BYTES - DOCUMENT_OVERHEAD_BYTES) {
    const message = `the envelope of event ${e.id} is ${bytes} bytes: over what a Firestore inbox document holds (${MAX_DOCUMENT_BYTES - DOCUMENT_OVERHEAD_BYTES} bytes)`;
    throw tooLarge(message);
  }
  return text;
}

/** The refusal of a document that cannot be stored: SQLSTATE 54000 (program limit exceeded), as PostgreSQL's, so the inbox counts it as deterministic. */
function tooLarge(message: string, cause?: unknown): Error {
  return Object.assign(new Error(message, cause === undefined ? undefined : { cause }), { code: '54000' });
}

/**
 * `doc` when Firestore can store it at `ref`: the whole document is measured
 * (the envelope, and the key, type and error text written next to it:
 * inbound keys and types have no length limit), else refused with 54000
 * before any write.
 */
function fitting(ref: DocumentReference, doc: DocumentData, eventId: string): DocumentData {
  const bytes = documentBytes(ref.path, doc);
  if (bytes > MAX_DOCUMENT_BYTES) {
    throw tooLarge(`the inbox document of event ${eventId} would be ${bytes} bytes (its envelope, key, type and error text): over what a Firestore inbox document holds (${MAX_DOCUMENT_BYTES} bytes)`);
  }
  return doc;
}

/**
 * Firestore's INVALID_ARGUMENT (gRPC code 3: a document over 1 MiB, a key too
 * long to query) is the same for the same event every time: rethrown as
 * 54000 with the error as its cause, so the inbox dead-letters the event
 * after a bounded number of tries instead of retrying it in place for ever
 * as an outage. An expired transaction (INVALID_ARGUMENT too, which the
 * client retries) is not.
 */
function refused(err: unknown): never {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  if (code === 3 && !/transaction has expired/.test(String(message))) throw tooLarge(`Firestore refused the inbox's transaction (INVALID_ARGUMENT, the same for this event every time): ${String(message)}`, err);
  throw err;
}

/** An envelope read back (JSON text). */
export function envelopeFromFirestore(v: unknown): OutboxEvent {
  const o = (typeof v === 'string' ? JSON.parse(v) : v) as OutboxEvent & { occurredAt: string };
  return { ...o, occurredAt: new Date(o.occurredAt) };
}

/** The lock document of (consumer, key) of versioned events: SHA-256 of both, so no key text reaches a document id. */
function keyDocId(consumer: string, key: string): string {
  return createHash('sha256').update(`${consumer}\u0000${key}`).digest('hex').slice(0, 40);
}

/** A Firestore error runTransaction retries (contention): rethrown as is from a handler so that the whole attempt runs again. */
function contention(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 10 || code === 409;
}

type Write = { readonly op: 'set' | 'update' | 'create' | 'delete'; readonly ref: DocumentReference; readonly args: readonly unknown[] };

/**
 * The `Transaction` a handler gets: reads go to the inbox's Firestore
 * transaction, writes are kept aside until every handler of the batch ran
 * and then applied in order (Firestore refuses a read after a write in a
 * transaction, and a batch runs several handlers). That is what lets a
 * held event drop its handler's writes (a savepoint Firestore does not
 * have), and a batch's second handler read after its first wrote. A read
 * that could see a write of this batch (the same document, or any query
 * once something was written) is refused, as Firestore would: reads in a
 * transaction never see its own writes.
 */
class HandlerTransaction {
  readonly #tx: Transaction;
  readonly #batchWrites: Write[];
  readonly #written: Set<string>;
  #writes: Write[] = [];
  #ended = false;

  constructor(tx: Transaction, batchWrites: Write[], written: Set<string>) {
    this.#tx = tx;
    this.#batchWrites = batchWrites;
    this.#written = written;
  }

  #readable(what: string, path: string | null): void {
    if (this.#ended) throw new Error('this inbox transaction already ended: use the tx only inside the handler, and await every call');
    const own = this.#writes.length > 0;
    if (own || (path === null ? this.#written.size > 0 : this.#written.has(path))) {
      throw new Error(
        `Firestore transactions read before they write: this handler reads ${what} after ${own ? 'writing' : 'an earlier handler of the batch wrote it'}. Read first, then write${own ? '' : ' (the inbox runs the event again in a transaction of its own)'}`,
      );
    }
  }

  get(target: unknown): Promise<unknown> {
    const path = (target as { path?: unknown }).path;
    const isDoc = typeof path === 'string' && typeof (target as { collection?: unknown }).collection === 'function';
    this.#readable(isDoc ? `document ${path}` : 'a query', isDoc ? path : null);
    return (this.#tx.get as (t: unknown) => Promise<unknown>)(target);
  }

  getAll(...refs: unknown[]): Promise<unknown> {
    for (const r of refs) {
      const path = (r as { path?: unknown }).path;
      if (typeof path === 'string') this.#readable(`document ${path}`, path);
    }
    return (this.#tx.getAll as (...r: unknown[]) => Promise<unknown>)(...refs);
  }

  execute(pipeline: unknown): Promise<unknown> {
    this.#readable('a pipeline', null);
    return (this.#tx.execute as (p: unknown) => Promise<unknown>)(pipeline);
  }

  #write(op: Write['op'], ref: DocumentReference, args: unknown[]): this {
    if (this.#ended) throw new Error('this inbox transaction already ended: use the tx only inside the handler, and await every call');
    this.#writes.push({ op, ref, args });
    return this;
  }

  create(ref: DocumentReference, ...args: unknown[]): this {
    return this.#write('create', ref, args);
  }

  set(ref: DocumentReference, ...args: unknown[]): this {
    return this.#write('set', ref, args);
  }

  update(ref: DocumentReference, ...args: unknown[]): this {
    return this.#write('update', ref, args);
  }

  delete(ref: DocumentReference, ...args: unknown[]): this {
    return this.#write('delete', ref, args);
  }

  /** The handler succeeded: its writes join the batch's. */
  keep(): void {
    this.#ended = true;
    for (const w of this.#writes) {
      this.#batchWrites.push(w);
      this.#written.add(w.ref.path);
    }
  }

  /** The handler failed or held: its writes are dropped. */
  drop(): void {
    this.#ended = true;
    this.#writes = [];
  }
}

function apply(tx: Transaction, writes: readonly Write[]): void {
  for (const w of writes) (tx[w.op] as (ref: DocumentReference, ...args: unknown[]) => unknown).call(tx, w.ref, ...w.args);
}

interface InboxDoc {
  status?: string;
  attempts?: number;
}

/** The inbox document of an event first seen failing or held (never processed): its fields, received now. */
function newUnprocessedDoc(
  consumer: string,
  id: string,
  event: OutboxEvent,
  state: { status: 'failed' | 'dead' | 'held'; attempts: number; lastError: string; envelope: string; heldAt: FieldValue | null },
): DocumentData {
  return {
    consumer,
    eventId: id,
    type: event.type,
    key: event.key,
    version: event.version ?? null,
    status: state.status,
    attempts: state.attempts,
    lastError: state.lastError,
    envelope: state.envelope,
    receivedAt: FieldValue.serverTimestamp(),
    processedAt: null,
    heldAt: state.heldAt,
  };
}

/**
 * The inbox on Google Cloud Firestore: the same port as `PostgresInboxStore`,
 * with the handlers' `tx` a Firestore `Transaction`. Each batch is one
 * `runTransaction`: it reads the inbox documents of the events (one per
 * consumer and canonical event id), runs the handlers of the new or
 * reopenable ones, and writes their writes and the `processed` marks in
 * the same commit, so both commit or neither does.
 *
 * Firestore runs a transaction's callback again when it meets contention:
 * the handlers run again too (their writes through `tx` count once, as
 * everything in the transaction does; side effects outside it may happen
 * more than once), and the inbox's own counts are read afresh in every attempt.
 * Versioned events serialize per (consumer, key) on a lock document
 * (`<collection>_keys`), read and written by each transaction of the key.
 * docs/stores/firestore.md#the-inbox.
 *
 * @example
 * const inbox = createInbox({ store: new FirestoreInboxStore({ firestore }), consumer: 'billing' });
 * inbox.on(OrderCreated, async (event, tx) => {
 *   const order = await tx.get(orders.doc(event.aggregateId));   // reads first, as always on Firestore
 *   tx.set(invoices.doc(event.id), { orderId: event.aggregateId, total: order.get('total') });
 * });
 */
export class FirestoreInboxStore implements InboxStore<Transaction> {
  readonly names: FirestoreInboxNames;
  readonly #db: Firestore;

  constructor(options: FirestoreInboxStoreOptions) {
    if (!options?.firestore || typeof (options.firestore as { collection?: unknown }).collection !== 'function') {
      throw new ConfigError('firestore', 'is required: pass the Firestore instance of the consumer service, e.g. new FirestoreInboxStore({ firestore: new Firestore() })');
    }
    this.names = firestoreInboxNames(options);
    this.#db = options.firestore;
  }

  #doc(consumer: string, id: string): DocumentReference {
    return this.#db.collection(this.names.inbox).doc(inboxDocId(consumer, id));
  }

  #held(consumer: string): Query {
    return this.#db.collection(this.names.inbox).where('consumer', '==', consumer).where('status', '==', 'held');
  }

  runBatch(consumer: string, events: readonly OutboxEvent[], handler: (tx: Transaction, event: OutboxEvent) => Promise<void>, options: RunBatchOptions = {}) {
    checkConsumer(consumer);
    const ids = events.map((e) => storedId(e.id));
    const seen = new Set<string>();
    const input: { n: number; id: string; e: OutboxEvent; ref: DocumentReference }[] = [];
    for (let n = 0; n < events.length; n++) {
      const id = ids[n]!;
      if (seen.has(id)) continue; // one document cannot be claimed twice in a transaction; the repeat is a duplicate
      seen.add(id);
      input.push({ n, id, e: events[n]!, ref: this.#doc(consumer, id) });
    }
    const locks = [...new Set(input.filter(({ e }) => e.version !== null && e.version !== undefined).map(({ e }) => e.key))]
      .map((key) => ({ key, ref: this.#db.collection(this.names.keys).doc(keyDocId(consumer, key)) }))
      .sort((a, b) => (a.ref.id < b.ref.id ? -1 : a.ref.id > b.ref.id ? 1 : 0));
    const keyRefs = locks.map((l) => l.ref);
    return this.#db.runTransaction(async (tx) => {
      // Reads first (Firestore's rule): the key locks, the inbox documents, the held events of the claimed keys.
      const snaps = input.length + keyRefs.length === 0 ? [] : await tx.getAll(...keyRefs, ...input.map((i) => i.ref));
      const docs = snaps.slice(keyRefs.length);
      const claimed = new Map<string, { attempts: number; receivedAt: Timestamp | undefined }>();
      input.forEach((item, i) => {
        const snap: DocumentSnapshot = docs[i]!;
        const d = (snap.data() ?? {}) as InboxDoc;
        if (!snap.exists) claimed.set(item.id, { attempts: 1, receivedAt: undefined });
        else if (REOPENABLE.has(String(d.status))) claimed.set(item.id, { attempts: Number(d.attempts ?? 0) + 1, receivedAt: snap.get('receivedAt') as Timestamp | undefined });
      });
      const claimedKeys = [...new Set(input.filter((i) => claimed.has(i.id)).map((i) => i.e.key))];
      const heldKeys = new Set<string>();
      for (const part of chunks(claimedKeys, IN_LIMIT)) {
        const held = await tx.get(this.#held(consumer).where('key', 'in', part).select('key'));
        for (const d of held.docs) heldKeys.add(d.get('key') as string);
      }
      const batchWrites: Write[] = [];
      const written = new Set<string>();
      const ran = events.map(() => false);
      const held = events.map(() => false);
      const marks: { id: string; ref: DocumentReference; e: OutboxEvent; hold?: string }[] = [];
      const pendingClaims = new Set(claimed.keys());
      for (let i = 0; i < events.length; i++) {
        const e = events[i]!;
        if (!pendingClaims.delete(ids[i]!)) continue;
        const handlerTx = new HandlerTransaction(tx, batchWrites, written);
        try {
          await handler(handlerTx as unknown as Transaction, e);
          handlerTx.keep();
          ran[i] = true;
          marks.push({ id: ids[i]!, ref: this.#doc(consumer, ids[i]!), e });
        } catch (err) {
          handlerTx.drop();
          if (contention(err)) throw err; // Firestore runs the whole attempt again
          const reason = options.holdReason?.(err) ?? null;
          if (reason === null) throw new InboxBatchError(i, err);
          // Held in the handler's own transaction: its writes are dropped, the document turns held.
          held[i] = true;
          marks.push({ id: ids[i]!, ref: this.#doc(consumer, ids[i]!), e, hold: storableText(reason) });
        }
      }
      // Then the writes: the handlers', the marks, the key locks.
      apply(tx, batchWrites);
      for (const m of marks) {
        const c = claimed.get(m.id)!;
        const base = {
          consumer,
          eventId: m.id,
          type: m.e.type,
          key: m.e.key,
          version: m.e.version ?? null,
          attempts: c.attempts,
          receivedAt: c.receivedAt ?? FieldValue.serverTimestamp(),
        };
        if (m.hold === undefined) tx.set(m.ref, fitting(m.ref, { ...base, status: 'processed', processedAt: FieldValue.serverTimestamp(), lastError: null, envelope: null, heldAt: null }, m.id));
        else tx.set(m.ref, fitting(m.ref, { ...base, status: 'held', processedAt: null, lastError: m.hold, envelope: envelopeJson({ ...m.e, id: m.id }), heldAt: FieldValue.serverTimestamp() }, m.id));
      }
      // A key's lock is written when this batch ran one of its events (read only, it orders nothing this batch changes).
      for (const l of locks) if (claimedKeys.includes(l.key)) tx.set(l.ref, { at: FieldValue.serverTimestamp() });
      return { ran, heldKeys: [...heldKeys], held };
    }).catch(refused);
  }

  async recordFailure(consumer: string, event: OutboxEvent, error: string, maxAttempts: number) {
    checkConsumer(consumer);
    const id = storedId(event.id);
    const ref = this.#doc(consumer, id);
    const text = storableText(error);
    const envelope = envelopeJson(event);
    return this.#db.runTransaction(async (tx) => {
      const snap = await tx.get(ref);
      if (!snap.exists) {
        const dead = maxAttempts <= 1;
        tx.set(ref, fitting(ref, newUnprocessedDoc(consumer, id, event, { status: dead ? 'dead' : 'failed', attempts: 1, lastError: text, envelope, heldAt: null }), id));
        return { attempts: 1, dead };
      }
      // Processed or dead already (a redelivery raced this failure): nothing recorded.
      if (!REOPENABLE.has(String(snap.get('status')))) return { attempts: 0, dead: false };
      const attempts = Number(snap.get('attempts') ?? 0) + 1;
      const dead = attempts >= maxAttempts;
      const change = { status: dead ? 'dead' : 'failed', attempts, lastError: text, envelope };
      fitting(ref, { ...snap.data(), ...change }, id);
      tx.update(ref, change);
      return { attempts, dead };
    }).catch(refused);
  }

  async hold(consumer: string, event: OutboxEvent, reason: string): Promise<void> {
    checkConsumer(consumer);
    const id = storedId(event.id);
    const ref = this.#doc(consumer, id);
    const text = storableText(reason);
    const envelope = envelopeJson(event);
    await this.#db.runTransaction(async (tx) => {
      const snap = await tx.get(ref);
      if (!snap.exists) {
        tx.set(ref, fitting(ref, newUnprocessedDoc(consumer, id, event, { status: 'held', attempts: 0, lastError: text, envelope, heldAt: FieldValue.serverTimestamp() }), id));
      } else if (REOPENABLE.has(String(snap.get('status')))) {
        const change = { status: 'held', lastError: text, envelope, heldAt: FieldValue.serverTimestamp() };
        fitting(ref, { ...snap.data(), ...change }, id);
        tx.update(ref, change);
      }
    }).catch(refused);
  }

  async recheckHeld(consumer: string, olderThanMs: number, limit: number): Promise<string[]> {
    checkConsumer(consumer);
    return this.#db.runTransaction(async (tx) => {
      // Oldest look first; the query's read time is the database's clock.
      const oldest = await tx.get(this.#held(consumer).orderBy('heldAt').limit(limit));
      const cutoff = oldest.readTime.toMillis() - olderThanMs;
      const keys = [...new Set(oldest.docs.filter((d) => lookedAt(d) < cutoff).map((d) => d.get('key') as string))];
      if (keys.length === 0) return [];
      // Stamp the held documents of these keys, so the next look takes other keys.
      const stamp: QueryDocumentSnapshot[] = [];
      for (const part of chunks(keys, IN_LIMIT)) stamp.push(...(await tx.get(this.#held(consumer).where('key', 'in', part).select())).docs);
      for (const d of stamp.slice(0, RECHECK_STAMPS)) tx.update(d.ref, { heldAt: FieldValue.serverTimestamp() });
      return keys;
    });
  }

  async redrivable(consumer: string, limit: number, key?: string, types?: readonly string[]): Promise<OutboxEvent[]> {
    checkConsumer(consumer);
    const col = this.#db.collection(this.names.inbox);
    if (key === undefined) {
      const retries = col.where('consumer', '==', consumer).where('status', '==', 'retry');
      // `in` takes IN_LIMIT values: one query per chunk of types, the oldest `limit` of their union.
      const pages = types === undefined ? [retries] : chunks([...types], IN_LIMIT).map((part) => retries.where('type', 'in', part));
      const docs = (await Promise.all(pages.map(async (q) => (await q.orderBy('receivedAt').limit(limit).get()).docs))).flat();
      if (pages.length > 1) docs.sort((a, b) => received(a) - received(b));
      return docs.slice(0, limit).sort(byKeyVersion).map((d) => envelopeFromFirestore(d.get('envelope')));
    }
    // Versioned first, oldest version first; then those without a version (Firestore orders null first, SQL's NULLS LAST is the rule here).
    const held = this.#held(consumer).where('key', '==', key);
    const versioned = (await held.where('version', '>=', Number.MIN_SAFE_INTEGER).orderBy('version').orderBy('receivedAt').limit(limit).get()).docs;
    const rest = versioned.length < limit ? (await held.where('version', '==', null).orderBy('receivedAt').limit(limit - versioned.length).get()).docs : [];
    return [...versioned, ...rest].map((d) => envelopeFromFirestore(d.get('envelope')));
  }
}

/** When a held document was last held or looked at, in ms (never: 0). */
function lookedAt(d: QueryDocumentSnapshot): number {
  const t = d.get('heldAt') as Timestamp | null | undefined;
  return t ? t.toMillis() : 0;
}

function received(d: QueryDocumentSnapshot): number {
  return (d.get('receivedAt') as Timestamp).toMillis();
}

/** Operator retries run in key order, each key's oldest version first (no version last), then by arrival. */
function byKeyVersion(a: QueryDocumentSnapshot, b: QueryDocumentSnapshot): number {
  const [ka, kb] = [a.get('key') as string, b.get('key') as string];
  if (ka !== kb) return ka < kb ? -1 : 1;
  const [va, vb] = [a.get('version') as number | null, b.get('version') as number | null];
  if (va !== vb) return va === null ? 1 : vb === null ? -1 : va - vb;
  return received(a) - received(b);
}
