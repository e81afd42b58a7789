/**
 * `PostgresRelayStore.warm(n)` readies n connections (each opened, and the
 * claim and mark functions called once on it), and `Relay.start()` calls it
 * with the relay's lane count. Counted by the server itself: the pools here
 * run with `track_functions = all`, and a backend's function calls reach
 * `pg_stat_user_functions` when it exits.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { createRelay } from 'txbox';
import { pgConnection, postgresNames, PostgresRelayStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { RecordingTransport } from 'txbox/testing';
import { waitFor } from '../helpers/wait.ts';

describe('warm connections', () => {
  let db: TestDb;
  before(async () => {
    db = await openDb('postgres');
  });
  after(async () => {
    await db.close();
  });

  /** A pool whose backends count their PL/pgSQL calls; `application_name` tells them apart. */
  const countingPool = (app: string, max: number): pg.Pool =>
    new pg.Pool({ connectionString: DATABASE_URL, max, application_name: app, options: '-c track_functions=all' });

  /** Calls so far of this schema's outbox functions (only this file's pools call them). */
  async function calls(): Promise<Record<'claim' | 'complete' | 'claimSeqs', number>> {
    const n = postgresNames({ schema: db.schema });
    const names = { claim: n.claimFn, complete: n.completeFn, claimSeqs: n.claimSeqsFn };
    await db.query('SELECT pg_stat_clear_snapshot()');
    const out = { claim: 0, complete: 0, claimSeqs: 0 };
    for (const [what, qualified] of Object.entries(names)) {
      const fn = qualified.split('.').pop()!.replaceAll('"', '');
      const [row] = await db.query<{ calls: number }>(
        'SELECT coalesce(sum(calls), 0)::int AS calls FROM pg_stat_user_functions WHERE schemaname = $1 AND funcname = $2',
        [db.schema, fn],
      );
      out[what as keyof typeof out] = row!.calls;
    }
    return out;
  }

  /** The calls made since `before` by the backends of `app`, once they have exited (their counts are flushed then). */
  async function callsAfterExit(app: string, before: Record<'claim' | 'complete' | 'claimSeqs', number>): Promise<Record<'claim' | 'complete' | 'claimSeqs', number>> {
    await waitFor(`the backends of ${app} exited`, async () => {
      const [row] = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [app]);
      return row!.n === 0;
    });
    let now = before;
    await waitFor('the function counts', async () => {
      now = await calls();
      return now.claim > before.claim;
    });
    return { claim: now.claim - before.claim, complete: now.complete - before.complete, claimSeqs: now.claimSeqs - before.claimSeqs };
  }

  it('warm(3) opens three connections and calls the claim and mark functions once on each, changing nothing', async () => {
    const before = await calls();
    const app = `txbox-warm-${process.pid}-a`;
    const pool = countingPool(app, 4);
    const store = new PostgresRelayStore({ schema: db.schema, connection: pgConnection({ pool }) });
    try {
      await store.warm(3);
      assert.equal(pool.totalCount, 3, 'three connections opened');
      assert.equal(pool.idleCount, 3, 'and given back');
    } finally {
      await pool.end();
    }
    const made = await callsAfterExit(app, before);
    assert.equal(made.claim, 3);
    assert.equal(made.complete, 3);
    assert.equal(made.claimSeqs, 0, 'the claim by seq only in the WAL mode');
  });

  it('in the WAL mode warm(2) calls the claim by seq once on each connection too', async () => {
    const before = await calls();
    const app = `txbox-warm-${process.pid}-w`;
    const pool = countingPool(app, 4);
    const store = new PostgresRelayStore({ schema: db.schema, connection: pgConnection({ pool }), wake: 'wal' });
    try {
      await store.warm(2);
    } finally {
      await store.close();
      await pool.end();
    }
    assert.deepEqual(await callsAfterExit(app, before), { claim: 2, complete: 2, claimSeqs: 2 });
  });

  it('warm() on a database that is not there resolves (best effort)', async () => {
    const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/test', max: 2, connectionTimeoutMillis: 500 });
    const store = new PostgresRelayStore({ schema: db.schema, connection: pgConnection({ pool }) });
    try {
      await store.warm(2);
    } finally {
      await pool.end();
    }
  });

  it("a relay's start warms a connection per lane", async () => {
    const before = await calls();
    const app = `txbox-warm-${process.pid}-b`;
    const pool = countingPool(app, 6);
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection: pgConnection({ pool }) }),
      transport: new RecordingTransport(),
      lanes: 3,
      pollIntervalMs: 60_000,
    });
    await relay.start();
    try {
      assert.ok(pool.totalCount >= 3, `a connection per lane (${pool.totalCount} open)`);
    } finally {
      await relay.stop();
      await pool.end();
    }
    // Nothing to publish: every call of the mark function was the warm-up's.
    const made = await callsAfterExit(app, before);
    assert.equal(made.complete, 3);
  });
});
