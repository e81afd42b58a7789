import { randomUUID } from 'node:crypto';
import type { PGlite } from '@electric-sql/pglite';
import { createRelay, type Relay } from '../../relay/relay.ts';
import { checkDeliveries, type DeliveryReport } from '../../testing/order-check.ts';
import { pgConnection } from '../../stores/postgres/pg-connection.ts';
import { CliError, EXIT, redactUrl } from '../cli-error.ts';
import { connectProblem } from '../database.ts';
import { importOptional } from '../optional-import.ts';
import { RolledBack, type CommittedEvent } from './order-service.ts';
import type { ProjectionCheck } from './inventory-service.ts';
import { postgresDemoBackend, type DemoBackend } from './demo-backend.ts';
import type { DemoSink } from './demo-sink.ts';
import type { FirestoreLocation } from '../backends/firestore-url.ts';

export interface DemoOptions {
  /** Events to commit. */
  readonly events: number;
  readonly writers: number;
  /** Share of transactions rolled back on purpose. */
  readonly rollbackRate: number;
  /** Abort the relay (as a crash) and start a new one this often; 0 = never. */
  readonly crashEveryMs: number;
  /** A PostgreSQL URL, or with `store: 'mysql'` a MySQL/MariaDB one; default: embedded PGlite in memory. */
  readonly databaseUrl: string | undefined;
  /** Default: PostgreSQL (PGlite without a URL). */
  readonly store?: 'postgres' | 'mysql' | 'firestore';
  /** With `store: 'firestore'`: the project and database (from a firestore:// URL, or the emulator's demo project). */
  readonly firestore?: FirestoreLocation;
  readonly sink: DemoSink;
  readonly onProgress: (line: string) => void;
  /** Aborting stops the writers, stops the relay gracefully and reports what happened so far. */
  readonly signal?: AbortSignal;
}

export interface DemoReport extends DeliveryReport {
  readonly database: string;
  readonly sink: string;
  readonly transactions: number;
  readonly rolledBack: number;
  readonly relayRestarts: number;
  readonly elapsedMs: number;
  readonly latencyMs: { readonly p50: number; readonly p99: number; readonly max: number };
  /** Committed events still undelivered when the demo gave up waiting. */
  readonly timedOut: boolean;
  /** Stopped early by a signal. */
  readonly interrupted: boolean;
  /** The inventory service's projection against the committed orders. */
  readonly projection: ProjectionCheck;
}

const SCHEMA_PREFIX = 'txbox_demo';

export async function runDemo(o: DemoOptions): Promise<DemoReport> {
  const id = randomUUID().slice(0, 8);
  const schema = `${SCHEMA_PREFIX}_${id}`;
  const backend =
    o.store === 'mysql'
      ? await (await import('./mysql-demo.ts')).openMysqlDemo(o.databaseUrl!, id)
      : o.store === 'firestore'
        ? await (await importOptional('the demo on Firestore', () => import('./firestore-demo.ts'))).openFirestoreDemo(o.firestore!, id)
        : await openDemoDatabase(o.databaseUrl, schema);
  let relay: Relay | undefined;
  let crashTimer: NodeJS.Timeout | undefined;
  let ticker: NodeJS.Timeout | undefined;
  // The simulated crash in progress (abort, then a new relay's start), and the first one that failed.
  let crashCycle: Promise<void> = Promise.resolve();
  let crashError: unknown;
  try {
    await backend.setup();
    await o.sink.start((event) => backend.deliver(event));
    const newRelay = (): Relay =>
      createRelay({
        store: backend.relayStore(),
        transport: o.sink.transport(),
        // 2 s even under frequent crashes: with a shorter lease (it was half the crash interval, at least
        // 500 ms) the publish timeout (the lease minus its margin) ran out on a loaded machine before a
        // wave's handlers answered, so relays re-sent the same events and marked none (all duplicates, no
        // progress) even after the crashes stopped. A crashed relay's buckets are taken over when its
        // lease runs out, by whichever relay lives then.
        leaseTtlMs: 2000,
        pollIntervalMs: 100,
        // Small batches under frequent crashes: a relay must live long enough to finish one, and a wave's
        // handlers (the in-process receiver answers after the inventory inbox committed, on the same
        // database) must fit in the publish timeout (the lease's 1.6 s) on a loaded machine.
        batchSize: o.crashEveryMs > 0 ? 5 : 200,
        retry: { baseDelayMs: 50, maxDelayMs: 1000 },
      });
    relay = newRelay();
    await relay.start();

    const committed = new Map<string, string[]>();
    const commitTimes = new Map<string, number>();
    const orders: string[] = [];
    let transactions = 0;
    let rolledBack = 0;
    let committedCount = 0;
    let inFlight = 0; // transactions started but not finished: no overshoot of o.events
    // A relay that could not be restarted ends the run (with its error, thrown below).
    const stopped = (): boolean => (o.signal?.aborted ?? false) || crashError !== undefined;
    let restarts = 0;
    const started = performance.now();

    const record = (e: CommittedEvent): void => {
      const list = committed.get(e.key) ?? [];
      list[e.version - 1] = e.id;
      committed.set(e.key, list);
      commitTimes.set(e.id, performance.now());
      committedCount++;
    };
    const writer = async (): Promise<void> => {
      while (committedCount + inFlight < o.events && !stopped()) {
        inFlight++;
        const rollback = Math.random() < o.rollbackRate;
        transactions++;
        try {
          // Real writes arrive through I/O. PGlite runs in this thread and resolves through
          // microtasks only, so without this yield the writers would starve the relay's I/O.
          await new Promise((r) => setImmediate(r));
          if (orders.length < 5 || Math.random() < 0.45) {
            const orderId = randomUUID().slice(0, 13);
            const e = await backend.createOrder(orderId, `customer-${orders.length % 97}`, 10 + (orders.length % 90), rollback);
            orders.push(orderId);
            record(e);
          } else {
            // Pay a recent order: several writers often hit the same order, so the row lock matters.
            const orderId = orders[orders.length - 1 - Math.floor(Math.random() * Math.min(orders.length, 20))]!;
            record(await backend.capturePayment(orderId, randomUUID(), 5, rollback));
          }
        } catch (err) {
          if (!(err instanceof RolledBack)) throw err;
          rolledBack++;
        } finally {
          inFlight--;
        }
      }
    };
    let crashing = false;
    crashTimer =
      o.crashEveryMs > 0
        ? setInterval(() => {
            if (crashing || crashError !== undefined) return;
            crashing = true;
            crashCycle = (async () => {
              await relay!.abort();
              restarts++;
              relay = newRelay();
              await relay.start();
            })()
              .catch((err: unknown) => void (crashError ??= err))
              .finally(() => (crashing = false));
          }, o.crashEveryMs)
        : undefined;
    const uniqueDelivered = (): number => new Set(o.sink.arrivals.map((a) => a.id)).size;
    ticker = setInterval(() => {
      o.onProgress(
        `committed ${committedCount} | rolled back ${rolledBack} | delivered ${uniqueDelivered()} | relay restarts ${restarts}`,
      );
    }, 200);

    await Promise.all(Array.from({ length: o.writers }, writer));
    // Crashes happen while writers run; then the last relay drains what is left.
    clearInterval(crashTimer);
    await crashCycle;
    if (crashError !== undefined) throw crashError;
    // Wait for the relay to deliver everything committed (bounded).
    const deadline = performance.now() + 60_000 + o.crashEveryMs;
    let seenIds = new Set<string>();
    while (performance.now() < deadline && !stopped()) {
      seenIds = new Set(o.sink.arrivals.map((a) => a.id));
      if ([...commitTimes.keys()].every((id) => seenIds.has(id))) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    // And for the inventory service's projection to catch up (held gaps, retries).
    let projection = await backend.check();
    while (projection.mismatched > 0 && performance.now() < deadline && !stopped()) {
      await new Promise((r) => setTimeout(r, 50));
      projection = await backend.check();
    }
    const elapsedMs = performance.now() - started;
    clearInterval(ticker);
    await relay.stop();

    const report = checkDeliveries(committed, o.sink.arrivals);
    const latencies: number[] = [];
    const firstArrival = new Map<string, number>();
    for (const a of o.sink.arrivals) if (!firstArrival.has(a.id)) firstArrival.set(a.id, a.at);
    for (const [id, t] of commitTimes) {
      const at = firstArrival.get(id);
      if (at !== undefined) latencies.push(Math.max(0, at - t));
    }
    latencies.sort((a, b) => a - b);
    const q = (p: number): number => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0;
    return {
      ...report,
      database: backend.label,
      sink: o.sink.name,
      transactions,
      rolledBack,
      relayRestarts: restarts,
      elapsedMs,
      latencyMs: { p50: q(0.5), p99: q(0.99), max: latencies.at(-1) ?? 0 },
      timedOut: report.lost > 0 && !stopped(),
      interrupted: stopped(),
      projection,
    };
  } finally {
    // Also when a writer failed: no crash starts after this, and the one in progress ends before the relay stops.
    clearInterval(crashTimer);
    clearInterval(ticker);
    await crashCycle;
    await relay?.stop().catch(() => {});
    await o.sink.close().catch(() => {});
    await backend.close();
  }
}

async function openDemoDatabase(url: string | undefined, schema: string): Promise<DemoBackend> {
  if (url) {
    const db = pgConnection({ connectionString: url, maxConnections: 12, applicationName: 'txbox demo' });
    try {
      await db.query('SELECT 1');
    } catch (err) {
      await db.close().catch(() => {});
      throw new CliError(`${connectProblem(err, redactUrl(url))}: ${(err as Error).message}`, EXIT.database);
    }
    return postgresDemoBackend(db, schema, 'PostgreSQL', async () => {
      await db.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
      await db.close();
    });
  }
  const { PGlite } = await importOptional('the embedded demo (without --database-url)', () => import('@electric-sql/pglite'));
  const { pgliteConnection } = await import('../../stores/pglite/pglite-connection.ts');
  const pglite: PGlite = new PGlite();
  return postgresDemoBackend(pgliteConnection(pglite), schema, 'embedded PGlite (in memory)', async () => {
    await pglite.close();
  });
}
