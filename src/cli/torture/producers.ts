/**
 * The torture run's producers: concurrent writers that each lock a key's row
 * (the per-aggregate serialization txbox relies on), bump its version and
 * enqueue one to three events in the same transaction; about `rollbackRate` of
 * the transactions roll back after enqueueing, and one extra writer keeps a
 * transaction open 0.5-3 s before it commits (an early `seq` that commits
 * late). Only transactions whose COMMIT succeeded are recorded.
 */
import { createOutbox, defineEvent, payloadType, type Outbox } from '../../index.ts';
import type { PostgresConnection } from '../../stores/postgres/postgres-connection.ts';
import { PostgresOutboxStore } from '../../stores/postgres/postgres-outbox-store.ts';
import { Random, Zipf } from './random.ts';
import { thrownText } from '../../core/error-text.ts';

export const DESTINATIONS = ['orders', 'payments'] as const;

/** One event type per destination (a key always goes to the same one), so both of the observer's destinations are used. */
export const TORTURE_EVENTS = DESTINATIONS.map((destination) =>
  defineEvent({ type: `Torture.${destination}`, aggregateType: 'TortureKey', destination, payload: payloadType<{ key: string; version: number }>() }),
);

export interface CommittedLog {
  /** key -> event ids in commit (= version) order. */
  readonly byKey: Map<string, string[]>;
  /** Event ids of transactions that rolled back. */
  readonly rolledBack: Set<string>;
  /** id -> performance.now() at commit. */
  readonly committedAt: Map<string, number>;
  transactions: number;
  rolledBackTransactions: number;
  longTransactions: number;
  committed: number;
  /** Transactions that failed for another reason than the planned rollback (e.g. a lost connection). */
  failed: number;
  lastFailure: string;
}

export interface ProducerOptions {
  readonly db: PostgresConnection;
  readonly schema: string;
  readonly keys: number;
  readonly events: number;
  readonly writers: number;
  readonly rollbackRate: number;
  /** Keep one transaction open 0.5-3 s at a time (off on PGlite, whose single connection would stall everyone). */
  readonly longTransactions: boolean;
  /** Send NOTIFY with the inserts (off for relays in the WAL wake mode). */
  readonly notify: boolean;
  readonly seed: number;
  readonly stopped: () => boolean;
}

class PlannedRollback extends Error {}

export const keyName = (i: number): string => `k${i}`;

export async function createProducerTables(db: PostgresConnection, schema: string, keys: number): Promise<void> {
  await db.query(`CREATE TABLE "${schema}".torture_keys (key text PRIMARY KEY, version integer NOT NULL)`);
  await db.query(`INSERT INTO "${schema}".torture_keys SELECT 'k' || i, 0 FROM generate_series(0, $1::int - 1) i`, [keys]);
}

export function emptyLog(): CommittedLog {
  return { byKey: new Map(), rolledBack: new Set(), committedAt: new Map(), transactions: 0, rolledBackTransactions: 0, longTransactions: 0, committed: 0, failed: 0, lastFailure: '' };
}

export async function produce(o: ProducerOptions, log: CommittedLog): Promise<void> {
  const outbox: Outbox = createOutbox({ store: new PostgresOutboxStore({ schema: o.schema, notify: o.notify }), events: TORTURE_EVENTS });
  const zipf = new Zipf(o.keys);
  let inFlight = 0;
  const more = (): boolean => log.committed + inFlight < o.events && !o.stopped();

  const transaction = async (random: Random, holdMs: number): Promise<void> => {
    // Long transactions take a key of the cold half: on a hot key they would stall every writer behind its lock.
    const key = keyName(holdMs > 0 ? random.int(Math.floor(o.keys / 2), o.keys - 1) : zipf.draw(random));
    const count = random.int(1, 3);
    const rollback = random.next() < o.rollbackRate;
    inFlight += count;
    log.transactions++;
    let ids: string[] = [];
    let base = 0;
    try {
      await o.db.transaction(async (tx) => {
        const { rows } = await tx.query(`SELECT version FROM "${o.schema}".torture_keys WHERE key = $1 FOR UPDATE`, [key]);
        base = (rows[0] as { version: number }).version;
        await tx.query(`UPDATE "${o.schema}".torture_keys SET version = $2 WHERE key = $1`, [key, base + count]);
        const define = TORTURE_EVENTS[Number(key.slice(1)) % TORTURE_EVENTS.length]!;
        const events = Array.from({ length: count }, (_, i) =>
          define({ aggregateId: key, key, version: base + i + 1, payload: { key, version: base + i + 1 } }),
        );
        ids = await outbox.enqueue(tx, events);
        if (holdMs > 0) await new Promise((r) => setTimeout(r, holdMs));
        if (rollback) throw new PlannedRollback();
      });
      // Placed by version (contiguous from 1 for committed events: a rollback undoes its bump), not by
      // the order commits resolved here: commit order of one key is its version order.
      const list = log.byKey.get(key) ?? [];
      const at = performance.now();
      ids.forEach((id, i) => {
        list[base + i] = id;
        log.committedAt.set(id, at);
      });
      log.byKey.set(key, list);
      log.committed += count;
    } catch (err) {
      if (err instanceof PlannedRollback) {
        log.rolledBackTransactions++;
        for (const id of ids) log.rolledBack.add(id);
      } else {
        // Outcome unknown only if COMMIT itself failed; the producer's connections are never
        // terminated on purpose, so this is counted and reported, not guessed.
        log.failed++;
        log.lastFailure = thrownText(err);
      }
    } finally {
      inFlight -= count;
    }
  };

  const writer = async (n: number): Promise<void> => {
    const random = new Random(o.seed + 7919 * (n + 1));
    while (more()) {
      // PGlite answers through microtasks only: yield so the relays' and receivers' I/O runs.
      await new Promise((r) => setImmediate(r));
      await transaction(random, 0);
    }
  };
  const slowWriter = async (): Promise<void> => {
    const random = new Random(o.seed + 104729);
    while (more()) {
      log.longTransactions++;
      await transaction(random, random.int(500, 3000));
    }
  };
  await Promise.all([...Array.from({ length: o.writers }, (_, n) => writer(n)), ...(o.longTransactions ? [slowWriter()] : [])]);
}
