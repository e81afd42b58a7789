/**
 * What `txbox status` and the metrics gauges read from a Firestore outbox,
 * with aggregation queries (a count costs one read per 1,000 index entries)
 * and small lookups, never by reading the backlog's documents: Firestore has
 * no GROUP BY, so the destinations with open events are found one by one in
 * `destination` order (one read each), then counted. Ages are judged by the
 * database clock (the read time Firestore returns), never the local one.
 * The composite indexes these queries use are in firestore-indexes.ts.
 */
import { Timestamp, type Firestore, type Query, type QueryDocumentSnapshot } from '@google-cloud/firestore';
import type { OutboxGauges } from '../../core/ports.ts';
import { collections, comparePositions, type FirestoreCollections, type FirestoreNames, type Position } from './firestore-names.ts';

/** Per destination, as the SQL stores' status (same fields, same meaning). */
export interface FirestoreDestinationStatus {
  readonly destination: string;
  readonly pending: number;
  readonly backingOff: number;
  readonly parked: number;
  /** Age of the oldest pending event in seconds, by its commit time `ts`, or null with no pending event. */
  readonly oldestPendingSeconds: number | null;
  /** Pending events of this destination that wait behind a parked event of their key (of any destination). */
  readonly blockedByParked: number;
}

/** A relay's heartbeat document, as the SQL stores' relay status. */
export interface FirestoreRelayStatus {
  readonly relayId: string;
  readonly host: string;
  readonly pid: number;
  readonly state: 'alive' | 'expired' | 'left';
  readonly alive: boolean;
  readonly stateAgeSeconds: number;
  readonly leaseTtlMs: number;
  readonly buckets: number;
  readonly inFlight: number;
  readonly publishedTotal: number;
  readonly ratePerMinute: number;
  readonly heartbeatAgeSeconds: number;
}

export interface FirestoreOutboxStatus {
  readonly destinations: FirestoreDestinationStatus[];
  /** Relays that heartbeat in the last 24 hours: alive, expired or left. */
  readonly relays: FirestoreRelayStatus[];
  /** Events in flight on alive relays (as of their last heartbeat). */
  readonly inFlight: number;
  /** Events published in the last 60 s (from retained documents, or alive relays' own counts). */
  readonly publishedLastMinute: number;
  /** The outbox collection: its documents (pending, parked, and published or skipped ones kept for retention). */
  readonly collection: { readonly name: string; readonly documents: number };
}

const DAY_MS = 86_400_000;
/** Firestore's `in` filter takes at most 30 values. */
const IN_LIMIT = 30;
/** Most parked events whose keys `blockedByParked` looks behind (their pending events are read, so bounded). */
const MAX_PARKED_SCANNED = 3000;

const seconds = (from: Timestamp, to: Timestamp): number => Math.max(0, (to.toMillis() - from.toMillis()) / 1000);
const chunks = <T>(list: readonly T[], size: number): T[][] => Array.from({ length: Math.ceil(list.length / size) }, (_, i) => list.slice(i * size, (i + 1) * size));
const position = (d: QueryDocumentSnapshot): Position => ({ ts: d.get('ts') as Timestamp, docId: d.id });

/**
 * The status reads of one outbox collection (`names.collection`): the
 * admin's `status()` and the relay store's `outboxGauges()` use it.
 */
export class FirestoreStatusReader {
  readonly #cols: FirestoreCollections;
  readonly #names: FirestoreNames;

  constructor(firestore: Firestore, names: FirestoreNames) {
    this.#cols = collections(firestore, names);
    this.#names = names;
  }

  /** The destinations that have pending or parked events, in order, and the database time of the first read. */
  async #openDestinations(): Promise<{ destinations: string[]; now: Timestamp }> {
    const open = this.#cols.outbox.where('state', 'in', ['pending', 'parked']);
    const destinations: string[] = [];
    let now: Timestamp | undefined;
    for (;;) {
      const q = destinations.length === 0 ? open : open.where('destination', '>', destinations.at(-1)!);
      const page = await q.orderBy('destination').limit(1).select('destination').get();
      now ??= page.readTime;
      if (page.empty) return { destinations, now };
      destinations.push(page.docs[0]!.get('destination') as string);
    }
  }

  async #count(query: Query): Promise<number> {
    return (await query.count().get()).data().count;
  }

  /** Pending, parked and oldest pending per destination (with `detail`, also backing off and behind parked). */
  async destinations(detail: boolean): Promise<{ destinations: FirestoreDestinationStatus[]; now: Timestamp }> {
    const { destinations, now } = await this.#openDestinations();
    const pending = this.#cols.outbox.where('state', '==', 'pending');
    const blocked = detail ? await this.#blockedByParked() : new Map<string, number>();
    const rows = await Promise.all(
      destinations.map(async (destination) => {
        const mine = pending.where('destination', '==', destination);
        const [pendingCount, parked, backingOff, oldest] = await Promise.all([
          this.#count(mine),
          this.#count(this.#cols.outbox.where('state', '==', 'parked').where('destination', '==', destination)),
          detail ? this.#count(mine.where('nextAttemptAt', '>', now)) : Promise.resolve(0),
          mine.orderBy('ts').limit(1).select('ts').get(),
        ]);
        const first = oldest.docs[0]?.get('ts') as Timestamp | undefined;
        return {
          destination,
          pending: pendingCount,
          backingOff,
          parked,
          oldestPendingSeconds: first === undefined ? null : seconds(first, now),
          blockedByParked: blocked.get(destination) ?? 0,
        };
      }),
    );
    return { destinations: rows, now };
  }

  /**
   * Pending events per destination behind a parked event of their key: the
   * parked events' keys and positions (at most MAX_PARKED_SCANNED parked
   * events: keep them few), then the pending events of those keys.
   */
  async #blockedByParked(): Promise<Map<string, number>> {
    const parked = await this.#cols.outbox.where('state', '==', 'parked').limit(MAX_PARKED_SCANNED).select('key', 'ts').get();
    const first = new Map<string, Position>();
    for (const d of parked.docs) {
      const key = d.get('key') as string;
      const here = position(d);
      const seen = first.get(key);
      if (seen === undefined || comparePositions(here, seen) < 0) first.set(key, here);
    }
    const out = new Map<string, number>();
    const pages = await Promise.all(
      chunks([...first.keys()], IN_LIMIT).map((keys) => this.#cols.outbox.where('state', '==', 'pending').where('key', 'in', keys).select('key', 'destination', 'ts').get()),
    );
    for (const d of pages.flatMap((p) => p.docs)) {
      if (comparePositions(first.get(d.get('key') as string)!, position(d)) >= 0) continue;
      const destination = d.get('destination') as string;
      out.set(destination, (out.get(destination) ?? 0) + 1);
    }
    return out;
  }

  /** Relays that heartbeat in the last 24 hours (by the database clock), with the buckets each holds now. */
  async relays(): Promise<FirestoreRelayStatus[]> {
    // The read time of a first read is "now" on the database clock; the two queries then use it.
    const now = (await this.#cols.buckets.limit(1).get()).readTime;
    const [relays, leased] = await Promise.all([
      this.#cols.relays.where('heartbeatAt', '>', fromMillis(now, -DAY_MS)).get(),
      this.#cols.buckets.where('leaseUntil', '>', now).select('owner').get(),
    ]);
    const held = new Map<string, number>();
    for (const b of leased.docs) {
      const owner = b.get('owner') as string | null;
      if (owner != null) held.set(owner, (held.get(owner) ?? 0) + 1);
    }
    return relays.docs
      .map((d): FirestoreRelayStatus => {
        const heartbeatAt = d.get('heartbeatAt') as Timestamp;
        const leftAt = d.get('leftAt') as Timestamp | null | undefined;
        const ttlMs = Number(d.get('ttlMs') ?? 0);
        const expiresMs = heartbeatAt.toMillis() + ttlMs;
        const state = leftAt != null ? 'left' : expiresMs > now.toMillis() ? 'alive' : 'expired';
        const age = seconds(heartbeatAt, now);
        return {
          relayId: d.id,
          host: String(d.get('host') ?? ''),
          pid: Number(d.get('pid') ?? 0),
          state,
          alive: state === 'alive',
          stateAgeSeconds: state === 'alive' ? age : state === 'left' ? seconds(leftAt!, now) : Math.max(0, (now.toMillis() - expiresMs) / 1000),
          leaseTtlMs: ttlMs,
          buckets: state === 'alive' ? (held.get(d.id) ?? 0) : 0,
          inFlight: Number(d.get('inFlight') ?? 0),
          publishedTotal: Number(d.get('publishedTotal') ?? 0),
          ratePerMinute: Number(d.get('ratePerMinute') ?? 0),
          heartbeatAgeSeconds: age,
        };
      })
      .sort((a, b) => (a.relayId < b.relayId ? -1 : a.relayId > b.relayId ? 1 : 0));
  }

  /** One snapshot for `txbox status`. */
  async status(): Promise<FirestoreOutboxStatus> {
    const [{ destinations, now }, relays, documents] = await Promise.all([this.destinations(true), this.relays(), this.#count(this.#cols.outbox)]);
    const recent = await this.#count(this.#cols.outbox.where('state', '==', 'published').where('doneAt', '>', fromMillis(now, -60_000)));
    const alive = relays.filter((r) => r.alive);
    return {
      destinations,
      relays,
      inFlight: alive.reduce((s, r) => s + r.inFlight, 0),
      publishedLastMinute: Math.max(recent, alive.reduce((s, r) => s + r.ratePerMinute, 0)),
      collection: { name: this.#names.outbox, documents },
    };
  }

  /** Pending, parked and oldest pending age per destination, and the relays alive: the relay's metric gauges. */
  async gauges(): Promise<OutboxGauges> {
    const [{ destinations }, relays] = await Promise.all([this.destinations(false), this.relays()]);
    return {
      destinations: destinations.map((d) => ({ destination: d.destination, pending: d.pending, parked: d.parked, oldestPendingSeconds: d.oldestPendingSeconds ?? 0 })),
      relaysAlive: relays.filter((r) => r.alive).length,
    };
  }
}

/** `t` plus `ms` as a Timestamp (millisecond precision is enough for these cutoffs). */
function fromMillis(t: Timestamp, ms: number): Timestamp {
  return Timestamp.fromMillis(t.toMillis() + ms);
}
