/**
 * The WAL wake mode (`wake: 'wal'`) on the real PostgreSQL: woken by the
 * replication stream alone (polling off, producers without NOTIFY), the
 * commit-order gap (invariant 3), a slot dropped under a running relay, a role
 * without REPLICATION and PGlite falling back to NOTIFY, and the slot's lag
 * confirmed promptly. Every publication and slot is this file's own.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { Registry } from 'prom-client';
import { prometheusMetrics } from 'txbox/prometheus';
import { createOutbox, createRelay, defineEvent, payloadType, type Logger } from 'txbox';
import {
  dropPublication,
  dropWalSlots,
  pgConnection,
  postgresNames,
  PostgresOutboxStore,
  PostgresRelayStore,
  walProblems,
  walSlots,
  type PostgresConnection,
} from 'txbox/postgres';
import { checkDeliveries, RecordingTransport } from 'txbox/testing';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { waitFor } from '../helpers/wait.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });
let db: TestDb;
let pool: pg.Pool;

function recordingLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  const noop = (): void => {};
  return { warnings, debug: noop, info: noop, error: noop, warn: (obj, msg) => warnings.push(`${msg ?? ''} ${JSON.stringify(obj)}`) };
}

/** A relay that only the WAL stream can wake: polling every 10 minutes. */
function walRelay(connection: PostgresConnection, transport: RecordingTransport, logger: Logger = recordingLogger(), pollIntervalMs = 600_000) {
  const store = new PostgresRelayStore({ schema: db.schema, connection, wake: 'wal', logger });
  const relay = createRelay({ store, transport, pollIntervalMs, minPollIntervalMs: pollIntervalMs, leaseTtlMs: 5000 });
  return { store, relay };
}

before(async () => {
  db = await openDb('postgres');
  pool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
});
after(async () => {
  await dropPublication(db.connection, postgresNames({ schema: db.schema })).catch(() => {});
  await pool.end();
  await db.close();
});

const outbox = () => createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: false }), events: [E] });

it('wakes from the WAL alone, and publishes a lower seq that commits after higher seqs were published', async () => {
  await db.query(`TRUNCATE "${db.schema}".outbox`);
  const transport = new RecordingTransport();
  const { store, relay } = walRelay(db.connection, transport);
  await relay.start();
  try {
    // The first idle wait opens the stream; a slot is created only once no transaction is open.
    await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal');
    const lag = await store.wakeSlotLagBytes(); // the txbox_relay_wal_slot_lag_bytes gauge
    assert.equal(typeof lag, 'number', 'a streaming slot reports its lag');
    assert.ok(lag! >= 0);
    const slow = await pool.connect();
    await slow.query('BEGIN');
    const [late] = await outbox().enqueue(slow, E({ aggregateId: 'slow', payload: { n: 1 } })); // the lower seq, still open
    const fast = await pool.connect();
    await fast.query('BEGIN');
    const [early] = await outbox().enqueue(fast, E({ aggregateId: 'fast', payload: { n: 2 } }));
    await fast.query('COMMIT');
    fast.release();
    await waitFor('the higher seq published, woken by its commit', () => transport.acked.some((e) => e.id === early));
    await new Promise((r) => setTimeout(r, 200));
    await slow.query('COMMIT');
    slow.release();
    await waitFor('the lower seq published after its late commit', () => transport.acked.some((e) => e.id === late));
    const [row] = await db.query<{ s1: string; s2: string }>(
      `SELECT (SELECT seq FROM "${db.schema}".outbox WHERE id = $1)::text AS s1, (SELECT seq FROM "${db.schema}".outbox WHERE id = $2)::text AS s2`,
      [late, early],
    );
    assert.ok(Number(row!.s1) < Number(row!.s2), 'the late transaction really held the lower seq');
  } finally {
    await relay.stop();
  }
  await waitFor('the temporary slot went with the relay', async () => (await walSlots(db.connection, postgresNames({ schema: db.schema }))).length === 0);
});

it('a slot dropped under a running relay: warns once, keeps publishing by polling, then streams from a new slot', async () => {
  await db.query(`TRUNCATE "${db.schema}".outbox`);
  const transport = new RecordingTransport();
  const logger = recordingLogger();
  const { store, relay } = walRelay(db.connection, transport, logger, 300);
  await relay.start();
  try {
    await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal');
    const first = (await store.wakeStatus()).slot!;
    // What `txbox wal drop-slots --active` does: ends the walsender, which drops the temporary slot.
    const dropped = await dropWalSlots(db.connection, postgresNames({ schema: db.schema }), { active: true });
    assert.deepEqual(dropped, [first]);
    await waitFor('fell back', async () => (await store.wakeStatus()).mode !== 'wal');
    const ids = await db.transaction((tx) => outbox().enqueue(tx, [E({ aggregateId: 'x', payload: { n: 1 } }), E({ aggregateId: 'y', payload: { n: 2 } })]));
    await waitFor('published while the stream is down', () => ids.every((id) => transport.acked.some((e) => e.id === id)));
    await waitFor('streaming from a new slot', async () => {
      const s = await store.wakeStatus();
      return s.mode === 'wal' && s.slot !== first;
    });
    const [id] = await db.transaction((tx) => outbox().enqueue(tx, E({ aggregateId: 'z', payload: { n: 3 } })));
    await waitFor('published after the new slot', () => transport.acked.some((e) => e.id === id));
    assert.equal(logger.warnings.filter((w) => /WAL wake-up unavailable/.test(w)).length, 1, logger.warnings.join('\n'));
  } finally {
    await relay.stop();
  }
});

it('a role without REPLICATION: walProblems says what to grant; the relay warns and is woken by NOTIFY', async () => {
  await db.query(`TRUNCATE "${db.schema}".outbox`);
  const role = `txbox_norepl_${randomBytes(4).toString('hex')}`;
  await pool.query(`CREATE ROLE ${role} LOGIN NOREPLICATION`);
  await pool.query(`GRANT USAGE ON SCHEMA "${db.schema}" TO ${role}; GRANT ALL ON ALL TABLES IN SCHEMA "${db.schema}" TO ${role}; GRANT ALL ON ALL SEQUENCES IN SCHEMA "${db.schema}" TO ${role}`);
  const url = new URL(DATABASE_URL);
  url.username = role;
  const connection = pgConnection({ connectionString: url.toString(), maxConnections: 3 });
  try {
    const problems = await walProblems(connection);
    assert.equal(problems.length, 1, problems.join('\n'));
    assert.match(problems[0]!, new RegExp(`role ${role} has no REPLICATION attribute: run ALTER ROLE "${role}" REPLICATION`));
    const transport = new RecordingTransport();
    const logger = recordingLogger();
    const { relay } = walRelay(connection, transport, logger);
    await relay.start();
    try {
      await waitFor('the fallback warning', () => logger.warnings.some((w) => /WAL wake-up unavailable.*REPLICATION/.test(w)));
      const notifying = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: true, notifyIntervalMs: 0 }), events: [E] });
      const [id] = await db.transaction((tx) => notifying.enqueue(tx, E({ aggregateId: 'n', payload: { n: 1 } })));
      await waitFor('published, woken by NOTIFY (polling is off)', () => transport.acked.some((e) => e.id === id));
    } finally {
      await relay.stop();
    }
  } finally {
    await connection.close();
    await pool.query(`REVOKE ALL ON ALL TABLES IN SCHEMA "${db.schema}" FROM ${role}; REVOKE ALL ON ALL SEQUENCES IN SCHEMA "${db.schema}" FROM ${role}; REVOKE USAGE ON SCHEMA "${db.schema}" FROM ${role}`);
    await pool.query(`DROP ROLE ${role}`);
  }
});

it('a role that streams through a managed service role (no REPLICATION attribute of its own): walProblems finds nothing missing', async () => {
  // RDS and Aurora grant replication through membership of rds_replication (or rds_superuser), never the
  // attribute, which their master user cannot give; Neon through neon_superuser. Here roles of those names
  // stand in for the services' own; this server would still refuse the stream (vanilla PostgreSQL knows no
  // such roles), so only the check is tested.
  for (const service of ['rds_replication', 'neon_superuser']) {
    const role = `txbox_svcrepl_${randomBytes(4).toString('hex')}`;
    const created = (await pool.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [service])).rowCount === 0;
    if (created) await pool.query(`CREATE ROLE ${service} NOLOGIN`);
    await pool.query(`CREATE ROLE ${role} LOGIN NOREPLICATION IN ROLE ${service}`);
    const url = new URL(DATABASE_URL);
    url.username = role;
    const connection = pgConnection({ connectionString: url.toString(), maxConnections: 1 });
    try {
      assert.deepEqual(await walProblems(connection), [], service);
      await pool.query(`REVOKE ${service} FROM ${role}`);
      const problems = await walProblems(connection);
      assert.equal(problems.length, 1, problems.join('\n'));
      assert.match(problems[0]!, /no REPLICATION attribute: run ALTER ROLE .* REPLICATION .*GRANT rds_replication/);
    } finally {
      await connection.close();
      await pool.query(`DROP ROLE ${role}`);
      if (created) await pool.query(`DROP ROLE ${service}`);
    }
  }
});

it('PGlite cannot stream: walProblems says so, and a relay asked for wal keeps NOTIFY and polling', async () => {
  const lite = await openDb('pglite');
  try {
    const problems = await walProblems(lite.connection);
    assert.match(problems.join(' '), /cannot open a replication connection/);
    const transport = new RecordingTransport();
    const logger = recordingLogger();
    const relay = createRelay({ store: new PostgresRelayStore({ schema: lite.schema, connection: lite.connection, wake: 'wal', logger }), transport, pollIntervalMs: 50 });
    await relay.start();
    try {
      const o = createOutbox({ store: new PostgresOutboxStore({ schema: lite.schema }), events: [E] });
      const [id] = await lite.transaction((tx) => o.enqueue(tx, E({ aggregateId: 'p', payload: { n: 1 } })));
      await waitFor('published', () => transport.acked.some((e) => e.id === id));
      assert.ok(logger.warnings.some((w) => /WAL wake-up unavailable/.test(w)));
    } finally {
      await relay.stop();
    }
  } finally {
    await lite.close();
  }
});

it('falling back (PGlite): a retry that came due does not make an idle lane claim in a loop', async () => {
  const lite = await openDb('pglite');
  const store = new PostgresRelayStore({ schema: lite.schema, connection: lite.connection, wake: 'wal', logger: recordingLogger() });
  try {
    const signal = new AbortController().signal;
    const leases = [{ bucket: 0, token: '1' }];
    await store.waitForEvents(20, signal, undefined, [0]); // starts the stream, which PGlite cannot give: fallback
    await waitFor('the fallback', async () => (await store.wakeStatus()).mode === 'fallback');
    // A retry this relay recorded (the WAL mode's claims by seq wake for it while streaming), due in 5 ms.
    await store.complete('r', [{ seq: 1, token: '1', outcome: 'retry', delayMs: 5, error: 'test' }]);
    await new Promise((r) => setTimeout(r, 10));
    const before = store.claimStats().ordinary;
    const started = performance.now();
    while (performance.now() - started < 600) {
      await store.claim(leases, { limit: 10, skipParkedDestinations: [] });
      await store.waitForEvents(200, signal, store.wakeups([0]), [0]);
    }
    const claims = store.claimStats().ordinary - before;
    assert.ok(claims <= 5, `an idle lane polling every 200 ms for 600 ms claims about 3 times, not ${claims}`);
  } finally {
    await store.close();
    await lite.close();
  }
});

it('confirms promptly: WAL written to other tables while the outbox is idle is released from the slot', async () => {
  const transport = new RecordingTransport();
  const { store, relay } = walRelay(db.connection, transport);
  await relay.start();
  try {
    await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal');
    await db.query(`CREATE TABLE "${db.schema}".other (n int, pad text)`);
    // About 8 MB of WAL on a table outside the publication.
    await db.query(`INSERT INTO "${db.schema}".other SELECT g, repeat('x', 200) FROM generate_series(1, 30000) g`);
    const [{ lsn }] = (await db.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')) as [{ lsn: string }];
    // The slot confirms past the insert (the walsender's keepalives are answered), so it retains none of it.
    await waitFor('the slot confirmed past the unrelated WAL', async () => {
      const slot = (await store.wakeStatus()).slot!;
      const { rows } = await db.connection.query<{ behind: boolean }>(
        'SELECT confirmed_flush_lsn < $2::pg_lsn AS behind FROM pg_replication_slots WHERE slot_name = $1',
        [slot, lsn],
      );
      return rows[0]?.behind === false;
    }, 20_000);
    const status = await store.wakeStatus();
    assert.equal(status.mode, 'wal');
    assert.equal(typeof status.slotLagBytes, 'number');
  } finally {
    await relay.stop();
  }
});

it('while the slot waits for an open transaction: warns and wakes by NOTIFY meanwhile; stop() does not wait for the slot', async () => {
  await db.query(`TRUNCATE "${db.schema}".outbox`);
  const blocker = await pool.connect();
  const transport = new RecordingTransport();
  const logger = recordingLogger();
  const { relay } = walRelay(db.connection, transport, logger);
  try {
    // A transaction with an xid, open before the slot is asked for: creating the slot waits for it.
    await blocker.query('BEGIN');
    await blocker.query('SELECT txid_current()');
    await relay.start();
    await waitFor('the slow-start warning', () => logger.warnings.some((w) => /creating the replication slot waits for transactions/.test(w)), 20_000);
    const notifying = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema, notify: true, notifyIntervalMs: 0 }), events: [E] });
    const [id] = await db.transaction((tx) => notifying.enqueue(tx, E({ aggregateId: 'w', payload: { n: 1 } })));
    await waitFor('published by NOTIFY while the slot waits', () => transport.acked.some((e) => e.id === id));
    await relay.stop(); // resolves although the slot creation still waits for `blocker`
  } finally {
    await blocker.query('ROLLBACK').catch(() => {});
    blocker.release();
  }
  await waitFor('no slot left', async () => (await walSlots(db.connection, postgresNames({ schema: db.schema }))).length === 0);
});

it('two relays, a slot each, woken by the WAL alone: every event once, per-key order kept', async () => {
  await db.query(`TRUNCATE "${db.schema}".outbox`);
  await db.query(`UPDATE "${db.schema}".outbox_buckets SET owner = NULL, lease_until = NULL`);
  const transport = new RecordingTransport();
  const a = walRelay(db.connection, transport);
  const b = walRelay(db.connection, transport);
  // For the failure message: when each relay's leases changed and when each round committed.
  const t0 = performance.now();
  const timeline: string[] = [];
  const at = (): number => Math.round(performance.now() - t0);
  for (const [name, r] of [['a', a], ['b', b]] as const) {
    r.relay.on('leases', (c) => timeline.push(`${at()} ${name} leases held ${c.held} +${c.acquired} -${c.lost} released ${c.released}`));
  }
  await a.relay.start();
  await b.relay.start();
  try {
    await waitFor('both stream', async () => (await a.store.wakeStatus()).mode === 'wal' && (await b.store.wakeStatus()).mode === 'wal', 30_000);
    await waitFor('buckets shared', () => a.relay.heldBuckets > 0 && b.relay.heldBuckets > 0, 30_000);
    const committed = new Map<string, string[]>();
    for (let round = 0; round < 5; round++) {
      const events = Array.from({ length: 20 }, (_, k) => E({ aggregateId: `k${k}`, payload: { n: round } }));
      const ids = await db.transaction((tx) => outbox().enqueue(tx, events));
      timeline.push(`${at()} round ${round + 1} committed`);
      ids.forEach((id, k) => committed.set(`A:k${k}`, [...(committed.get(`A:k${k}`) ?? []), id]));
    }
    await waitFor('all delivered', () => new Set(transport.acked.map((e) => e.id)).size >= 100).catch(async (err: unknown) => {
      // What is left, where, and how each relay claimed: a timeout here once in the suite.
      const acked = new Set(transport.acked.map((e) => e.id));
      const left = await db.query<{ id: string; seq: string; bucket: number; state: string; owner: string | null; lease_left_ms: number | null }>(
        `SELECT o.id, o.seq, o.bucket, o.state, b.owner, (extract(epoch FROM b.lease_until - now()) * 1000)::int AS lease_left_ms
         FROM "${db.schema}".outbox o JOIN "${db.schema}".outbox_buckets b USING (bucket) ORDER BY o.seq`,
      );
      const missing = left.filter((r) => !acked.has(r.id));
      throw new Error(
        `${(err as Error).message}; not delivered: ${JSON.stringify(missing.slice(0, 10))} (${missing.length}); ` +
          `a: ${a.relay.relayId} ${a.relay.heldBuckets} buckets ${JSON.stringify(a.store.claimStats())}; b: ${b.relay.relayId} ${b.relay.heldBuckets} buckets ${JSON.stringify(b.store.claimStats())}; timeline: ${timeline.join('; ')}`,
      );
    });
    const report = checkDeliveries(committed, transport.acked);
    assert.equal(report.lost, 0);
    assert.equal(report.orderViolations, 0);
    assert.equal(report.phantom, 0);
  } finally {
    await a.relay.stop();
    await b.relay.stop();
  }
});

it('slow marks: the lane claims and publishes on while its batches are marked, and marks those published meanwhile together', async () => {
  await db.query(`TRUNCATE "${db.schema}".outbox`);
  const transport = new RecordingTransport();
  const { store, relay } = walRelay(db.connection, transport);
  // Each mark takes 300 ms (a slow or busy database): commits 20 ms apart must not wait for the marks before theirs.
  const marks: number[] = [];
  const complete = store.complete.bind(store);
  store.complete = async (relayId, completions) => {
    marks.push(completions.length);
    await new Promise((r) => setTimeout(r, 300));
    return complete(relayId, completions);
  };
  await relay.start();
  try {
    await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal');
    const committed = new Map<string, string[]>();
    const committedAt = new Map<string, number>();
    const publishedAt = new Map<string, number>();
    const record = transport.publish.bind(transport);
    transport.publish = async (events, signal) => {
      for (const e of events) if (!publishedAt.has(e.id)) publishedAt.set(e.id, performance.now());
      return record(events, signal);
    };
    for (let n = 0; n < 60; n++) {
      const key = `k${n}`;
      const [id] = await db.transaction((tx) => outbox().enqueue(tx, E({ aggregateId: key, payload: { n } })));
      committedAt.set(id!, performance.now());
      committed.set(`A:${key}`, [...(committed.get(`A:${key}`) ?? []), id!]);
      await new Promise((r) => setTimeout(r, 20));
    }
    const ids = [...committedAt.keys()];
    await waitFor('every event published and marked', async () => {
      const rows = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE state = 'published'`);
      return rows[0]!.n === ids.length;
    }, 30_000);
    const report = checkDeliveries(committed, transport.acked);
    assert.deepEqual([report.lost, report.orderViolations, report.phantom], [0, 0, 0]);
    // Every event its own key: none waits behind another's mark. A lane that waited for each mark before marking the
    // next batch published about one batch per 300 ms (median delay 150-200 ms here); this one publishes on.
    const delays = ids.map((id) => publishedAt.get(id)! - committedAt.get(id)!).sort((a, b) => a - b);
    const median = delays[Math.floor(delays.length / 2)]!;
    const detail = `marks ${JSON.stringify(marks)}, publish calls ${JSON.stringify(transport.calls)}, commit to publish ${delays.map(Math.round).join(' ')} ms`;
    assert.ok(median < 100, `half of the events published within 100 ms of their commit: ${detail}`);
    assert.ok(marks.length < transport.calls.length / 2, `batches published meanwhile were marked together: ${detail}`);
  } finally {
    await relay.stop();
  }
});

it('exports the slot lag as gauges while it streams: bytes, and the seconds since the relay last confirmed', async () => {
  const registry = new Registry();
  const store = new PostgresRelayStore({ schema: db.schema, connection: db.connection, wake: 'wal', logger: recordingLogger() });
  const relay = createRelay({ store, transport: new RecordingTransport(), pollIntervalMs: 600_000, minPollIntervalMs: 600_000, leaseTtlMs: 5000, metrics: prometheusMetrics({ registry }) });
  await relay.start();
  try {
    await waitFor('streaming', async () => (await store.wakeStatus()).mode === 'wal');
    const value = async (name: string): Promise<number | undefined> => (await registry.getSingleMetric(name)?.get())?.values[0]?.value;
    // The server records the relay's first reply a moment after the stream opens.
    await waitFor('both gauges', async () => (await value('txbox_relay_wal_slot_lag_bytes')) !== undefined && (await value('txbox_relay_wal_slot_confirmed_age_seconds')) !== undefined, 10_000, 100);
    assert.ok((await value('txbox_relay_wal_slot_lag_bytes'))! >= 0);
    const age = (await value('txbox_relay_wal_slot_confirmed_age_seconds'))!;
    assert.ok(age >= 0 && age < 5, `a reading relay confirms every 100 ms: ${age} s since its last reply`);
    assert.match(await registry.metrics(), /# HELP txbox_relay_wal_slot_confirmed_age_seconds WAL wake mode: seconds since this relay last confirmed/);
  } finally {
    await relay.stop();
  }
});
