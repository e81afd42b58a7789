/**
 * The relays under torture. On PostgreSQL: `txbox relay` child processes of
 * this very CLI (same Node flags, same entry point), each with its own
 * `application_name` so that its database sessions can be found and
 * terminated. On PGlite (one process): relays in this process, "killed" with
 * `relay.abort()`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createRelay, type Relay } from '../../relay/relay.ts';
import type { Transport } from '../../core/ports.ts';
import type { PostgresConnection } from '../../stores/postgres/postgres-connection.ts';
import { PostgresRelayStore } from '../../stores/postgres/postgres-relay-store.ts';
import { SENDER_HEADER, type RelayTransportConfig } from '../demo/demo-sink.ts';
import { exitWithParentArgs } from './child-args.ts';

export interface RelayTuning {
  readonly leaseTtlMs: number;
  readonly batchSize: number;
  readonly pollIntervalMs: number;
  /** The relay processes' wake mode (`--wake`). */
  readonly wake: 'notify' | 'wal';
}

export interface FleetMember {
  readonly id: string;
  /** PostgreSQL `application_name` of its sessions (process relays only). */
  readonly applicationName: string | undefined;
  readonly paused: boolean;
}

export interface RelayFleet {
  readonly kind: 'processes' | 'in-process';
  readonly members: readonly FleetMember[];
  /** Relays that exited without being told to (each is restarted). */
  readonly unexpectedExits: number;
  /** The last lines relays wrote to stderr (logs), for the report when something failed. */
  readonly logTail: readonly string[];
  start(count: number): Promise<void>;
  /** Kills one relay as a crash would and starts a replacement. */
  kill(id: string): Promise<void>;
  /** SIGSTOP for `ms`, then SIGCONT (process relays only). */
  pause(id: string, ms: number): Promise<void>;
  /** Stops every relay gracefully; resolves with the ids that did not stop within `timeoutMs` (then killed). */
  stopAll(timeoutMs: number): Promise<string[]>;
}

interface ChildRelay {
  readonly id: string;
  readonly applicationName: string;
  readonly child: ChildProcess;
  readonly exited: Promise<void>;
  readonly startedAt: number;
  paused: boolean;
  expected: boolean;
}

export interface ProcessFleetOptions {
  readonly databaseUrl: string;
  readonly schema: string;
  readonly run: string;
  /** Where the relays' config file (their transport) is written. */
  readonly configPath: string;
  readonly transport: RelayTransportConfig;
  readonly tuning: RelayTuning;
}

/** `txbox relay` processes, started with this process's Node flags and entry point. */
export class ProcessRelayFleet implements RelayFleet {
  readonly kind = 'processes';
  unexpectedExits = 0;
  readonly logTail: string[] = [];
  readonly #o: ProcessFleetOptions;
  readonly #relays: ChildRelay[] = [];
  #generation = 0;
  #stopping = false;
  /** Relays in a row that exited by themselves within 5 s of their start: the next replacement waits longer. */
  #quickExits = 0;

  constructor(o: ProcessFleetOptions) {
    this.#o = o;
    writeFileSync(o.configPath, JSON.stringify({ transport: o.transport }), { mode: 0o600 });
  }

  get members(): readonly FleetMember[] {
    return this.#relays;
  }

  async start(count: number): Promise<void> {
    for (let i = 0; i < count; i++) this.#spawn();
  }

  #spawn(): ChildRelay {
    const n = this.#generation++;
    const id = `torture-${this.#o.run}-r${n}`;
    const applicationName = `txbox-torture-${this.#o.run}-r${n}`;
    const url = new URL(this.#o.databaseUrl);
    url.searchParams.set('application_name', applicationName);
    const t = this.#o.tuning;
    // Over HTTP each relay names itself in a header, so that the observer knows who sent each delivery.
    let configPath = this.#o.configPath;
    if (this.#o.transport.type === 'http') {
      configPath = configPath.replace(/(\.json)?$/, `-r${n}.json`);
      const headers = { ...(this.#o.transport.headers as Record<string, string> | undefined), [SENDER_HEADER]: id };
      writeFileSync(configPath, JSON.stringify({ transport: { ...this.#o.transport, headers } }), { mode: 0o600 });
    }
    const entry = process.argv[1];
    if (!entry) throw new Error('txbox torture: cannot find the txbox entry point to start relays');
    const child = spawn(
      process.execPath,
      [...process.execArgv, ...exitWithParentArgs(), entry, 'relay', '--relay-id', id, '--lease-ttl-ms', String(t.leaseTtlMs), '--batch-size', String(t.batchSize), '--poll-interval-ms', String(t.pollIntervalMs), '--keep-published', 'off', '--wake', t.wake],
      {
        env: { ...withoutTxbox(process.env), TXBOX_DATABASE_URL: url.toString(), TXBOX_SCHEMA: this.#o.schema, TXBOX_CONFIG: configPath, TXBOX_LOG_LEVEL: 'warn' },
        // stdin: the pipe that ends the relay with this process (exit-with-parent.ts).
        stdio: ['pipe', 'ignore', 'pipe'],
      },
    );
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (text: string) => {
      for (const line of text.split('\n')) if (line.trim()) this.#log(`${id}: ${line}`);
    });
    const relay: ChildRelay = {
      id,
      applicationName,
      child,
      paused: false,
      expected: false,
      startedAt: performance.now(),
      exited: new Promise((resolve) => child.once('close', () => resolve())),
    };
    void relay.exited.then(() => {
      const i = this.#relays.indexOf(relay);
      if (i >= 0) this.#relays.splice(i, 1);
      if (!relay.expected && !this.#stopping) {
        this.unexpectedExits++;
        // A relay that cannot start (the database or broker gone) would otherwise be replaced in a tight loop.
        this.#quickExits = performance.now() - relay.startedAt < 5000 ? this.#quickExits + 1 : 0;
        const delayMs = this.#quickExits === 0 ? 0 : Math.min(10_000, 250 * 2 ** this.#quickExits);
        this.#log(`${id}: exited by itself (code ${child.exitCode}, signal ${child.signalCode}); starting a replacement${delayMs > 0 ? ` in ${delayMs} ms` : ''}`);
        setTimeout(() => {
          if (!this.#stopping) this.#spawn();
        }, delayMs);
      }
    });
    this.#relays.push(relay);
    return relay;
  }

  #log(line: string): void {
    this.logTail.push(line.length > 400 ? `${line.slice(0, 400)}...` : line);
    if (this.logTail.length > 40) this.logTail.shift();
  }

  async kill(id: string): Promise<void> {
    const relay = this.#relays.find((r) => r.id === id);
    if (!relay) return;
    relay.expected = true;
    relay.child.kill('SIGKILL');
    await relay.exited;
    this.#spawn();
  }

  async pause(id: string, ms: number): Promise<void> {
    const relay = this.#relays.find((r) => r.id === id);
    if (!relay || relay.paused) return;
    relay.paused = true;
    relay.child.kill('SIGSTOP');
    await new Promise((r) => setTimeout(r, ms));
    relay.child.kill('SIGCONT');
    relay.paused = false;
  }

  async stopAll(timeoutMs: number): Promise<string[]> {
    this.#stopping = true;
    const stuck: string[] = [];
    await Promise.all(
      this.#relays.slice().map(async (relay) => {
        relay.expected = true;
        relay.child.kill('SIGCONT');
        relay.child.kill('SIGTERM');
        let timer: NodeJS.Timeout | undefined;
        const late = await Promise.race([relay.exited.then(() => false), new Promise<boolean>((r) => (timer = setTimeout(() => r(true), timeoutMs)))]);
        clearTimeout(timer);
        if (late) {
          stuck.push(relay.id);
          relay.child.kill('SIGKILL');
          await relay.exited;
        }
      }),
    );
    return stuck;
  }
}

interface LocalRelay {
  readonly id: string;
  readonly applicationName: undefined;
  readonly paused: false;
  readonly relay: Relay;
}

/** PGlite lives in one process: relays run here, and a kill is `relay.abort()` (nothing marked after it, leases left to expire). */
export class InProcessRelayFleet implements RelayFleet {
  readonly kind = 'in-process';
  readonly unexpectedExits = 0;
  readonly logTail: string[] = [];
  readonly #relays: LocalRelay[] = [];
  #generation = 0;

  constructor(
    private readonly db: PostgresConnection,
    private readonly schema: string,
    private readonly run: string,
    private readonly transport: () => Transport,
    private readonly tuning: RelayTuning,
  ) {}

  get members(): readonly FleetMember[] {
    return this.#relays;
  }

  async start(count: number): Promise<void> {
    for (let i = 0; i < count; i++) await this.#start();
  }

  async #start(): Promise<void> {
    const id = `torture-${this.run}-r${this.#generation++}`;
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: this.schema, connection: this.db }),
      transport: this.transport(),
      relayId: id,
      leaseTtlMs: this.tuning.leaseTtlMs,
      batchSize: this.tuning.batchSize,
      pollIntervalMs: this.tuning.pollIntervalMs,
      retention: false,
    });
    relay.on('error', (e) => {
      this.logTail.push(`${id}: ${e.phase}: ${e.error.message}`.slice(0, 400));
      if (this.logTail.length > 40) this.logTail.shift();
    });
    await relay.start();
    this.#relays.push({ id, applicationName: undefined, paused: false, relay });
  }

  async kill(id: string): Promise<void> {
    const i = this.#relays.findIndex((r) => r.id === id);
    if (i < 0) return;
    const [local] = this.#relays.splice(i, 1);
    await local!.relay.abort();
    await this.#start();
  }

  async pause(): Promise<void> {
    throw new Error('pausing a relay needs relay processes (PostgreSQL)');
  }

  async stopAll(timeoutMs: number): Promise<string[]> {
    const stuck: string[] = [];
    await Promise.all(
      this.#relays.splice(0).map(async ({ id, relay }) => {
        let timer: NodeJS.Timeout | undefined;
        const late = await Promise.race([relay.stop().then(() => false), new Promise<boolean>((r) => (timer = setTimeout(() => r(true), timeoutMs)))]);
        clearTimeout(timer);
        if (late) {
          stuck.push(id);
          await relay.abort();
        }
      }),
    );
    return stuck;
  }
}

function withoutTxbox(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => !e[0].startsWith('TXBOX_') && e[1] !== undefined));
}
