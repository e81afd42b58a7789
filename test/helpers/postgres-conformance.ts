/**
 * The store conformance suite's namespace on PostgreSQL and on PGlite: a
 * fresh schema (or in-memory PGlite) with the outbox and inbox migrated, an
 * effects table and a read model, through the public `txbox/postgres` API.
 */
import pg from 'pg';
import type { SqlExecutor } from 'txbox';
import { dropPublication, postgresNames, PostgresAdmin, PostgresInboxAdmin, PostgresInboxStore, PostgresOutboxStore, PostgresRelayStore, applyVersioned, inboxNames, migrateInbox } from 'txbox/postgres';
import type { StoreConformanceNamespace } from 'txbox/testing/conformance';
import { DATABASE_URL, openDb } from './databases.ts';

/** `wake: 'wal'`: the relay stores follow the outbox through a replication slot (PostgreSQL only; the publication is dropped at close). */
export async function openPostgresNamespace(kind: 'postgres' | 'pglite', options: { wake?: 'notify' | 'wal' } = {}): Promise<StoreConformanceNamespace<SqlExecutor>> {
  const db = await openDb(kind);
  const { schema, connection } = db;
  await migrateInbox(connection, inboxNames({ schema }));
  await db.query(`CREATE TABLE "${schema}".effects (note text NOT NULL)`);
  await db.query(`CREATE TABLE "${schema}".stock_view (id text PRIMARY KEY, quantity int NOT NULL, version bigint NOT NULL)`);
  const admin = new PostgresAdmin(connection, { schema });
  const inboxAdmin = new PostgresInboxAdmin(connection, { schema });
  const open: pg.Client[] = [];
  return {
    outboxStore: new PostgresOutboxStore({ schema, notify: options.wake !== 'wal' }),
    relayStore: () => new PostgresRelayStore({ schema, connection, wake: options.wake ?? 'notify' }),
    inboxStore: new PostgresInboxStore({ connection, schema }),
    transaction: (fn) => db.transaction(fn),
    ...(kind === 'postgres'
      ? {
          async openTransaction() {
            const client = new pg.Client({ connectionString: DATABASE_URL });
            open.push(client);
            await client.connect();
            await client.query('BEGIN');
            return {
              tx: client,
              async commit() {
                await client.query('COMMIT');
                await client.end();
                open.splice(open.indexOf(client), 1);
              },
            };
          },
        }
      : {}),
    async rows() {
      const rows = await db.query<{ id: string; key: string; state: 'pending'; attempts: number; last_error: string | null }>(
        `SELECT id, key, state, attempts, last_error FROM "${schema}".outbox ORDER BY seq`,
      );
      return rows.map((r) => ({ id: r.id, key: r.key, state: r.state, attempts: r.attempts, lastError: r.last_error }));
    },
    retryParked: (ids) => admin.retryParked({ ids }, 'conformance'),
    skipParked: (ids) => admin.skipParked({ ids }, 'conformance'),
    replay: async (destination) => (await admin.replay({ destination }, 'conformance')).copied,
    async recordEffect(tx, note) {
      await tx.query(`INSERT INTO "${schema}".effects (note) VALUES ($1)`, [note]);
    },
    async countEffects(note) {
      return (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${schema}".effects WHERE note = $1`, [note]))[0]!.n;
    },
    async applyVersioned(tx, row) {
      const r = await applyVersioned(tx, { table: `${schema}.stock_view`, id: { id: row.id }, version: row.version, values: { quantity: row.quantity }, onGap: row.onGap });
      return r.status === 'gap' ? { status: 'gap', missing: r.missing } : { status: r.status };
    },
    async readProjection(id) {
      const [r] = await db.query<{ quantity: number; version: string }>(`SELECT quantity, version FROM "${schema}".stock_view WHERE id = $1`, [id]);
      return r ? { quantity: r.quantity, version: Number(r.version) } : null;
    },
    listDead: async (consumer) => (await inboxAdmin.listDead({ consumer })).map((d) => d.id),
    retryDead: (consumer) => inboxAdmin.retryDead({ all: true, consumer }, 'conformance'),
    async close() {
      await Promise.all(open.map((c) => c.end().catch(() => {})));
      if (options.wake === 'wal') await dropPublication(connection, postgresNames({ schema })).catch(() => {});
      await db.close();
    },
  };
}
