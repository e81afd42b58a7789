import { FieldPath, FieldValue, Timestamp, type DocumentReference, type DocumentSnapshot, type Firestore, type Query, type QueryDocumentSnapshot, type QuerySnapshot } from '@google-cloud/firestore';
import { storedEvent, type StoredEvent } from '../../core/envelope.ts';
import { ConfigError } from '../../core/errors.ts';
import type { BucketLease, ClaimOptions, Completion, OutboxGauges, RelayHeartbeat, RelayStore } from '../../core/ports.ts';
import { BUCKETS, collections, comparePositions, firestoreNames, type FirestoreCollections, type FirestoreNames, type FirestoreNamesOptions, type Position } from './firestore-names.ts';
import { FirestoreStatusReader } from './firestore-status.ts';

export interface FirestoreRelayStoreOptions extends FirestoreNamesOptions {
  /** The Firestore instance (the store never terminates it: the caller does). Required. */
  readonly firestore: Firestore;
  /**
   * How an idle relay learns of new events: `listen` (default), a snapshot
   * listener on the newest pending event, with polling as the fallback;
   * `poll`, polling only.
   */
  readonly wake?: 'listen' | 'poll';
  /**
   * Most pending documents one claim reads per group of 30 buckets while it
   * looks for publishable events past keys held by a parked or backing-off
   * event (each read is billed). Default: 2000.
   */
  readonly maxClaimScan?: number;
  /**
   * How long the document of a relay that stopped heartbeating (killed, or
   * cut off) stays, in ms: a live relay deletes older ones (at most every
   * 10 minutes, 100 a time). A relay that stops cleanly deletes its own at once.
   * Default: 86400000 (a day, as the SQL stores keep theirs).
   */
  readonly relayRetentionMs?: number;
}

/** Firestore's `in` filter takes at most 30 values. */
const IN_LIMIT = 30;
/** Completions per transaction (each is one read and one write; Firestore commits at most 500 writes). */
const COMPLETE_CHUNK = 200;
/** Claimed events whose handle is kept for `complete`; older ones are forgotten (their completion is then rejected, and the event claimed again). */
const MAX_HANDLES = 100_000;
/** A failed wake-up listener is opened again at most this often (polling goes on meanwhile). */
const RELISTEN_MS = 5_000;
/** A relay store looks for the documents of relays gone for longer than `relayRetentionMs` at most this often, and deletes at most SWEEP_LIMIT a time. */
const SWEEP_EVERY_MS = 600_000;
const SWEEP_LIMIT = 100;

interface Handle {
  readonly ref: DocumentReference;
  readonly bucket: number;
}

interface BucketDoc {
  owner?: string | null;
  token?: number;
  leaseUntil?: Timestamp | null;
}

const chunks = <T>(list: readonly T[], size: number): T[][] => {
  const out: T[][] = [];
  for (let i = 0; i < list.length; i += size) out.push(list.slice(i, i + size));
  return out;
};

/** `t` plus `ms` (negative too), exactly to the nanosecond. */
export const plus = (t: Timestamp, ms: number): Timestamp => {
  const secs = Math.floor(ms / 1000);
  const nanos = t.nanoseconds + Math.round((ms - secs * 1000) * 1e6);
  return new Timestamp(t.seconds + secs + Math.floor(nanos / 1e9), nanos % 1e9);
};

const after = (a: Timestamp | null | undefined, b: Timestamp): boolean => a != null && (a.seconds > b.seconds || (a.seconds === b.seconds && a.nanoseconds > b.nanoseconds));

const position = (d: QueryDocumentSnapshot): Position => ({ ts: d.get('ts') as Timestamp, docId: d.id });

/**
 * The relay side of a Firestore outbox. Buckets are 256 documents
 * (`<collection>_buckets/<n>`: owner, token, leaseUntil); leases are taken and
 * renewed in Firestore transactions and judged by the database clock (the
 * read time Firestore returns with the transaction's reads), every
 * acquisition bumps the bucket's fencing token, and a completion applies only
 * in a transaction that reads the bucket's document and finds the relay's
 * unexpired lease with the same token (a takeover conflicts with it, so one
 * of them waits or retries).
 *
 * `seq` of a claimed event is a handle of this store instance, increasing in
 * outbox order within a claim (Firestore has no sequences; the order lives in
 * the documents' commit time `ts` and their UUIDv7 ids). Complete events with the store
 * that claimed them.
 *
 * @example
 * const store = new FirestoreRelayStore({ firestore });
 * createRelay({ store, transport }).start();
 */
export class FirestoreRelayStore implements RelayStore {
  readonly names: FirestoreNames;
  readonly #db: Firestore;
  readonly #cols: FirestoreCollections;
  readonly #wake: 'listen' | 'poll';
  readonly #maxScan: number;
  readonly #relayRetentionMs: number;
  #sweptAt = -Infinity;
  readonly #handles = new Map<number, Handle>();
  #nextHandle = 1;
  /** Server time minus local time, from the last read time seen (for retention's cutoff). */
  #offsetMs: number | undefined;
  #wakeups = 0;
  #unsubscribe: (() => void) | undefined;
  #listenFailedAt = -Infinity;
  readonly #waiters = new Set<() => void>();
  #closed = false;

  constructor(options: FirestoreRelayStoreOptions) {
    if (!options?.firestore || typeof (options.firestore as { collection?: unknown }).collection !== 'function') {
      throw new ConfigError('firestore', 'is required: pass a Firestore instance, e.g. new FirestoreRelayStore({ firestore: new Firestore() })');
    }
    const wake = options.wake ?? 'listen';
    if (wake !== 'listen' && wake !== 'poll') throw new ConfigError('wake', `must be "listen" or "poll", got ${JSON.stringify(wake)}`);
    this.names = firestoreNames(options);
    this.#db = options.firestore;
    this.#cols = collections(options.firestore, this.names);
    this.#wake = wake;
    const scan = options.maxClaimScan ?? 2000;
    if (!Number.isSafeInteger(scan) || scan <= 0) throw new ConfigError('maxClaimScan', `must be a positive integer, got ${String(scan)}`);
    this.#maxScan = scan;
    const retention = options.relayRetentionMs ?? 86_400_000;
    if (!Number.isSafeInteger(retention) || retention < 60_000) throw new ConfigError('relayRetentionMs', `must be a duration in ms of at least 60000, got ${String(retention)}`);
    this.#relayRetentionMs = retention;
  }

  #saw(readTime: Timestamp): Timestamp {
    this.#offsetMs = readTime.toMillis() - Date.now();
    return readTime;
  }

  #bucketRef(bucket: number): DocumentReference {
    return this.#cols.buckets.doc(String(bucket));
  }

  /**
   * The relay's heartbeat document, `<collection>_relays/<relayId>`. The
   * relay allows ids Firestore refuses as document ids (`.`, `..`, `__x__`):
   * refused here, before any write, naming relayId.
   */
  #relayRef(relayId: string): DocumentReference {
    if (relayId === '.' || relayId === '..' || /^__.*__$/.test(relayId)) {
      throw new ConfigError(
        'relayId',
        `${JSON.stringify(relayId)} cannot be a Firestore document id (the relay's heartbeat document in ${this.names.relays}: Firestore refuses "." and ".." and ids matching __.*__); choose another, e.g. "relay-1", or leave relayId out for <host>-<pid>-<random>`,
      );
    }
    return this.#cols.relays.doc(relayId);
  }

  async heartbeat(relay: RelayHeartbeat, ttlMs: number) {
    const written = await this.#relayRef(relay.relayId).set({
      relayId: relay.relayId,
      host: relay.host,
      pid: relay.pid,
      inFlight: relay.inFlight,
      publishedTotal: relay.publishedTotal,
      ratePerMinute: Math.round(relay.ratePerMinute),
      ttlMs: Math.round(ttlMs),
      heartbeatAt: FieldValue.serverTimestamp(),
      leftAt: null,
    });
    const now = written.writeTime;
    const [relays, leased] = await Promise.all([
      this.#cols.relays.where('heartbeatAt', '>', plus(now, -86_400_000)).get(),
      this.#cols.buckets.where('leaseUntil', '>', now).get(),
    ]);
    this.#saw(relays.readTime);
    if (performance.now() - this.#sweptAt >= SWEEP_EVERY_MS) {
      this.#sweptAt = performance.now();
      await this.#sweep(now);
    }
    const live = relays.docs.filter((d) => d.get('leftAt') == null && after(plus(d.get('heartbeatAt') as Timestamp, Number(d.get('ttlMs'))), now)).length;
    let next: number | null = null;
    for (const b of leased.docs) {
      if (b.get('owner') === relay.relayId) continue;
      const ms = (b.get('leaseUntil') as Timestamp).toMillis() - now.toMillis();
      next = next === null ? ms : Math.min(next, ms);
    }
    return { liveRelays: Math.max(1, live), bucketCount: BUCKETS, nextForeignExpiryMs: next === null ? null : Math.max(0, Math.ceil(next)) };
  }

  /**
   * Deletes the documents of relays whose last heartbeat is older than
   * `relayRetentionMs` (killed, cut off, or left under an older txbox). Each
   * delete applies only if the document did not change since it was read, so
   * a relay that came back meanwhile keeps its document.
   */
  async #sweep(now: Timestamp): Promise<void> {
    try {
      const gone = await this.#cols.relays.where('heartbeatAt', '<', plus(now, -this.#relayRetentionMs)).limit(SWEEP_LIMIT).get();
      // A document that changed since the read (its relay came back) fails its precondition and stays.
      await Promise.all(gone.docs.map((d) => d.ref.delete({ lastUpdateTime: d.updateTime }).catch(() => undefined)));
    } catch {
      // Housekeeping only: the heartbeat goes on, and the next sweep (in 10 minutes) tries again.
    }
  }

  async lease(relayId: string, held: readonly BucketLease[], acquire: number, ttlMs: number): Promise<BucketLease[]> {
    const refs = Array.from({ length: BUCKETS }, (_, b) => this.#bucketRef(b));
    const heldTokens = new Map(held.map((l) => [l.bucket, l.token]));
    return this.#db.runTransaction(async (tx) => {
      const snaps = await tx.getAll(...refs);
      const now = this.#saw(snaps[0]!.readTime);
      const until = plus(now, ttlMs);
      const mine: BucketLease[] = [];
      let wanted = acquire;
      snaps.forEach((snap, bucket) => {
        const d = (snap.data() ?? {}) as BucketDoc;
        const live = d.owner != null && after(d.leaseUntil, now);
        if (live && d.owner === relayId) {
          // Only what this call renews, as on PostgreSQL: a live bucket this relay owns but did not present
          // (released locally while the release is on its way, a restart under the same id) is not renewed,
          // and handing it back would let the relay trust it past its expiry, when another relay may take it.
          const token = String(d.token ?? 0);
          if (heldTokens.get(bucket) === token) {
            tx.update(snap.ref, { leaseUntil: until });
            mine.push({ bucket, token });
          }
        } else if (!live && wanted > 0) {
          wanted--;
          const token = (d.token ?? 0) + 1;
          tx.set(snap.ref, { owner: relayId, token, leaseUntil: until });
          mine.push({ bucket, token: String(token) });
        }
      });
      return mine;
    });
  }

  async release(relayId: string, leases: readonly BucketLease[]): Promise<void> {
    if (leases.length === 0) return;
    await this.#db.runTransaction(async (tx) => {
      const snaps = await tx.getAll(...leases.map((l) => this.#bucketRef(l.bucket)));
      snaps.forEach((snap, i) => {
        const d = (snap.data() ?? {}) as BucketDoc;
        if (d.owner === relayId && String(d.token ?? 0) === leases[i]!.token) tx.update(snap.ref, { owner: null, leaseUntil: null });
      });
    });
  }

  async leave(relayId: string, held: readonly BucketLease[]): Promise<void> {
    // Fenced by token: a lease taken since (by the same relay id in another process included) stays its owner's.
    const tokens = new Map(held.map((l) => [l.bucket, l.token]));
    if (tokens.size > 0) {
      await this.#db.runTransaction(async (tx) => {
        const snaps = await tx.getAll(...[...tokens.keys()].map((b) => this.#bucketRef(b)));
        snaps.forEach((snap) => {
          const bucket = Number(snap.ref.id);
          if (snap.get('owner') === relayId && String(snap.get('token') ?? 0) === tokens.get(bucket)) tx.update(snap.ref, { owner: null, leaseUntil: null });
        });
      });
    }
    // A clean stop: nothing about this relay is left to show (live relays count the documents heartbeating).
    await this.#relayRef(relayId).delete();
  }

  /**
   * Publishable events of the leased buckets, in outbox order. Firestore
   * cannot ask "no earlier event of its key is parked or backing off", so the
   * claim reads pending events page by page in order (per group of 30
   * buckets; with more than 60 leased buckets, one query over all buckets
   * keeping its own), reads the parked events of the keys it meets (when any
   * event is parked at all), and keeps an event
   * only when no earlier one of its key is backing off or parked; each group
   * pages on past held keys until it has its share of `limit`, it is
   * exhausted, or it read `maxClaimScan` documents. All of it reads one snapshot
   * (a read-only transaction), so an operator's retry between two reads
   * cannot let a key's later event pass its earlier one.
   */
  async claim(leases: readonly BucketLease[], options: ClaimOptions): Promise<StoredEvent[]> {
    if (leases.length === 0) return [];
    const skip = new Set(options.skipParkedDestinations);
    const limit = options.limit;
    const { found, now } = await this.#db.runTransaction(
      async (tx) => {
        let now: Timestamp | undefined;
        // Parked events are rare: when there is none at all, the per-key parked queries are left out.
        const anyParked = !(await tx.get(this.#cols.outbox.where('state', '==', 'parked').limit(1))).empty;
        const mine = new Set(leases.map((l) => l.bucket));
        const pending = this.#cols.outbox.where('state', '==', 'pending');
        // Few buckets: groups of 30 with `in`. Many (a relay alone holds 128 per lane): one query in outbox order, keeping the
        // documents of its buckets (it reads the other relays' events too, but one query instead of five; `in` queries are slow on the emulator).
        const streams =
          mine.size > 2 * IN_LIMIT ? [pending] : chunks([...mine], IN_LIMIT).map((buckets) => pending.where('bucket', 'in', buckets));
        // Each stream looks for its share of `limit`: a claim reads about `limit` documents, not `limit` per group.
        const share = Math.ceil(limit / streams.length);
        const group = async (base: Query): Promise<QueryDocumentSnapshot[]> => {
          const query = base.orderBy('ts').orderBy(FieldPath.documentId()).limit(share);
          const parkedByKey = new Map<string, Position[]>();
          const blocked = new Set<string>();
          const out: QueryDocumentSnapshot[] = [];
          let last: QueryDocumentSnapshot | undefined;
          for (let scanned = 0; out.length < share && scanned < this.#maxScan; ) {
            const page = await tx.get(last ? query.startAfter(last) : query);
            now ??= page.readTime;
            scanned += page.size;
            const docs = page.docs.filter((d) => mine.has(Number(d.get('bucket'))));
            const fresh = [...new Set(docs.map((d) => d.get('key') as string))].filter((k) => !parkedByKey.has(k) && !blocked.has(k));
            for (const k of fresh) parkedByKey.set(k, []);
            const parked = anyParked ? await Promise.all(chunks(fresh, IN_LIMIT).map((k) => tx.get(this.#cols.outbox.where('state', '==', 'parked').where('key', 'in', k)))) : [];
            for (const p of parked.flatMap((q: QuerySnapshot) => q.docs)) {
              // ?.: a key over the 1,500 bytes Firestore compares (enqueue refuses them now; an older event may have one) can match another key's parked event.
              if (!skip.has(p.get('destination') as string)) parkedByKey.get(p.get('key') as string)?.push(position(p));
            }
            for (const d of docs) {
              const key = d.get('key') as string;
              if (blocked.has(key)) continue;
              const here = position(d);
              if (after(d.get('nextAttemptAt') as Timestamp | null, page.readTime) || (parkedByKey.get(key) ?? []).some((p) => comparePositions(p, here) < 0)) {
                blocked.add(key);
                continue;
              }
              out.push(d);
            }
            if (page.size < share) break;
            last = page.docs[page.size - 1];
          }
          return out;
        };
        const found = await Promise.all(streams.map(group));
        return { found: found.flat().sort((a, b) => comparePositions(position(a), position(b))).slice(0, limit), now };
      },
      { readOnly: true },
    );
    if (now) this.#saw(now);
    const out: StoredEvent[] = [];
    for (const d of found) {
      const seq = this.#nextHandle++;
      this.#handles.set(seq, { ref: d.ref, bucket: Number(d.get('bucket')) });
      out.push(toEvent(d, seq));
    }
    if (this.#handles.size > MAX_HANDLES) {
      for (const seq of this.#handles.keys()) {
        if (this.#handles.size <= MAX_HANDLES / 2) break;
        this.#handles.delete(seq);
      }
    }
    return out;
  }

  async complete(relayId: string, completions: readonly Completion[]): Promise<{ applied: number; rejected: number }> {
    let applied = 0;
    for (const part of chunks(completions, COMPLETE_CHUNK)) applied += await this.#completeChunk(relayId, part);
    for (const c of completions) this.#handles.delete(c.seq);
    return { applied, rejected: completions.length - applied };
  }

  async #completeChunk(relayId: string, completions: readonly Completion[]): Promise<number> {
    const known = completions.filter((c) => this.#handles.has(c.seq));
    if (known.length === 0) return 0;
    const buckets = [...new Set(known.map((c) => this.#handles.get(c.seq)!.bucket))];
    return this.#db.runTransaction(async (tx) => {
      const snaps = await tx.getAll(...buckets.map((b) => this.#bucketRef(b)), ...known.map((c) => this.#handles.get(c.seq)!.ref));
      const now = this.#saw(snaps[0]!.readTime);
      const leases = new Map<number, BucketDoc>(buckets.map((b, i) => [b, (snaps[i]!.data() ?? {}) as BucketDoc]));
      let count = 0;
      known.forEach((c, i) => {
        const { bucket } = this.#handles.get(c.seq)!;
        const lease = leases.get(bucket)!;
        const event: DocumentSnapshot = snaps[buckets.length + i]!;
        if (lease.owner !== relayId || String(lease.token ?? 0) !== c.token || !after(lease.leaseUntil, now)) return;
        if (!event.exists || event.get('state') !== 'pending') return;
        count++;
        if (c.outcome === 'published') {
          tx.update(event.ref, { state: 'published', doneAt: FieldValue.serverTimestamp(), attempts: FieldValue.increment(1), nextAttemptAt: null });
          return;
        }
        const routes = [...new Set([...((event.get('routesDone') as string[] | undefined) ?? []), ...(c.routesAcked ?? [])])].sort();
        tx.update(event.ref, {
          state: c.outcome === 'park' ? 'parked' : 'pending',
          attempts: FieldValue.increment(c.outcome === 'defer' ? 0 : 1),
          lastError: c.error,
          nextAttemptAt: c.outcome === 'park' ? null : plus(now, c.delayMs),
          routesDone: routes,
          ...(c.outcome === 'park' ? { parkedAt: FieldValue.serverTimestamp() } : {}),
        });
      });
      return count;
    });
  }

  /**
   * Resolves on a wake-up (a change of the newest pending event, heard by a
   * snapshot listener), after `timeoutMs`, or when `signal` aborts; at once
   * when a wake-up came after `since`. With `wake: 'poll'`, or while the
   * listener is down, it is a plain timer.
   */
  waitForEvents(timeoutMs: number, signal: AbortSignal, since?: number): Promise<void> {
    if (this.#wake === 'listen') this.#listen();
    return new Promise((resolve) => {
      if (signal.aborted || this.#closed || (since !== undefined && this.#wakeups > since)) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.#waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      signal.addEventListener('abort', done, { once: true });
      this.#waiters.add(done);
    });
  }

  wakeups(): number {
    return this.#wakeups;
  }

  #listen(): void {
    if (this.#unsubscribe || this.#closed || performance.now() - this.#listenFailedAt < RELISTEN_MS) return;
    // The first snapshot counts too: an event committed between the claim and the listener's start is then not left for the poll.
    this.#unsubscribe = this.#cols.outbox
      .where('state', '==', 'pending')
      .orderBy('ts', 'desc')
      .limit(1)
      .onSnapshot(
        () => {
          this.#wakeups++;
          for (const w of [...this.#waiters]) w();
        },
        () => {
          // The listener ended (an outage, a missing index): polling goes on, and the next wait listens again after RELISTEN_MS.
          this.#unsubscribe = undefined;
          this.#listenFailedAt = performance.now();
        },
      );
  }

  /** Deletes up to `limit` published or skipped events finished more than `olderThanMs` ago (by `doneAt`), in batches of at most 500. */
  async prune(olderThanMs: number, limit: number): Promise<number> {
    if (this.#offsetMs === undefined) this.#saw((await this.#bucketRef(0).get()).readTime);
    const cutoff = Timestamp.fromMillis(Date.now() + this.#offsetMs! - olderThanMs);
    const old = await this.#cols.outbox.where('state', 'in', ['published', 'skipped']).where('doneAt', '<', cutoff).orderBy('doneAt').limit(limit).get();
    for (const part of chunks(old.docs, 500)) {
      const batch = this.#db.batch();
      for (const d of part) batch.delete(d.ref);
      await batch.commit();
    }
    return old.size;
  }

  async backlog(): Promise<{ pending: number; parked: number }> {
    const [pending, parked] = await Promise.all(['pending', 'parked'].map((state) => this.#cols.outbox.where('state', '==', state).count().get()));
    return { pending: pending!.data().count, parked: parked!.data().count };
  }

  /**
   * Pending, parked and oldest pending age per destination, and the relays
   * alive, for the metric gauges (the relay caches it and reads it only when
   * metrics are collected): aggregation counts and one read per destination
   * with open events, plus the heartbeats (firestore-status.ts).
   */
  outboxGauges(): Promise<OutboxGauges> {
    return new FirestoreStatusReader(this.#db, this.names).gauges();
  }

  /** Stops the wake-up listener. The Firestore instance is the caller's: `firestore.terminate()` ends it. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    for (const w of [...this.#waiters]) w();
  }
}

function toEvent(d: QueryDocumentSnapshot, seq: number): StoredEvent {
  const version = d.get('version') as number | null | undefined;
  return storedEvent({
    seq,
    id: d.get('id') as string,
    type: d.get('type') as string,
    aggregateType: d.get('aggregateType') as string,
    aggregateId: d.get('aggregateId') as string,
    key: d.get('key') as string,
    bucket: Number(d.get('bucket')),
    destination: d.get('destination') as string,
    payloadJson: d.get('payload') as string,
    headers: { ...((d.get('headers') as Record<string, string> | undefined) ?? {}) },
    occurredAt: (d.get('occurredAt') as Timestamp).toDate(),
    version: version === null || version === undefined ? null : Number(version),
    attempts: Number(d.get('attempts') ?? 0),
    routesDone: (d.get('routesDone') as string[] | undefined) ?? [],
    createdAtMs: (d.get('ts') as Timestamp).toMillis(),
  });
}
