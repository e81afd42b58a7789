/**
 * A relay whose database connections go silent: a proxy between the relay and
 * PostgreSQL stops forwarding on every open connection, for good and without
 * closing them (a NAT or firewall that dropped their state, a failed-over
 * host), while new connections work. Nothing on those connections ever
 * answers, and TCP would take ~15 minutes to notice. The relay must bound its
 * statements, drop those connections and go on publishing over new ones; and
 * `stop()` must end while the database answers nothing at all.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createOutbox, createRelay, defineEvent, payloadType } from 'txbox';
import { pgConnection, PostgresOutboxStore, PostgresRelayStore } from 'txbox/postgres';
import { RecordingTransport } from 'txbox/testing';
import { openWalStream } from '../../src/stores/postgres/pg-wal-stream.ts';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.ts';
import { waitFor } from '../helpers/wait.ts';

const Order = defineEvent({ type: 'OrderCreated', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });

describe('relay: database connections that go silent', () => {
  let db: TestDb;
  let proxy: TcpProxy;
  before(async () => {
    db = await openDb('postgres');
    proxy = await startTcpProxy(Number(new URL(DATABASE_URL).port || 5432), new URL(DATABASE_URL).hostname);
  });
  after(async () => {
    await proxy.close().catch(() => {});
    await db.close();
  });

  const viaProxy = (): string => {
    const url = new URL(DATABASE_URL);
    url.port = String(proxy.port);
    return url.toString();
  };
  const outbox = () => createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Order] });

  for (const wake of ['notify', 'wal'] as const) {
    it(`publishes again over new connections (wake: ${wake})`, { timeout: 60_000 }, async () => {
      const connection = pgConnection({ connectionString: viaProxy(), maxConnections: 3 });
      const transport = new RecordingTransport();
      const relay = createRelay({
        store: new PostgresRelayStore({ schema: db.schema, connection, wake, statementTimeoutMs: 2000 }),
        transport,
        pollIntervalMs: 200,
        leaseTtlMs: 3000,
      });
      const box = outbox();
      const before = transport.acked.length;
      await relay.start();
      try {
        for (let n = 0; n < 5; n++) await db.transaction((tx) => box.enqueue(tx, Order({ aggregateId: `a${n}`, payload: { n } })));
        await waitFor('the first events published', () => Promise.resolve(transport.acked.length >= before + 5), 15_000, 20);
        proxy.silence();
        const silencedAt = performance.now();
        for (let n = 5; n < 10; n++) await db.transaction((tx) => box.enqueue(tx, Order({ aggregateId: `a${n}`, payload: { n } })));
        await waitFor('the events enqueued after the silence published', () => Promise.resolve(transport.acked.length >= before + 10), 30_000, 50);
        const took = performance.now() - silencedAt;
        // Bounded by a statement timeout and a lease TTL or so, not by TCP's ~15 minutes.
        assert.ok(took < 20_000, `took ${Math.round(took)} ms`);
        await waitFor('ready again', async () => (await relay.health()).ready, 15_000, 50);
      } finally {
        await relay.stop();
        await connection.close();
      }
    });
  }

  it('a WAL stream asks a quiet server for a keepalive, and ends when a silent one does not answer', { timeout: 30_000 }, async () => {
    let ended: Error | undefined;
    // A publication of this test's own table: the stream decodes every change of the database, and other
    // tests running meanwhile write theirs (a publication that does not exist fails at the first one).
    const publication = `txbox_silent_${process.pid}`;
    await db.query(`CREATE PUBLICATION ${publication} FOR TABLE "${db.schema}".outbox`);
    const stream = await openWalStream({
      client: { connectionString: viaProxy() },
      slot: `txbox_silent_${process.pid}`,
      publication,
      onCommit: () => {},
      onEnd: (err) => (ended = err),
      silenceMs: 300,
    });
    try {
      // Nothing committed: the server sends nothing by itself for wal_sender_timeout / 2, but answers each request.
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(ended, undefined, 'a quiet but healthy stream was ended');
      proxy.silence();
      const silencedAt = performance.now();
      await waitFor('the silent stream ended', () => Promise.resolve(ended !== undefined), 5000, 10);
      assert.ok(performance.now() - silencedAt < 1500, `ended after ${Math.round(performance.now() - silencedAt)} ms`);
      assert.match(ended!.message, /sent nothing/);
    } finally {
      const closing = performance.now();
      await stream.close();
      await db.query(`DROP PUBLICATION IF EXISTS ${publication}`);
      assert.ok(performance.now() - closing < 3000, 'close() waited on the silent server');
    }
  });

  it('stop() ends while the database answers nothing at all', { timeout: 60_000 }, async () => {
    const connection = pgConnection({ connectionString: viaProxy(), maxConnections: 3 });
    const transport = new RecordingTransport();
    const relay = createRelay({
      store: new PostgresRelayStore({ schema: db.schema, connection, statementTimeoutMs: 2000 }),
      transport,
      pollIntervalMs: 50,
      leaseTtlMs: 2000,
      stopTimeoutMs: 1000,
    });
    await relay.start();
    proxy.hold(); // new connections are accepted and never answered
    proxy.silence();
    try {
      // Every lane is in a claim or about to send one on a silent connection.
      await new Promise((r) => setTimeout(r, 500));
      const started = performance.now();
      await relay.stop();
      const took = performance.now() - started;
      assert.ok(took < 8000, `stop() took ${Math.round(took)} ms`);
    } finally {
      proxy.release();
      await connection.close();
    }
  });
});
