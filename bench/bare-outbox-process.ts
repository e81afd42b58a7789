/**
 * The bare outbox in a fresh process (bench/peer-graphile-worker.ts's outbox
 * ceiling): txbox's claim statement and a bare mark in a plain loop, none of
 * the relay's logic. Each of `lanes` loops, on its own connection, owns the
 * buckets `bucket % lanes = lane` (as the relay's lanes split them, but with
 * no lease) and repeats:
 *
 *   the store's claim (the outbox's claim function: 500 pending rows of the
 *     lane's buckets, in seq order, none behind an earlier open row of its key)
 *   publish the rows through the same transport the relay uses, wait for every ack
 *   UPDATE outbox SET state = 'published', done_at = now(), attempts = attempts + 1
 *     WHERE seq = ANY(<the acked seqs>)      (synchronous_commit off, as the relay's marks)
 *
 * Two statements per 500 events, the mark after the ack (a crash publishes
 * again: at-least-once). The rows are read into events exactly as the relay's
 * store reads them (its columns and `rowToEvent`). What the relay adds and
 * this leaves out: leases and their renewal, the fenced mark, retries,
 * backoff, parking, wake-ups, metrics, events. So this is what txbox's relay
 * would reach on this machine if all of that cost nothing, in one process as
 * the relay runs: txbox's drain against it is the cost of that logic, and its
 * ratio to graphile-worker's the ceiling of txbox's ratio.
 *
 * Config: one IPC message, BareOutboxConfig; answers one BareOutboxMessage.
 */
import pg from 'pg';
import type { Transport } from 'txbox';
import { postgresNames } from 'txbox/postgres';
import { claimSql } from '../src/stores/postgres/postgres-sql.ts';
import { rowToEvent, type EventRow } from '../src/stores/postgres/postgres-relay-store.ts';
import { sinkTransport } from './broker-transports.ts';
import { openCpuWindow, type CpuWindow } from './cpu-window.ts';
import { bareMarkSql, DATABASE_URL, MemorySampler, NoopTransport } from './lib.ts';
import type { RelayWorkerConfig } from './relay-process.ts';

/** The relay gives each call a signal; the bare loop never aborts. */
const NEVER = new AbortController().signal;

export interface BareOutboxConfig {
  readonly sink: RelayWorkerConfig['transport'];
  /** The bench's schema (its outbox, claim function and buckets). */
  readonly schema: string;
  /** Stops once this many events are published. */
  readonly expect: number;
  readonly lanes: number;
  readonly batch: number;
}

export type BareOutboxMessage =
  | { readonly type: 'result'; readonly published: number; readonly ms: number; readonly cpuMs: number; readonly rssMax: number; readonly cpuWindow: CpuWindow; readonly unacked: number }
  | { readonly type: 'error'; readonly message: string };

process.once('message', (config: BareOutboxConfig) => {
  void (async () => {
    try {
      process.send?.({ type: 'result', ...(await drain(config)) } satisfies BareOutboxMessage);
    } catch (err) {
      process.send?.({ type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) } satisfies BareOutboxMessage);
    }
    process.disconnect?.();
  })();
});

async function drain(config: BareOutboxConfig): Promise<Omit<Extract<BareOutboxMessage, { type: 'result' }>, 'type'>> {
  const transport: Transport = config.sink.kind === 'noop' ? new NoopTransport() : await sinkTransport(config.sink);
  await transport.start?.(AbortSignal.timeout(60_000));
  const clients = await Promise.all(
    Array.from({ length: config.lanes }, async () => {
      const c = new pg.Client({ connectionString: DATABASE_URL });
      await c.connect();
      await c.query('SET synchronous_commit = off');
      return c;
    }),
  );
  const names = postgresNames({ schema: config.schema });
  const { rows: all } = await clients[0]!.query<{ bucket: number }>(`SELECT bucket FROM ${names.buckets} ORDER BY bucket`);
  const claims = clients.map((_, lane) => ({
    name: `bare-claim-${lane}`,
    text: claimSql(names),
    values: [all.map((b) => b.bucket).filter((b) => b % config.lanes === lane), config.batch, []],
  }));
  const mark = bareMarkSql(names.outbox);
  let published = 0;
  let unacked = 0;
  const memory = new MemorySampler(100);
  const started = performance.now();
  const cpuStart = process.cpuUsage();
  const closeWindow = openCpuWindow();
  let ended: { ms: number; cpuMs: number; cpuWindow: CpuWindow } | undefined;
  const end = (): void => {
    if (ended !== undefined) return;
    const cpu = process.cpuUsage(cpuStart);
    ended = { ms: performance.now() - started, cpuMs: (cpu.user + cpu.system) / 1000, cpuWindow: closeWindow() };
  };
  await Promise.all(
    clients.map(async (c, lane) => {
      while (published < config.expect) {
        const { rows } = await c.query<EventRow>(claims[lane]!);
        if (rows.length === 0) break;
        const events = rows.map(rowToEvent);
        const outcomes = await transport.publish(events, NEVER);
        const acked: number[] = [];
        for (let i = 0; i < events.length; i++) if (outcomes[i]!.ok) acked.push(events[i]!.seq);
        await c.query({ name: 'bare-mark', text: mark, values: [acked] });
        published += acked.length;
        unacked += events.length - acked.length;
        if (published >= config.expect) end();
      }
    }),
  );
  end();
  memory.stop();
  await Promise.all(clients.map((c) => c.end()));
  await transport.close();
  return { published, ...ended!, rssMax: memory.maxRss, unacked };
}
