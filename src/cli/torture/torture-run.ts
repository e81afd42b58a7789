/**
 * One `txbox torture` run: producers commit (and roll back) events while
 * relays are killed, paused past their lease and cut off from the database;
 * an independent observer records what arrived; at the end every committed
 * event is checked against the deliveries (and, with --inbox, against what
 * the consumer processes applied).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { PGlite } from '@electric-sql/pglite';
import { checkDeliveries } from '../../testing/order-check.ts';
import type { PostgresConnection } from '../../stores/postgres/postgres-connection.ts';
import { migratePostgres } from '../../stores/postgres/postgres-migrations.ts';
import { postgresNames } from '../../stores/postgres/postgres-sql.ts';
import { pgConnection } from '../../stores/postgres/pg-connection.ts';
import { dropPublication } from '../../stores/postgres/postgres-wal.ts';
import { CliError, EXIT, redactUrl } from '../cli-error.ts';
import type { DemoSink } from '../demo/demo-sink.ts';
import { createObserver, inboxOnlyLabel, observerReconnects, observerRejections, observes } from './observer.ts';
import { createProducerTables, emptyLog, produce, type CommittedLog } from './producers.ts';
import { InProcessRelayFleet, ProcessRelayFleet, type RelayFleet } from './relay-fleet.ts';
import { ConsumerFleet, type InboxCheck } from './consumer-fleet.ts';
import { Random } from './random.ts';
import { LeaseHistory, describeViolations, orderViolationSamples } from './order-evidence.ts';
import type { TortureOptions } from './torture-options.ts';
import { thrownText } from '../../core/error-text.ts';

/** With --inbox, the consumer processes are killed half as often as the relays. */
const consumerKillsOf = (kills: number): number => Math.ceil(kills / 2);

export interface TortureReport {
  readonly database: string;
  readonly transport: string;
  readonly relays: string;
  readonly seed: number;
  readonly schema: string;
  readonly transactions: number;
  readonly rolledBackTransactions: number;
  readonly longTransactions: number;
  readonly failedTransactions: number;
  readonly committed: number;
  readonly delivered: number;
  readonly lost: number;
  readonly phantom: number;
  /** Of the phantoms: ids of rolled-back transactions. */
  readonly rolledBackDelivered: number;
  readonly duplicates: number;
  readonly orderViolations: number;
  readonly signatureFailures: number;
  readonly unreadable: number;
  /** Times the observer reconnected and read again (RabbitMQ). */
  readonly observerReconnects: number;
  readonly kills: number;
  readonly pauses: number;
  readonly terminatedSessions: number;
  readonly terminations: number;
  readonly unexpectedRelayExits: number;
  readonly relaysNotStopping: readonly string[];
  /** ms from each kill until live relays leased every bucket the killed relay held (kills of relays holding none are not counted). */
  readonly recovery: { readonly measured: number; readonly p50: number; readonly max: number };
  /** The first per-key order violations, with their outbox rows, for the report. */
  readonly violations: readonly string[];
  /** Outbox rows by state at the end (pending or parked rows are the undelivered ones). */
  readonly outboxStates: Readonly<Record<string, number>>;
  readonly inbox: InboxCheck | undefined;
  readonly elapsedMs: number;
  readonly produceMs: number;
  readonly drainMs: number;
  readonly timedOut: boolean;
  /** --inbox: distinct events applied at the start of the drain and every 30 s of it (with its end), [seconds into the drain, applied]. */
  readonly drainTimeline: ReadonlyArray<readonly [number, number]>;
  readonly interrupted: boolean;
  /** Why the fault loop failed (a relay or consumer could not be restarted), which ended the run early; null when it did not. */
  readonly faultError: string | null;
  readonly logTail: readonly string[];
}

export interface TortureIo {
  readonly onProgress: (line: string) => void;
  /** Told once, when the observer is ready: the run's name, schema and where the observer reads (for an operator, or a test, to find them). */
  readonly onStart?: (line: string) => void;
  readonly signal: AbortSignal;
}

interface Kill {
  readonly at: number;
  /** Buckets the relay held (unexpired lease) just before it was killed. */
  readonly buckets: readonly number[];
  /** ms from the kill until live relays held every one of those buckets again. */
  takeoverMs: number | undefined;
}

export async function runTorture(o: TortureOptions, io: TortureIo): Promise<TortureReport> {
  const run = randomBytes(3).toString('hex');
  const schema = `txbox_torture_${run}`;
  const started = performance.now();
  const random = new Random(o.seed);
  const { db, label, close } = await openDatabase(o, run, schema);
  const tmp = mkdtempSync(join(tmpdir(), 'txbox-torture-'));
  let sink: DemoSink | undefined;
  let fleet: RelayFleet | undefined;
  let consumers: ConsumerFleet | undefined;
  const log: CommittedLog = emptyLog();
  let stopLeases = (): void => {};
  /** Set when a check failed: the schema stays for inspection. */
  let keepForInspection = false;
  try {
    await migratePostgres(db, postgresNames({ schema }));
    await createProducerTables(db, schema, o.keys);

    sink = await createObserver(o.transport, o.transportUrl, run, o.inbox);
    await sink.start(async () => {});
    const observer = sink;
    io.onStart?.(`txbox torture: run ${run}, schema ${schema}, observer ${observer.name}`);
    let relayTransport = observer.relayTransport();
    if (o.inbox) {
      consumers = new ConsumerFleet({ databaseUrl: o.databaseUrl!, schema, run, transport: relayTransport, count: o.consumers, seed: o.seed, kills: consumerKillsOf(o.kills) });
      await consumers.start(db);
      // HTTP: the relays post to the consumer processes; the observer is then the consumers' applied table.
      if (o.transport === 'http') relayTransport = consumers.httpTransport();
    }
    const tuning = { leaseTtlMs: o.leaseTtlMs, batchSize: 100, pollIntervalMs: 100, wake: o.wake };
    fleet =
      o.databaseUrl === undefined
        ? new InProcessRelayFleet(db, schema, run, () => observer.transport(), tuning)
        : new ProcessRelayFleet({ databaseUrl: o.databaseUrl, schema, run, configPath: join(tmp, 'relay.json'), transport: relayTransport, tuning });
    await fleet.start(o.relays);
    const relays = fleet;
    // Warm-up: faults start once every relay holds leases (a relay process takes a moment to start).
    const warmDeadline = performance.now() + 60_000;
    while (performance.now() < warmDeadline && !io.signal.aborted) {
      const { rows: owners } = await db.query<{ n: number }>(`SELECT count(DISTINCT owner)::int AS n FROM "${schema}".outbox_buckets WHERE lease_until > now()`);
      if (Number(owners[0]?.n ?? 0) >= o.relays) break;
      await sleep(100);
    }

    // Each bucket's owner and token over the run: evidence for an order violation, should one occur.
    const leases = new LeaseHistory(db, schema);
    leases.start();
    stopLeases = () => leases.stop();

    // Faults: kills (SIGKILL or abort), pauses past the lease, terminated sessions, consumer kills.
    const kills: Kill[] = [];
    const takeovers: Promise<void>[] = [];
    let pauses = 0;
    let terminations = 0;
    let terminatedSessions = 0;
    let producing = true;
    const processes = fleet.kind === 'processes';
    const plan = { kills: o.kills, pauses: processes ? Math.max(1, Math.floor(o.kills / 10)) : 0, terminations: processes ? Math.max(1, Math.floor(o.kills / 5)) : 0, consumerKills: consumers ? consumerKillsOf(o.kills) : 0 };
    let consumerKills = 0;
    const faultsLeft = (): number => plan.kills - kills.length + (plan.pauses - pauses) + (plan.terminations - terminations) + (plan.consumerKills - consumerKills);
    const meanGapMs = o.durationMs > 0 ? Math.max(200, o.durationMs / Math.max(1, faultsLeft())) : Math.max(400, o.leaseTtlMs / 2);
    let pausing: Promise<void> = Promise.resolve();
    /** Set when the fault loop failed: the producers and the drain stop, and the run reports it (exit 1) instead of waiting. */
    let faultError: string | null = null;
    const chaos = (async () => {
      while (faultsLeft() > 0 && !io.signal.aborted) {
        // Once the producers are done (early, under --duration), the faults left come at the default pace.
        const share = 0.5 + random.next();
        const waitFrom = performance.now();
        while (!io.signal.aborted) {
          const gap = producing ? meanGapMs : Math.min(meanGapMs, Math.max(400, o.leaseTtlMs / 2));
          const left = gap * share - (performance.now() - waitFrom);
          if (left <= 0) break;
          await sleep(Math.min(left, 100));
        }
        const live = relays.members.filter((m) => !m.paused);
        if (live.length === 0) continue;
        // Prefer a relay that holds leases: killing one that is still starting proves less.
        const { rows: owning } = await db.query<{ owner: string }>(`SELECT DISTINCT owner FROM "${schema}".outbox_buckets WHERE lease_until > now()`);
        const holders = new Set(owning.map((r) => r.owner));
        const busy = live.filter((m) => holders.has(m.id));
        const target = random.pick(busy.length > 0 ? busy : live);
        const choice = random.next() * faultsLeft();
        const killsLeft = plan.kills - kills.length;
        const pausesLeft = plan.pauses - pauses;
        const terminationsLeft = plan.terminations - terminations;
        if (choice < killsLeft) {
          const held = await db.query<{ bucket: number }>(`SELECT bucket FROM "${schema}".outbox_buckets WHERE owner = $1 AND lease_until > now()`, [target.id]);
          const kill = { at: performance.now(), buckets: held.rows.map((r) => Number(r.bucket)), takeoverMs: undefined as number | undefined };
          kills.push(kill);
          await relays.kill(target.id);
          if (kill.buckets.length > 0) takeovers.push(watchTakeover(db, schema, target.id, kill, io.signal));
        } else if (choice < killsLeft + pausesLeft) {
          pauses++;
          pausing = relays.pause(target.id, o.leaseTtlMs + 1000);
        } else if (choice < killsLeft + pausesLeft + terminationsLeft) {
          terminations++;
          if (target.applicationName) {
            const r = await db.query<{ n: number }>(`SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1`, [target.applicationName]);
            terminatedSessions += r.rows[0]?.n ?? 0;
          }
        } else {
          consumerKills++;
          await consumers!.killOne(random);
        }
      }
      await pausing;
      await Promise.all(takeovers);
    })().catch((err: unknown) => {
      faultError = thrownText(err);
      io.onProgress(`the fault loop failed: ${faultError}; stopping the run`);
    });

    const produceStarted = performance.now();
    const deadline = o.durationMs > 0 ? produceStarted + o.durationMs : Infinity;
    // --inbox: the consumers' progress, counted once a second beside the ticker (one query at a time).
    let applied = 0;
    let counting = false;
    const ticker = setInterval(() => {
      if (consumers && !counting) {
        counting = true;
        consumers
          .appliedCount(db)
          .then((n) => (applied = n))
          .catch(() => {})
          .finally(() => (counting = false));
      }
      io.onProgress(
        `committed ${log.committed} | rolled back tx ${log.rolledBackTransactions} | ${!observes(o.transport, o.inbox) ? `${o.transport === 'http' ? 'posted' : 'published'} to the inbox consumers` : `delivered ${observer.arrivals.length} (with duplicates)`}${consumers ? ` | applied ${applied}` : ''} | kills ${kills.length}/${plan.kills} | pauses ${pauses} | terminated ${terminatedSessions}${consumers ? ` | consumer kills ${consumerKills}` : ''}`,
      );
    }, 1000);
    try {
      await produce(
        { db, schema, keys: o.keys, events: o.events, writers: o.writers, rollbackRate: o.rollbackRate, longTransactions: processes, notify: o.wake === 'notify', seed: o.seed, stopped: () => io.signal.aborted || faultError !== null || performance.now() > deadline },
        log,
      );
      producing = false;
      const produceMs = performance.now() - produceStarted;
      await chaos;

      // Drain: everything committed must arrive (and, with --inbox, be applied) within the drain timeout.
      const drainStarted = performance.now();
      const drainDeadline = drainStarted + o.drainTimeoutMs;
      const seen = new Set<string>();
      let scanned = 0;
      const committedIds = [...log.committedAt.keys()];
      let missing = committedIds.length;
      const observing = observes(o.transport, o.inbox);
      const drainTimeline: Array<readonly [number, number]> = [];
      while (performance.now() < drainDeadline && !io.signal.aborted && faultError === null) {
        if (observing) {
          for (; scanned < observer.arrivals.length; scanned++) seen.add(observer.arrivals[scanned]!.id);
          missing = committedIds.filter((id) => !seen.has(id)).length;
        } else missing = 0;
        let inboxDone = true;
        if (consumers) {
          applied = await consumers.appliedCount(db);
          const at = Math.round((performance.now() - drainStarted) / 1000);
          if (drainTimeline.length === 0 || at >= drainTimeline.at(-1)![0] + 30) drainTimeline.push([at, applied]);
          inboxDone = applied >= log.committed;
        }
        if (missing === 0 && inboxDone) break;
        await sleep(250);
      }
      const drainMs = performance.now() - drainStarted;
      if (consumers) drainTimeline.push([Math.round(drainMs / 1000), applied]);
      const timedOut = performance.now() >= drainDeadline;
      const relaysNotStopping = await relays.stopAll(15_000);
      const checked = consumers ? await consumers.check(db, log) : undefined;
      await bounded(consumers?.stopAll(), 20_000, 'stopping the consumer processes', io);
      const inbox = checked && { ...checked, stats: consumers!.stats() };

      leases.stop();
      const violations = observing ? orderViolationSamples(log.byKey, observer.arrivals) : [];
      const report = observing ? checkDeliveries(log.byKey, observer.arrivals) : { committed: log.committed, delivered: inbox?.appliedUnique ?? 0, lost: inbox?.missing ?? 0, phantom: inbox?.phantom ?? 0, duplicates: inbox?.duplicateApplies ?? 0, orderViolations: inbox?.orderViolations ?? 0 };
      const rolledBackDelivered = observing ? new Set(observer.arrivals.filter((a) => log.rolledBack.has(a.id)).map((a) => a.id)).size : 0;
      const states = await db.query<{ state: string; n: number }>(`SELECT state, count(*)::int AS n FROM "${schema}".outbox GROUP BY state ORDER BY state`);
      const inboxFailed = inbox !== undefined && inbox.missing + inbox.phantom + inbox.duplicateApplies + inbox.orderViolations + inbox.projectionMismatches > 0;
      keepForInspection = report.lost + report.phantom + report.orderViolations > 0 || inboxFailed;
      return {
        database: label,
        transport: observing ? observer.name : inboxOnlyLabel(o.transport, observer, o.consumers),
        relays: processes ? `${o.relays} txbox relay processes${o.wake === 'wal' ? ', WAL wake mode' : ''}` : `${o.relays} in-process relays (PGlite)`,
        seed: o.seed,
        schema,
        transactions: log.transactions,
        rolledBackTransactions: log.rolledBackTransactions,
        longTransactions: log.longTransactions,
        failedTransactions: log.failed,
        committed: log.committed,
        delivered: report.delivered,
        lost: report.lost,
        phantom: report.phantom,
        rolledBackDelivered,
        duplicates: report.duplicates,
        orderViolations: report.orderViolations,
        ...observerRejections(observer),
        observerReconnects: observerReconnects(observer),
        kills: kills.length,
        pauses,
        terminations,
        terminatedSessions,
        unexpectedRelayExits: relays.unexpectedExits,
        relaysNotStopping,
        recovery: recoveryTimes(kills),
        outboxStates: Object.fromEntries(states.rows.map((r) => [r.state, Number(r.n)])),
        violations: await describeViolations(db, schema, violations, observer.arrivals, leases),
        inbox,
        elapsedMs: performance.now() - started,
        produceMs,
        drainMs,
        timedOut,
        drainTimeline,
        interrupted: io.signal.aborted,
        faultError,
        logTail: relays.logTail,
      };
    } finally {
      clearInterval(ticker);
      if (producing) io.onProgress('stopping');
    }
  } finally {
    // Every step bounded: a broker that is down must not keep the run from ending.
    stopLeases();
    await bounded(fleet?.stopAll(5000), 20_000, 'stopping the relays', io);
    await bounded(consumers?.stopAll(), 20_000, 'stopping the consumer processes', io);
    await bounded(consumers?.dropBrokerState(), 15_000, "removing the consumers' broker state", io);
    await bounded(sink?.close(), 15_000, 'closing the observer', io);
    rmSync(tmp, { recursive: true, force: true });
    await bounded(close(o.keep || keepForInspection ? undefined : schema), 30_000, 'dropping the schema and closing the database', io);
  }
}

/** Waits for a cleanup step, at most `ms`; a step that fails or takes longer is reported on the progress line and left behind. */
async function bounded(step: Promise<unknown> | undefined, ms: number, what: string, io: TortureIo): Promise<void> {
  if (step === undefined) return;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), ms)));
  try {
    const r = await Promise.race([step.then(() => 'done' as const), late]);
    if (r === 'late') io.onProgress(`${what} took over ${ms / 1000} s; going on without it`);
  } catch (err) {
    io.onProgress(`${what} failed: ${thrownText(err)}`);
  } finally {
    clearTimeout(timer);
  }
}

/** Polls (every 50 ms, for at most a minute) until live relays lease every bucket the killed relay held. */
async function watchTakeover(db: PostgresConnection, schema: string, killed: string, kill: Kill, signal: AbortSignal): Promise<void> {
  const until = kill.at + 60_000;
  while (performance.now() < until && !signal.aborted) {
    const { rows } = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM "${schema}".outbox_buckets WHERE bucket = ANY($1::smallint[]) AND owner IS NOT NULL AND owner <> $2 AND lease_until > now()`,
      [kill.buckets, killed],
    ).catch(() => ({ rows: [{ n: 0 }] }));
    if (Number(rows[0]?.n ?? 0) >= kill.buckets.length) {
      kill.takeoverMs = performance.now() - kill.at;
      return;
    }
    await sleep(50);
  }
}

/** Takeover times of the kills that held buckets. */
function recoveryTimes(kills: readonly Kill[]): TortureReport['recovery'] {
  const times = kills.flatMap((k) => (k.takeoverMs === undefined ? [] : [k.takeoverMs])).sort((a, b) => a - b);
  return { measured: times.length, p50: times[Math.floor(times.length / 2)] ?? 0, max: times.at(-1) ?? 0 };
}

async function openDatabase(o: TortureOptions, run: string, schema: string): Promise<{ db: PostgresConnection; label: string; close: (drop: string | undefined) => Promise<void> }> {
  if (o.databaseUrl !== undefined) {
    let url: URL;
    try {
      url = new URL(o.databaseUrl);
    } catch {
      throw new CliError('--database-url: not a URL; use e.g. postgres://user@127.0.0.1:5432/db');
    }
    url.searchParams.set('application_name', `txbox-torture-${run}-producer`);
    const db = pgConnection({ connectionString: url.toString(), maxConnections: o.writers + 4 });
    try {
      await db.query('SELECT 1');
    } catch (err) {
      await db.close().catch(() => {});
      throw new CliError(`cannot reach the database at ${redactUrl(o.databaseUrl)}: ${(err as Error).message}`, EXIT.database);
    }
    return {
      db,
      label: 'PostgreSQL',
      close: async (drop) => {
        if (drop) {
          // The WAL wake mode's relays created a publication on the outbox: it does not go with the schema.
          await dropPublication(db, postgresNames({ schema: drop })).catch(() => {});
          await db.query(`DROP SCHEMA IF EXISTS "${drop}" CASCADE`).catch(() => {});
        }
        await db.close();
      },
    };
  }
  const { PGlite } = await import('@electric-sql/pglite').catch(() => {
    throw new CliError('txbox torture without --database-url runs on embedded PGlite: npm install @electric-sql/pglite');
  });
  const { pgliteConnection } = await import('../../stores/pglite/pglite-connection.ts');
  const pglite: PGlite = new PGlite();
  void schema;
  return { db: pgliteConnection(pglite), label: 'embedded PGlite (in memory)', close: async () => void (await pglite.close()) };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

