/**
 * The webhook receiver and consumer against hostile senders and a database
 * outage, on the real PostgreSQL (each case failed before 28 Nov 2026):
 * - `close()` returned only when stalled senders (half a header, a body that
 *   never completes) gave up, which Node never made them do;
 * - a request without signature headers had its body buffered (up to
 *   `maxBodyBytes` per connection) before the 401;
 * - `listen({ host: '' })` listened on every interface;
 * - a payload with a lone surrogate passed the boundary, its failure could
 *   not be recorded (jsonb refuses it), and the event ended answered 204
 *   with no inbox row: acked and gone;
 * - the inbox's database down was answered 500, which the sender counts as
 *   an attempt, so an outage parked events at the sender;
 * - a sender's retry of an event whose handler was still running took a
 *   group-commit slot to wait on its row, and every other key waited.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { ConfigError, createInbox, uuidv7, type OutboxEvent } from 'txbox';
import { PostgresInboxStore, inboxNames, migrateInbox, pgConnection } from 'txbox/postgres';
import { HttpTransport, createWebhookConsumer, createWebhookReceiver, generateWebhookSecret, signWebhook } from 'txbox/http';
import { openDb, type TestDb } from '../helpers/databases.ts';
import { isStoreUnreachable } from '../../src/core/store-errors.ts';

const secret = generateWebhookSecret();
const never = new AbortController().signal;

function event(key: string, payload: unknown = { key }): OutboxEvent {
  return { id: uuidv7(), type: 'Noted', aggregateType: 'Note', aggregateId: key, key: `Note:${key}`, destination: 'notes', payload, headers: {}, occurredAt: new Date(), version: null };
}

/** One raw HTTP request whose status line is returned (or null when the connection closed without one). */
function rawRequest(port: number, text: string): Promise<string | null> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1', () => s.write(text));
    let got = '';
    s.on('data', (d) => {
      got += d.toString('latin1');
      if (got.includes('\r\n')) {
        resolve(got.split('\r\n')[0]!);
        s.destroy();
      }
    });
    s.on('close', () => resolve(null));
    s.on('error', () => resolve(null));
  });
}

describe('webhook receiver and consumer hardening', () => {
  let db: TestDb;
  before(async () => {
    db = await openDb('postgres');
    await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  });
  after(async () => {
    await db.close();
  });

  it('close() resolves at once with stalled senders connected (half a header, a body that never completes)', async () => {
    const listening = await createWebhookReceiver({ secret, onEvent: () => {} }).listen();
    const sockets = ['POST / HTTP/1.1\r\nHost: x\r\n', 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{'].map((text) => {
      const s = connect(listening.port, '127.0.0.1', () => s.write(text));
      s.on('error', () => {});
      return s;
    });
    await new Promise((r) => setTimeout(r, 200));
    const started = Date.now();
    await listening.close();
    assert.ok(Date.now() - started < 2000, `close() took ${Date.now() - started} ms`);
    for (const s of sockets) s.destroy();
  });

  it('a request without signature headers is answered 401 before its body is read', async () => {
    let called = false;
    const listening = await createWebhookReceiver({ secret, onEvent: () => void (called = true) }).listen();
    try {
      // A body of 100 bytes declared, 1 sent: the answer must not wait for the other 99.
      const status = await Promise.race([
        rawRequest(listening.port, 'POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{'),
        new Promise<string>((r) => setTimeout(() => r('no answer within 2 s'), 2000)),
      ]);
      assert.equal(status, 'HTTP/1.1 401 Unauthorized');
      assert.equal(called, false);
    } finally {
      await listening.close();
    }
  });

  it('listen({ host: "" }) is refused instead of listening on every interface', async () => {
    const receiver = createWebhookReceiver({ secret, onEvent: () => {} });
    await assert.rejects(receiver.listen({ host: '' }), (err: unknown) => err instanceof ConfigError && err.field === 'host');
  });

  it('a payload with a lone surrogate is refused at the boundary (400) without running the handler', async () => {
    const seen: string[] = [];
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'surrogate', autoStart: false });
    inbox.on('Noted', (e) => void seen.push(e.id));
    const listening = await createWebhookConsumer({ inbox, secret }).listen();
    try {
      const id = uuidv7();
      // What a JavaScript sender writes for a string cut inside an emoji: JSON.stringify escapes the half.
      const body = JSON.stringify({ id, type: 'Noted', aggregateType: 'Note', aggregateId: '1', key: 'Note:1', destination: 'notes', payload: { text: 'cut \ud83d' }, headers: {}, occurredAt: new Date().toISOString(), version: null });
      const ts = Math.floor(Date.now() / 1000);
      const res = await fetch(listening.url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': String(ts), 'webhook-signature': signWebhook(secret, id, ts, body) },
        body,
      });
      assert.equal(res.status, 400);
      assert.match(await res.text(), /^payload\.text: contains .*lone UTF-16 surrogate/);
      assert.deepEqual(seen, []);
    } finally {
      await listening.close();
    }
  });

  it("the inbox's database down is answered 503 with Retry-After, which the sender takes for the destination being down (no attempt counted)", async () => {
    const down = pgConnection({ connectionString: 'postgres://postgres@127.0.0.1:1/test' });
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: down, schema: db.schema }), consumer: 'outage', autoStart: false });
    inbox.on('Noted', () => {});
    const listening = await createWebhookConsumer({ inbox, secret }).listen();
    const transport = new HttpTransport({ endpoints: { notes: listening.url }, secret });
    try {
      const [outcome] = await transport.publish([event('down')], never);
      assert.equal(outcome!.ok, false);
      const error = (outcome as { error: { kind: string; message: string; retryAfterMs?: number } }).error;
      assert.equal(error.kind, 'destination-down', error.message);
      assert.match(error.message, /HTTP 503/);
      assert.equal(error.retryAfterMs, 5000);
    } finally {
      await transport.close();
      await listening.close();
      await down.close?.();
    }
  });

  it('isStoreUnreachable tells an unreachable store from other failures (only the former is a 503)', () => {
    const coded = (message: string, code: unknown): Error => Object.assign(new Error(message), { code });
    for (const err of [
      coded('connect ECONNREFUSED 127.0.0.1:5432', 'ECONNREFUSED'),
      new Error('Connection terminated unexpectedly'),
      new Error('timeout exceeded when trying to connect'),
      coded('terminating connection due to administrator command', '57P01'),
      coded('sorry, too many clients already', '53300'),
      coded('connection failure', '08006'),
      Object.assign(new Error('Too many connections'), { errno: 1040, sqlMessage: 'Too many connections' }),
      coded('14 UNAVAILABLE: No connection established', 14),
      new Error('wrapped', { cause: coded('read ECONNRESET', 'ECONNRESET') }),
    ]) {
      assert.equal(isStoreUnreachable(err), true, err.message);
    }
    for (const err of [new RangeError('Maximum call stack size exceeded'), coded('duplicate key', '23505'), coded('deadlock detected', '40P01'), new Error('boom')]) {
      assert.equal(isStoreUnreachable(err), false, err.message);
    }
  });

  it('an inbox rejection that is not an unreachable store stays a 500 (retriable), not a 503 that would pause every event', async () => {
    const inbox = { process: async () => Promise.reject(new RangeError('Maximum call stack size exceeded')) };
    const listening = await createWebhookConsumer({ inbox: inbox as never, secret }).listen();
    const transport = new HttpTransport({ endpoints: { notes: listening.url }, secret });
    try {
      const [outcome] = await transport.publish([event('bug')], never);
      const error = (outcome as { error: { kind: string; message: string } }).error;
      assert.equal(error.kind, 'retriable', error.message);
      assert.match(error.message, /HTTP 500/);
    } finally {
      await transport.close();
      await listening.close();
    }
  });

  it('an event the inbox store refuses and cannot record is answered 422 (the sender parks it), never 204', async () => {
    const refused = (): Error => Object.assign(new Error('value too long for type character varying(200)'), { code: '22001' });
    const store = {
      async runBatch(): Promise<never> {
        throw refused();
      },
      async recordFailure(): Promise<never> {
        throw refused();
      },
      async recheckHeld() {
        return [];
      },
      async hold() {},
      async redrivable() {
        return [];
      },
    };
    const inbox = createInbox({ store: store as never, consumer: 'refused', autoStart: false, retry: { baseDelayMs: 1, maxDelayMs: 1 } });
    inbox.on('Noted', () => {});
    const listening = await createWebhookConsumer({ inbox, secret }).listen();
    const transport = new HttpTransport({ endpoints: { notes: listening.url }, secret });
    try {
      const e = event('refused');
      const kinds: string[] = [];
      for (let i = 0; i < 3; i++) {
        const [outcome] = await transport.publish([e], never);
        kinds.push(outcome!.ok ? 'ack' : (outcome as { error: { kind: string } }).error.kind);
      }
      // Refused on each try: retried twice, then dead without a row, which the sender parks (visible, releasable).
      assert.deepEqual(kinds, ['retriable', 'retriable', 'permanent']);
    } finally {
      await transport.close();
      await listening.close();
    }
  });

  it("a sender's retry of an event whose handler is still running waits for it, and other keys flow meanwhile", async () => {
    const inbox = createInbox({ store: new PostgresInboxStore({ connection: db.connection, schema: db.schema }), consumer: 'resend', autoStart: false });
    let runs = 0;
    inbox.on('Noted', async (e) => {
      if ((e.payload as { key: string }).key === 'slow') {
        runs++;
        await new Promise((r) => setTimeout(r, 2500));
      }
    });
    const slow = event('slow');
    const first = inbox.process(slow);
    await new Promise((r) => setTimeout(r, 100));
    const resend = inbox.process(slow); // the sender timed out and sent it again
    await new Promise((r) => setTimeout(r, 50));
    const started = Date.now();
    const others = await Promise.all(['a', 'b', 'c', 'd', 'e'].map((k) => inbox.process(event(k))));
    assert.deepEqual(others.map((o) => o.status), ['processed', 'processed', 'processed', 'processed', 'processed']);
    assert.ok(Date.now() - started < 1500, `other keys took ${Date.now() - started} ms`);
    assert.deepEqual([(await first).status, (await resend).status], ['processed', 'duplicate']);
    assert.equal(runs, 1);
  });
});
