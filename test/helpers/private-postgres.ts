/**
 * A private throwaway PostgreSQL 15 cluster (initdb in a temporary folder, on a
 * free port, bound to 127.0.0.1): for tests that restart the server or change
 * server-wide settings, which the shared server on 5432 must never see.
 * `available` is false where initdb is missing (the tests skip).
 */
import { after, before } from 'node:test';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { migratePostgres, pgConnection, postgresNames, type PostgresConnection } from 'txbox/postgres';
import { freePort } from './ports.ts';

const BIN = '/usr/lib/postgresql/15/bin';

export const privatePostgresAvailable = existsSync(join(BIN, 'initdb'));

/** Runs a PostgreSQL tool as the `postgres` OS user when we are root (initdb refuses root). */
function pgTool(tool: string, args: string[]): void {
  const asRoot = userInfo().uid === 0;
  execFileSync(asRoot ? 'runuser' : join(BIN, tool), asRoot ? ['-u', 'postgres', '--', join(BIN, tool), ...args] : args, { stdio: 'pipe' });
}

/** The same, without blocking the event loop (a relay in this process must answer the walsender during a shutdown). */
async function pgToolAsync(tool: string, args: string[]): Promise<void> {
  const asRoot = userInfo().uid === 0;
  await promisify(execFile)(asRoot ? 'runuser' : join(BIN, tool), asRoot ? ['-u', 'postgres', '--', join(BIN, tool), ...args] : args);
}

export class PrivatePostgres {
  private constructor(
    readonly dir: string,
    readonly port: number,
    /** Server settings beyond the defaults below, as `-c name=value` pairs. */
    private readonly settings: Readonly<Record<string, string>>,
  ) {}

  /** initdb and start a cluster with wal_level=logical and `settings`. */
  static async create(settings: Readonly<Record<string, string>> = {}): Promise<PrivatePostgres> {
    const dir = mkdtempSync(join(tmpdir(), 'txbox-pg-'));
    if (userInfo().uid === 0) {
      const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
      const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
      chownSync(dir, uid, gid);
    }
    const pg = new PrivatePostgres(dir, await freePort(), settings);
    pgTool('initdb', ['-D', join(dir, 'data'), '-U', 'postgres', '--auth=trust', '--no-sync']);
    pg.start();
    return pg;
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  #startArgs(): string[] {
    const base = { listen_addresses: '127.0.0.1', wal_level: 'logical', max_replication_slots: '4', max_wal_senders: '4', fsync: 'off', ...this.settings };
    const opts = [`-p ${this.port}`, `-k ${this.dir}`, ...Object.entries(base).map(([k, v]) => `-c ${k}=${v}`)].join(' ');
    return ['-D', join(this.dir, 'data'), '-o', opts, '-l', join(this.dir, 'log'), '-w', 'start'];
  }

  start(): void {
    pgTool('pg_ctl', this.#startArgs());
  }

  /** Stops (fast), stays down `downMs`, and starts again, without blocking this process. */
  async restart(downMs = 0): Promise<void> {
    await pgToolAsync('pg_ctl', ['-D', join(this.dir, 'data'), '-m', 'fast', '-w', 'stop']);
    if (downMs > 0) await new Promise((r) => setTimeout(r, downMs));
    await pgToolAsync('pg_ctl', this.#startArgs());
  }

  /** Stops the server and removes its folder. */
  destroy(): void {
    try {
      pgTool('pg_ctl', ['-D', join(this.dir, 'data'), '-m', 'fast', '-w', 'stop']);
    } catch {
      // already stopped
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * A private cluster for one test file: created before its tests (with
 * `settings`) where initdb exists, destroyed after them, with every
 * connection `connect` opened closed first. Its tests skip with `skip`.
 */
export function privatePostgresForFile(settings: Readonly<Record<string, string>> = {}): {
  readonly skip: false | string;
  server(): PrivatePostgres;
  /** A connection to the cluster's `postgres` database, the txbox outbox migrated in schema `txbox`. */
  connect(maxConnections: number): Promise<PostgresConnection>;
} {
  let server: PrivatePostgres | undefined;
  const connections: PostgresConnection[] = [];
  before(async () => {
    if (privatePostgresAvailable) server = await PrivatePostgres.create(settings);
  });
  after(async () => {
    for (const c of connections) await c.close().catch(() => {});
    server?.destroy();
  });
  return {
    skip: !privatePostgresAvailable && 'initdb not found',
    server: () => server!,
    async connect(maxConnections) {
      const connection = pgConnection({ connectionString: server!.url, maxConnections });
      connections.push(connection);
      await migratePostgres(connection, postgresNames({ schema: 'txbox' }));
      return connection;
    },
  };
}
