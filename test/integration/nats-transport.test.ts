/**
 * NATS-specific behaviour against real nats-server processes that this file
 * starts on free ports (from a copy of the binary, so that the main server's
 * `start-stop-daemon --exec` never mistakes them for it) and stops at the
 * end: the message format, wrong stream, stream size limits, unroutable
 * subjects with a plain subscriber listening, an outage and recovery without
 * a new start(), a given connection, JetStream disabled, permissions.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { connect, nanos, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { ConfigError, TransportError, uuidv7, type OutboxEvent, type PublishOutcome } from 'txbox';
import { NATS_HEADERS, NatsTransport, parseNatsMessage, type NatsTransportEvents } from 'txbox/nats';
import { canConnect, freePort } from '../helpers/ports.ts';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const signal = (): AbortSignal => new AbortController().signal;
let dir = '';
let bin = '';

function event(destination: string, overrides: Partial<OutboxEvent> = {}): OutboxEvent {
  return {
    id: uuidv7(),
    type: 'OrderCreated',
    aggregateType: 'Order',
    aggregateId: '17',
    key: 'Order:17',
    destination,
    payload: { total: 5 },
    headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
    occurredAt: new Date('2025-01-02T03:04:05.678Z'),
    version: 3,
    ...overrides,
  };
}

function failure(outcome: PublishOutcome | undefined): { kind: string; message: string } {
  assert.ok(outcome && !outcome.ok, 'expected a failed outcome');
  return { kind: outcome.error.kind, message: outcome.error.message };
}

/** A nats-server child process; `kill()` is SIGKILL, `start()` runs it again with the same arguments. */
class Server {
  #child: ChildProcess | null = null;
  #exited: Promise<void> = Promise.resolve();
  constructor(
    readonly port: number,
    readonly args: readonly string[],
  ) {}

  static async create(args: (port: number) => string[]): Promise<Server> {
    const port = await freePort();
    const s = new Server(port, args(port));
    await s.start();
    return s;
  }

  async start(): Promise<void> {
    const child = spawn(bin, this.args, { stdio: 'ignore' });
    this.#child = child;
    this.#exited = new Promise((resolve) => child.once('exit', () => resolve()));
    const deadline = Date.now() + 10_000;
    while (!(await canConnect(this.port))) {
      if (Date.now() > deadline) throw new Error(`nats-server on ${this.port} did not start`);
      await sleep(50);
    }
  }

  async kill(sig: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    this.#child?.kill(sig);
    await this.#exited;
    this.#child = null;
  }
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'txbox-nats-test-'));
  bin = join(dir, 'nats-server');
  await copyFile('/usr/sbin/nats-server', bin);
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('NatsTransport against a JetStream server', () => {
  let server: Server;
  let admin: NatsConnection;
  let jsm: JetStreamManager;
  let servers = '';

  before(async () => {
    const store = join(dir, `js-${randomBytes(3).toString('hex')}`);
    server = await Server.create((port) => ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', store]);
    servers = `127.0.0.1:${server.port}`;
    admin = await connect({ servers, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    jsm = await jetstreamManager(admin);
    await jsm.streams.add({ name: 'ORDERS', subjects: ['txbox.orders', 'txbox.orders.>'], storage: StorageType.File, duplicate_window: nanos(120_000) });
    await jsm.streams.add({ name: 'OTHER', subjects: ['txbox.other'], storage: StorageType.File });
    await jsm.streams.add({ name: 'SMALL', subjects: ['txbox.small'], storage: StorageType.File, max_msg_size: 512 });
  });
  after(async () => {
    await admin.close();
    await server.kill('SIGTERM');
  });

  it('stores the payload as JSON with the envelope in headers, on txbox.<destination> by default', async () => {
    const t = new NatsTransport({ servers, streams: { orders: 'ORDERS' } });
    await t.start(signal());
    const e = event('orders');
    assert.deepEqual(await t.publish([e], signal()), [{ ok: true }]);
    await t.close();
    const last = (await jsm.streams.getMessage('ORDERS', { last_by_subj: 'txbox.orders' }))!;
    assert.equal(last.subject, 'txbox.orders');
    assert.deepEqual(JSON.parse(new TextDecoder().decode(last.data)), { total: 5 });
    const h = last.header;
    assert.equal(h.get(NATS_HEADERS.msgId), e.id);
    assert.equal(h.get(NATS_HEADERS.type), 'OrderCreated');
    assert.equal(h.get(NATS_HEADERS.key), 'Order:17');
    assert.equal(h.get(NATS_HEADERS.aggregateType), 'Order');
    assert.equal(h.get(NATS_HEADERS.aggregateId), '17');
    assert.equal(h.get(NATS_HEADERS.version), '3');
    assert.equal(h.get(NATS_HEADERS.occurredAt), '2025-01-02T03:04:05.678Z');
    assert.equal(h.get(NATS_HEADERS.contentType), 'application/json');
    assert.equal(h.get('traceparent'), e.headers.traceparent);
    assert.equal(h.get(NATS_HEADERS.destination), 'orders');
    const parsed = parseNatsMessage({ subject: last.subject, data: last.data, headers: last.header });
    assert.ok(parsed.ok, parsed.ok ? '' : parsed.message);
    assert.deepEqual(parsed.event, e, 'parseNatsMessage gives the envelope back');
  });

  it('appends the encoded key with keyInSubject', async () => {
    const t = new NatsTransport({ servers, keyInSubject: true });
    await t.start(signal());
    assert.deepEqual(await t.publish([event('orders', { key: 'tenant 1.Order:9' })], signal()), [{ ok: true }]);
    await t.close();
    const m = (await jsm.streams.getMessage('ORDERS', { last_by_subj: 'txbox.orders.tenant%201%2EOrder:9' }))!;
    assert.equal(m.header.get(NATS_HEADERS.key), 'tenant 1.Order:9');
  });

  it('refuses a subject captured by another stream than expected, and a message over the stream max_msg_size', async () => {
    const t = new NatsTransport({ servers, streams: { other: 'ORDERS' } });
    await t.start(signal());
    const [wrong, small, fine] = await t.publish(
      [event('other'), event('small', { key: 'k2', payload: { blob: 'x'.repeat(1000) } }), event('small', { key: 'k3' })],
      signal(),
    );
    assert.equal(failure(wrong).kind, 'permanent');
    assert.match(failure(wrong).message, /wrong stream: subject txbox\.other .* other than the expected "ORDERS"; fix streams\.other/);
    assert.equal(failure(small).kind, 'permanent');
    assert.match(failure(small).message, /too large.*max_msg_size/);
    assert.equal(fine!.ok, true);
    await t.close();
  });

  it('calls a subject unroutable when no stream captures it, even if a plain subscriber listens there', async () => {
    const listener = admin.subscribe('txbox.tapped');
    await admin.flush();
    const t = new NatsTransport({ servers, publishTimeoutMs: 300 });
    await t.start(signal());
    const [silent, tapped] = await t.publish([event('nowhere'), event('tapped', { key: 'k2' })], signal());
    assert.equal(failure(silent).kind, 'permanent');
    assert.match(failure(silent).message, /unroutable: no JetStream stream captures subject txbox\.nowhere .*no responders/);
    assert.equal(failure(tapped).kind, 'permanent');
    assert.match(failure(tapped).message, /unroutable: .*txbox\.tapped.*no ack within 300 ms/);
    listener.unsubscribe();
    await t.close();
  });

  it('publishes on a given connection and leaves it open', async () => {
    const t = new NatsTransport({ connection: admin });
    await t.start(signal());
    assert.deepEqual(await t.publish([event('orders')], signal()), [{ ok: true }]);
    await t.close();
    assert.equal(admin.isClosed(), false);
  });

  it('fails publishes during an outage within publishTimeoutMs as destination-down (no attempt counted), then recovers by itself', async () => {
    const t = new NatsTransport({ servers, publishTimeoutMs: 700, reconnectTimeWaitMs: 100 });
    const statuses: NatsTransportEvents['connection']['status'][] = [];
    t.on('connection', (c) => statuses.push(c.status));
    await t.start(signal());
    const e = event('orders');
    await server.kill();
    const started = Date.now();
    const outcomes = await t.publish([e, event('orders', { key: 'k2' })], signal());
    const took = Date.now() - started;
    // The connection is down: the relay pauses the destination instead of spending the events' attempts (a long outage parked them).
    for (const o of outcomes) assert.equal(failure(o).kind, 'destination-down', failure(o).message);
    assert.match(failure(outcomes[0]).message, /connection (is|was) down or reconnecting/);
    assert.ok(took < 2000, `failed after ${took} ms`);
    await server.start();
    const deadline = Date.now() + 15_000;
    let last: PublishOutcome = { ok: false, error: new TransportError('retriable', 'not tried') };
    while (Date.now() < deadline) {
      last = (await t.publish([e], signal()))[0]!;
      if (last.ok) break;
      await sleep(100);
    }
    assert.equal(last.ok, true, last.ok ? '' : last.error.message);
    assert.ok(statuses.includes('disconnect') && statuses.includes('reconnect'), statuses.join(','));
    await t.close();
  });

  it('says when JetStream is off', async () => {
    const plain = await Server.create((port) => ['-a', '127.0.0.1', '-p', String(port)]);
    try {
      const t = new NatsTransport({ servers: `127.0.0.1:${plain.port}` });
      await assert.rejects(t.start(signal()), (e: unknown) => e instanceof ConfigError && e.field === 'servers' && /JetStream is not enabled/.test(e.message));
      await t.close();
    } finally {
      await plain.kill('SIGTERM');
    }
  });
});

describe('NatsTransport against a server with users and permissions', () => {
  let server: Server;
  let servers = '';
  const password = randomBytes(9).toString('hex');

  before(async () => {
    const store = join(dir, `auth-${randomBytes(3).toString('hex')}`);
    const config = join(dir, `auth-${randomBytes(3).toString('hex')}.conf`);
    const port = await freePort();
    await writeFile(
      config,
      `listen: "127.0.0.1:${port}"
jetstream { store_dir: "${store}" }
authorization {
  users = [
    { user: admin, password: "${password}" }
    { user: relay, password: "${password}", permissions: { publish: { allow: ["$JS.API.>", "allowed.>"] }, subscribe: { allow: ["_INBOX.>"] } } }
    { user: nojs, password: "${password}", permissions: { publish: { allow: ["allowed.>"] }, subscribe: { allow: ["_INBOX.>"] } } }
  ]
}
`,
    );
    server = new Server(port, ['-c', config]);
    await server.start();
    servers = `127.0.0.1:${port}`;
    const admin = await connect({ servers, user: 'admin', pass: password });
    const jsm = await jetstreamManager(admin);
    await jsm.streams.add({ name: 'ALLOWED', subjects: ['allowed.>'], storage: StorageType.File });
    await jsm.streams.add({ name: 'DENIED', subjects: ['denied.>'], storage: StorageType.File });
    await admin.close();
  });
  after(async () => {
    await server.kill('SIGTERM');
  });

  it('publishes with user/pass, and a denied subject is a destination-down permission error', async () => {
    const t = new NatsTransport({ servers, user: 'relay', pass: password, subjects: { ok: 'allowed.x', no: 'denied.x' }, publishTimeoutMs: 2000 });
    await t.start(signal());
    const [ok, denied] = await t.publish([event('ok'), event('no', { key: 'k2' })], signal());
    assert.equal(ok!.ok, true, ok!.ok ? '' : ok!.error.message);
    assert.equal(failure(denied).kind, 'destination-down');
    assert.match(failure(denied).message, /permission denied: .*denied\.x.*user\/pass/);
    assert.doesNotMatch(failure(denied).message, new RegExp(password));
    await t.close();
  });

  it('names the setting for wrong, missing or insufficient credentials, never the password', async () => {
    const cases: [ConstructorParameters<typeof NatsTransport>[0], string, RegExp][] = [
      [{ servers, user: 'relay', pass: 'wrong-password' }, 'user/pass', /refused these credentials/],
      [{ servers, token: 'wrong-token' }, 'token', /refused these credentials/],
      [{ servers: `nats://relay:wrong-password@${servers}` }, 'servers', /refused these credentials .*; check servers$/],
      [{ servers }, 'user/pass', /requires credentials .*; set user\/pass, token or authenticator/],
      [{ servers, user: 'nojs', pass: password }, 'user/pass', /may not use the JetStream API/],
    ];
    for (const [options, field, text] of cases) {
      const t = new NatsTransport(options);
      await assert.rejects(t.start(signal()), (e: unknown) => {
        assert.ok(e instanceof ConfigError, String(e));
        assert.equal(e.field, field, e.message);
        assert.match(e.message, text);
        assert.doesNotMatch(e.message, /wrong-password|wrong-token/);
        assert.doesNotMatch(e.message, new RegExp(password));
        return true;
      });
      await t.close();
    }
  });
});
