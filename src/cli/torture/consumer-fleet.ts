/**
 * The receiving side of `txbox torture --inbox`: consumer processes
 * (consumer-process.ts) using txbox's consumer and inbox, killed at random
 * mid-handler or between commit and ack, restarted in the same slot; and the
 * final check that every committed event was applied exactly once and every
 * key's projection holds its last committed version.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { exitWithParentArgs } from './child-args.ts';
import type { PostgresConnection } from '../../stores/postgres/postgres-connection.ts';
import { inboxNames } from '../../stores/postgres/postgres-inbox-store.ts';
import { migrateInbox } from '../../stores/postgres/postgres-migrations.ts';
import { generateWebhookSecret } from '../../transports/http/index.ts';
import type { RelayTransportConfig } from '../demo/demo-sink.ts';
import { DESTINATIONS, type CommittedLog } from './producers.ts';
import type { Random } from './random.ts';
import { dropConsumerState } from './consumer-broker.ts';

export const INBOX_TRANSPORTS = ['http', 'redis', 'nats', 'kafka', 'rabbitmq', 'pubsub', 'sqs'];

/** What a consumer process is told (as JSON in TXBOX_TORTURE_CONSUMER). */
export interface ConsumerSettings {
  readonly databaseUrl: string;
  readonly schema: string;
  readonly run: string;
  readonly slot: number;
  readonly transport: RelayTransportConfig;
  /** http: the port it listens on (the same after each restart) and the signing secret. */
  readonly port?: number;
  readonly secret?: string;
  /**
   * NATS and Redis consumers' maxDeliveries: the run's planned consumer kills
   * plus the default guard (12). A kill returns every message its process
   * held, most of them merely queued behind their key's earlier ones, and
   * each return counts a delivery; a run that kills the consumers this often
   * would otherwise dead-letter such bystanders unhandled, which is the guard
   * against a message that crashes its consumer working as meant, not a loss.
   */
  readonly maxDeliveries: number;
}

export interface InboxCheck {
  readonly appliedUnique: number;
  /** Committed events never applied. */
  readonly missing: number;
  /** Applied events that were never committed. */
  readonly phantom: number;
  /** Applications beyond the first of one event (the inbox must prevent them all). */
  readonly duplicateApplies: number;
  /** First applications of a key not in version order. */
  readonly orderViolations: number;
  /** Keys whose projected version differs from their last committed version. */
  readonly projectionMismatches: number;
  /** Inbox rows left dead, failed, held or retrying. */
  readonly inboxUnsettled: number;
  readonly consumerKills: number;
  readonly consumerRestarts: number;
  /** Consumer processes that exited without being killed (each was replaced). */
  readonly consumerCrashes: number;
  /** What the consumer processes saw, summed (filled in once they stopped). */
  readonly stats?: ConsumerStats;
}

interface Slot {
  readonly slot: number;
  readonly port: number | undefined;
  child: ChildProcess | undefined;
  exited: Promise<void>;
  /** Set while the fleet itself stops or kills the child: its exit is no crash. */
  expected: boolean;
  /** The last `stats` line of the current process. */
  stats: ConsumerStats | undefined;
}

/** Counts of what the consumer processes saw: the inbox's outcomes and the broker consumer's own `stats`. */
export interface ConsumerStats {
  readonly inbox: Record<string, number>;
  readonly broker: Record<string, number>;
}

function addStats(into: { inbox: Record<string, number>; broker: Record<string, number> }, s: ConsumerStats): void {
  for (const part of ['inbox', 'broker'] as const) for (const [k, v] of Object.entries(s[part])) if (typeof v === 'number') into[part][k] = (into[part][k] ?? 0) + v;
}

/** How long a slot may take to get a process that prints `ready` (it waits for an unreachable broker meanwhile), over all attempts. */
const READY_TIMEOUT_MS = 180_000;

export interface ConsumerFleetOptions {
  readonly databaseUrl: string;
  readonly schema: string;
  readonly run: string;
  readonly transport: RelayTransportConfig;
  readonly count: number;
  readonly seed: number;
  /** Consumer kills the run plans (SIGUSR2). */
  readonly kills: number;
}

export class ConsumerFleet {
  readonly #o: ConsumerFleetOptions;
  readonly #slots: Slot[] = [];
  readonly #secret = generateWebhookSecret();
  #kills = 0;
  #restarts = 0;
  #stopping = false;
  /** Consumer processes that exited without being told to (each is replaced). */
  #unexpectedExits = 0;
  /** The stats of processes that exited, summed. */
  readonly #exitedStats = { inbox: {} as Record<string, number>, broker: {} as Record<string, number> };

  constructor(o: ConsumerFleetOptions) {
    if (!INBOX_TRANSPORTS.includes(o.transport.type)) {
      throw new Error(`--inbox: consumer processes exist for ${INBOX_TRANSPORTS.join(', ')}; got --transport ${o.transport.type}`);
    }
    this.#o = o;
  }

  /** Creates the inbox, projection and applied tables and starts the consumer processes. */
  async start(db: PostgresConnection): Promise<void> {
    const s = this.#o.schema;
    await migrateInbox(db, inboxNames({ schema: s }));
    await db.query(`CREATE TABLE "${s}".torture_view (key text PRIMARY KEY, version bigint NOT NULL, event_id uuid)`);
    await db.query(`CREATE TABLE "${s}".torture_applied (n bigserial PRIMARY KEY, event_id uuid NOT NULL, key text NOT NULL, version integer NOT NULL)`);
    for (let slot = 0; slot < this.#o.count; slot++) {
      const port = this.#o.transport.type === 'http' ? await freePort() : undefined;
      const s: Slot = { slot, port, child: undefined, exited: Promise.resolve(), expected: false, stats: undefined };
      this.#slots.push(s);
      await this.#spawnWithRetry(s);
    }
  }

  /** The relays' transport with --inbox over HTTP: each destination posts to one consumer process. */
  httpTransport(): RelayTransportConfig {
    const endpoints = Object.fromEntries(DESTINATIONS.map((d, i) => [d, `http://127.0.0.1:${this.#slots[i % this.#slots.length]!.port}/${d}`]));
    return { type: 'http', endpoints, secret: this.#secret, timeoutMs: 5000 };
  }

  /** Starts the slot's process; one that exits before `ready` is started again after a backoff (1 s doubling to 10 s), for up to READY_TIMEOUT_MS in all. */
  async #spawnWithRetry(s: Slot): Promise<void> {
    const deadline = performance.now() + READY_TIMEOUT_MS;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.#spawn(s, Math.max(1000, deadline - performance.now()));
        return;
      } catch (err) {
        if (this.#stopping || performance.now() >= deadline) throw err;
        await new Promise((r) => setTimeout(r, Math.min(10_000, 1000 * 2 ** (attempt - 1))));
        if (this.#stopping) throw err;
      }
    }
  }

  async #spawn(s: Slot, readyTimeoutMs: number): Promise<void> {
    const settings: ConsumerSettings = { databaseUrl: this.#o.databaseUrl, schema: this.#o.schema, run: this.#o.run, slot: s.slot, transport: this.#o.transport, maxDeliveries: this.#o.kills + 12, ...(s.port !== undefined ? { port: s.port, secret: this.#secret } : {}) };
    const here = fileURLToPath(import.meta.url);
    const script = fileURLToPath(new URL(`./consumer-process${extname(here)}`, import.meta.url));
    const child = spawn(process.execPath, [...process.execArgv, ...exitWithParentArgs(), script], {
      env: { ...process.env, TXBOX_TORTURE_CONSUMER: JSON.stringify(settings) },
      // stdin: the pipe that ends the consumer with this process (exit-with-parent.ts).
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
    s.child = child;
    s.expected = false;
    s.stats = undefined;
    let buffered = '';
    child.stdout!.on('data', (d: Buffer) => {
      const lines = (buffered + d.toString()).split('\n');
      buffered = lines.pop()!;
      for (const line of lines) {
        if (!line.startsWith('stats ')) continue;
        try {
          s.stats = JSON.parse(line.slice(6)) as ConsumerStats;
        } catch {
          // a torn line: the next one comes within a second
        }
      }
    });
    s.exited = new Promise((resolve) =>
      child.once('close', () => {
        if (s.stats) addStats(this.#exitedStats, s.stats);
        s.stats = undefined;
        resolve();
      }),
    );
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout!.on('data', (d: Buffer) => {
          if (d.toString().includes('ready')) resolve();
        });
        child.once('close', (code, signal) => reject(new Error(`torture consumer ${s.slot} exited before it was ready (${code ?? signal}): ${stderr.trim().slice(-500)}`)));
        timer = setTimeout(() => {
          child.kill('SIGKILL');
          reject(new Error(`torture consumer ${s.slot} was not ready within ${Math.round(readyTimeoutMs / 1000)} s: ${stderr.trim().slice(-500)}`));
        }, readyTimeoutMs);
      });
    } finally {
      clearTimeout(timer);
    }
    // Ready: from now on an exit the fleet did not cause is a crash, and the slot gets a new process.
    void s.exited.then(() => {
      if (s.child !== child || s.expected || this.#stopping) return;
      this.#unexpectedExits++;
      this.#restarts++;
      void this.#spawnWithRetry(s).catch(() => {});
    });
  }

  /** Arms a crash in one consumer (SIGKILL at its next event, mid-handler or after commit); SIGKILL after 2 s anyway; restarts it. */
  async killOne(random: Random): Promise<void> {
    const s = random.pick(this.#slots);
    if (!s.child || s.child.exitCode !== null || s.child.signalCode !== null) return;
    this.#kills++;
    s.expected = true;
    s.child.kill('SIGUSR2');
    const timer = setTimeout(() => s.child?.kill('SIGKILL'), 2000);
    await s.exited;
    clearTimeout(timer);
    this.#restarts++;
    // While the broker is down the new process waits for it before `ready`: this waits with it (bounded).
    await this.#spawnWithRetry(s);
  }

  /** What every consumer process of the run saw so far (the exited ones' last report included). */
  stats(): ConsumerStats {
    const sum = { inbox: { ...this.#exitedStats.inbox }, broker: { ...this.#exitedStats.broker } };
    for (const slot of this.#slots) if (slot.stats) addStats(sum, slot.stats);
    return sum;
  }

  /** Distinct events applied so far (for the progress line and the drain's timeline). */
  async appliedCount(db: PostgresConnection): Promise<number> {
    const { rows } = await db.query<{ n: number }>(`SELECT count(DISTINCT event_id)::int AS n FROM "${this.#o.schema}".torture_applied`);
    return Number(rows[0]?.n ?? 0);
  }

  async check(db: PostgresConnection, log: CommittedLog): Promise<InboxCheck> {
    const s = this.#o.schema;
    const applied = await db.query<{ event_id: string; key: string; version: number }>(`SELECT event_id, key, version FROM "${s}".torture_applied ORDER BY n`);
    const committed = new Set(log.committedAt.keys());
    const times = new Map<string, number>();
    const next = new Map<string, number>();
    let phantom = 0;
    let orderViolations = 0;
    for (const r of applied.rows) {
      const n = (times.get(r.event_id) ?? 0) + 1;
      times.set(r.event_id, n);
      if (!committed.has(r.event_id)) phantom++;
      if (n > 1) continue;
      const expected = (next.get(r.key) ?? 0) + 1;
      if (Number(r.version) !== expected) orderViolations++;
      next.set(r.key, Math.max(expected, Number(r.version)));
    }
    let missing = 0;
    for (const id of committed) if (!times.has(id)) missing++;
    const view = new Map((await db.query<{ key: string; version: string }>(`SELECT key, version FROM "${s}".torture_view`)).rows.map((r) => [r.key, Number(r.version)]));
    let projectionMismatches = 0;
    for (const [key, ids] of log.byKey) if (view.get(key) !== ids.length) projectionMismatches++;
    for (const key of view.keys()) if (!log.byKey.has(key)) projectionMismatches++;
    const unsettled = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${s}".inbox WHERE status <> 'processed'`);
    return {
      appliedUnique: times.size,
      missing,
      phantom,
      duplicateApplies: applied.rows.length - times.size,
      orderViolations,
      projectionMismatches,
      inboxUnsettled: Number(unsettled.rows[0]?.n ?? 0),
      consumerKills: this.#kills,
      consumerRestarts: this.#restarts,
      consumerCrashes: this.#unexpectedExits,
    };
  }

  async stopAll(): Promise<void> {
    this.#stopping = true;
    await Promise.all(
      this.#slots.map(async (s) => {
        const child = s.child;
        s.child = undefined;
        s.expected = true;
        if (!child || child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await s.exited;
        clearTimeout(timer);
      }),
    );
  }

  /** After stopAll(): removes the consumers' queue (RabbitMQ) or group (Kafka) from the broker. Best effort. */
  async dropBrokerState(): Promise<void> {
    await dropConsumerState(this.#o.transport, this.#o.run).catch(() => {});
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}
