/**
 * NatsTransport over a scripted connection (the `connection` option): how
 * each nats.js error becomes an outcome, the unroutable rule, the headers
 * sent, and the size check, without a server.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MsgHdrsImpl, NoRespondersError, PermissionViolationError, RequestError, errors, headers as natsHeaders, type Msg, type MsgHdrs, type NatsConnection } from '@nats-io/transport-node';
import { ConfigError, type OutboxEvent, type PublishOutcome } from 'txbox';
import { NATS_HEADERS, NatsTransport, type NatsTransportOptions } from 'txbox/nats';

type Reply = object | Error;
interface Sent {
  readonly subject: string;
  readonly data: Uint8Array;
  readonly headers: Map<string, string>;
}

type Callback = (err: Error | null, msg: Msg) => void;

/**
 * Just enough of a NatsConnection for the transport: `request()` (the
 * JetStream API calls of start() and stream lookups) and `publish()` with a
 * reply subject (the publishes, acked on one subscription) answer with
 * scripted JSON or errors, as a server would: a NoResponders error becomes
 * the server's 503 status message, a TimeoutError no answer at all, a publish
 * permission violation an asynchronous status error, and other errors are
 * thrown by `publish()` itself.
 */
class ScriptedConnection {
  readonly options = { inboxPrefix: '_INBOX' };
  info: { max_payload: number } | undefined = { max_payload: 1024 * 1024 };
  readonly sent: Sent[] = [];
  closed = false;
  #stopStatus: (() => void) | undefined;
  #statusWaiter: ((r: IteratorResult<{ type: string; error: Error }>) => void) | undefined;
  readonly #subs = new Map<string, Callback>();
  constructor(readonly answer: (subject: string, sent: Sent) => Reply | Promise<Reply>) {}

  subscribe(subject: string, opts: { callback: Callback }): { unsubscribe(): void } {
    assert.match(subject, /^_INBOX\.[^.]+\.\*$/, 'one wildcard subscription under the inbox prefix');
    this.#subs.set(subject.slice(0, -1), opts.callback);
    return { unsubscribe: () => this.#subs.delete(subject.slice(0, -1)) };
  }

  publish(subject: string, data: Uint8Array, opts: { reply: string; headers: MsgHdrs }): void {
    // What the server would receive: the encoded block, read back by nats.js's own parser.
    const decoded = MsgHdrsImpl.decode((opts.headers as MsgHdrsImpl).encode());
    const headers = new Map<string, string>();
    for (const k of decoded.keys()) headers.set(k, decoded.get(k));
    const sent = { subject, data, headers };
    const reply = this.answer(subject, sent);
    if (reply instanceof Error && !(reply instanceof RequestError) && !(reply instanceof errors.TimeoutError)) throw reply;
    this.sent.push(sent);
    const deliver = (r: Reply): void => {
      if (r instanceof errors.TimeoutError) return;
      const cause = r instanceof Error ? r.cause : undefined;
      if (cause instanceof PermissionViolationError) {
        this.#statusWaiter?.({ done: false, value: { type: 'error', error: cause } });
        return;
      }
      const callback = [...this.#subs].find(([prefix]) => opts.reply.startsWith(prefix))?.[1];
      if (cause instanceof NoRespondersError) callback?.(null, { subject: opts.reply, data: new Uint8Array(0), headers: natsHeaders(503, 'No Responders') } as unknown as Msg);
      else callback?.(null, { subject: opts.reply, data: new TextEncoder().encode(JSON.stringify(r)) } as unknown as Msg);
    };
    void Promise.resolve(reply).then((r) => setImmediate(() => deliver(r)));
  }

  isClosed(): boolean {
    return this.closed;
  }
  async close(): Promise<void> {
    this.closed = true;
  }
  status(): AsyncIterable<{ type: string; error: Error }> & { stop(): void } {
    let stopped = false;
    this.#stopStatus = () => {
      stopped = true;
      this.#statusWaiter?.({ done: true, value: undefined });
    };
    const next = (): Promise<IteratorResult<{ type: string; error: Error }>> =>
      stopped ? Promise.resolve({ done: true, value: undefined }) : new Promise((resolve) => (this.#statusWaiter = resolve));
    return { [Symbol.asyncIterator]: () => ({ next }), stop: () => this.#stopStatus?.() };
  }
  async request(subject: string, data: Uint8Array): Promise<Msg> {
    const reply = await this.answer(subject, { subject, data, headers: new Map() });
    if (reply instanceof Error) throw reply;
    return { subject: 'reply', data: new TextEncoder().encode(JSON.stringify(reply)) } as unknown as Msg;
  }
}

const ACCOUNT_INFO = { type: 'io.nats.jetstream.api.v1.account_info_response', memory: 0, storage: 0, streams: 1, consumers: 0 };
const apiError = (code: number, errCode: number, description: string) => ({ error: { code, err_code: errCode, description } });
const noResponders = (subject: string) => new RequestError(`no responders: '${subject}'`, { cause: new NoRespondersError(subject) });

function event(overrides: Partial<OutboxEvent> = {}): OutboxEvent {
  return {
    id: '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
    type: 'OrderCreated',
    aggregateType: 'Order',
    aggregateId: '17',
    key: 'Order:17',
    destination: 'orders',
    payload: { total: 5 },
    headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
    occurredAt: new Date('2025-01-02T03:04:05.678Z'),
    version: 3,
    ...overrides,
  };
}

/** Starts a transport on a scripted connection; `publish` answers come from `onPublish`, stream lookups from `onLookup`. */
async function scripted(
  onPublish: (sent: Sent) => Reply | Promise<Reply>,
  options: Omit<NatsTransportOptions, 'connection'> = {},
  onLookup: (subject: string) => Reply = () => ({ streams: ['ORDERS'] }),
): Promise<{ transport: NatsTransport; nc: ScriptedConnection; publish: (events: OutboxEvent[]) => Promise<PublishOutcome[]> }> {
  const nc = new ScriptedConnection((subject, sent) => {
    if (subject === '$JS.API.INFO') return ACCOUNT_INFO;
    if (subject === '$JS.API.STREAM.NAMES') return onLookup(JSON.parse(new TextDecoder().decode(sent.data)).subject);
    return onPublish(sent);
  });
  const transport = new NatsTransport({ ...options, connection: nc as unknown as NatsConnection });
  await transport.start(new AbortController().signal);
  return { transport, nc, publish: (events) => transport.publish(events, new AbortController().signal) };
}

function failure(outcome: PublishOutcome | undefined): { kind: string; message: string } {
  assert.ok(outcome && !outcome.ok, 'expected a failed outcome');
  return { kind: outcome.error.kind, message: outcome.error.message };
}

describe('NatsTransport publish', () => {
  it('sends the event id as Nats-Msg-Id, the envelope in txbox-* headers and the payload as JSON', async () => {
    const { transport, nc, publish } = await scripted(() => ({ stream: 'ORDERS', seq: 1 }), { streams: { orders: 'ORDERS' } });
    const [outcome] = await publish([event()]);
    assert.deepEqual(outcome, { ok: true });
    const sent = nc.sent[0]!;
    assert.equal(sent.subject, 'txbox.orders');
    assert.equal(new TextDecoder().decode(sent.data), '{"total":5}');
    assert.deepEqual(Object.fromEntries(sent.headers), {
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      [NATS_HEADERS.type]: 'OrderCreated',
      [NATS_HEADERS.destination]: 'orders',
      [NATS_HEADERS.key]: 'Order:17',
      [NATS_HEADERS.aggregateType]: 'Order',
      [NATS_HEADERS.aggregateId]: '17',
      [NATS_HEADERS.occurredAt]: '2025-01-02T03:04:05.678Z',
      [NATS_HEADERS.contentType]: 'application/json',
      [NATS_HEADERS.version]: '3',
      [NATS_HEADERS.msgId]: '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b',
      [NATS_HEADERS.expectedStream]: 'ORDERS',
    });
    await transport.close();
    assert.equal(nc.closed, false, 'a given connection is not closed');
  });

  it('routes by subjects, subjectPrefix and keyInSubject', async () => {
    const { transport, nc, publish } = await scripted(() => ({ stream: 'S', seq: 1 }), { subjectPrefix: 'shop.events', subjects: { pay: 'ledger.payments' }, keyInSubject: true });
    await publish([event({ key: 'tenant a.b' }), event({ destination: 'pay', key: 'P:1' })]);
    assert.deepEqual(
      nc.sent.map((s) => s.subject),
      ['shop.events.orders.tenant%20a%2Eb', 'ledger.payments.P:1'],
    );
    assert.equal(nc.sent[0]!.headers.get(NATS_HEADERS.key), 'tenant a.b', 'the real key travels in txbox-key');
    assert.equal(nc.sent[0]!.headers.has(NATS_HEADERS.expectedStream), false, 'no expected stream unless configured');
    await transport.close();
  });

  it('counts a duplicate ack as success and reports it', async () => {
    const { transport, publish } = await scripted(() => ({ stream: 'ORDERS', seq: 7, duplicate: true }));
    const duplicates: unknown[] = [];
    transport.on('duplicate', (d) => duplicates.push(d));
    assert.deepEqual(await publish([event()]), [{ ok: true }]);
    assert.deepEqual(duplicates, [{ id: event().id, stream: 'ORDERS', seq: 7 }]);
    await transport.close();
  });

  it('classifies broker errors', async () => {
    const cases: [string, Reply, 'retriable' | 'permanent' | 'destination-down', RegExp][] = [
      ['timeout', new errors.TimeoutError(), 'destination-down', /no JetStream ack .* within 100 ms \(publishTimeoutMs\)/],
      ['closed', new errors.ClosedConnectionError(), 'retriable', /closed or reconnecting/],
      ['leader election', apiError(503, 10008, 'JetStream system temporarily unavailable'), 'retriable', /temporarily unavailable .*10008/],
      ['store failure', apiError(503, 10077, 'maximum messages exceeded'), 'retriable', /maximum messages exceeded/],
      ['wrong stream', apiError(400, 10060, 'expected stream does not match'), 'permanent', /wrong stream: .* other than the expected "ORDERS"; fix streams\.orders/],
      ['stream max_msg_size', apiError(400, 10054, 'message size exceeds maximum allowed'), 'permanent', /too large/],
      ['other 4xx', apiError(400, 10109, 'invalid operation on sealed stream'), 'permanent', /sealed/],
      ['max_payload', errors.InvalidArgumentError.format('payload', 'max_payload size exceeded'), 'permanent', /too large.*max_payload/],
      [
        'permission',
        new RequestError('perm', { cause: new PermissionViolationError("Permissions Violation for Publish to 'txbox.orders'", 'publish', 'txbox.orders') }),
        'destination-down',
        /permission denied.*txbox\.orders/,
      ],
      ['auth', new errors.AuthorizationError('Authorization Violation'), 'destination-down', /authorization failed/],
      ['unknown', new Error('boom'), 'retriable', /boom/],
    ];
    for (const [name, reply, kind, text] of cases) {
      const { transport, publish } = await scripted(() => reply, { streams: { orders: 'ORDERS' }, publishTimeoutMs: 100 });
      const f = failure((await publish([event()]))[0]);
      assert.equal(f.kind, kind, `${name}: ${f.message}`);
      assert.match(f.message, text, name);
      assert.match(f.message, /destination "orders"/, name);
      await transport.close();
    }
  });

  it('calls a subject unroutable only when JetStream says no stream matches it', async () => {
    const noStream = () => apiError(404, 10059, 'no stream matches subject');
    const lookups: string[] = [];
    let t = await scripted(() => noResponders('txbox.orders'), { keyInSubject: true }, (s) => (lookups.push(s), { streams: [] }));
    const [a, b] = await t.publish([event(), event({ id: 'other', key: 'Order:17' })]);
    assert.equal(failure(a).kind, 'permanent');
    assert.match(failure(a).message, /unroutable: no JetStream stream captures subject txbox\.orders\.<key> .*add txbox\.orders\.> to a stream's subjects.*no responders/);
    assert.doesNotMatch(failure(a).message, /Order:17/, 'the key stays out of the message');
    assert.equal(failure(b).kind, 'permanent');
    assert.deepEqual(lookups, ['txbox.orders.Order:17'], 'one lookup per subject per call');
    await t.transport.close();

    // A stream captures it: the server is busy, not misrouted.
    t = await scripted(() => noResponders('txbox.orders'), {}, () => ({ streams: ['ORDERS'] }));
    assert.equal(failure((await t.publish([event()]))[0]).kind, 'retriable');
    await t.transport.close();

    // The lookup itself fails: JetStream is unavailable, so retry.
    t = await scripted(() => noResponders('txbox.orders'), {}, () => new errors.TimeoutError());
    assert.equal(failure((await t.publish([event()]))[0]).kind, 'retriable');
    await t.transport.close();

    // A timeout on a subject no stream captures (a plain subscriber listens there) is unroutable too.
    t = await scripted(() => new errors.TimeoutError(), { publishTimeoutMs: 100 }, noStream);
    assert.match(failure((await t.publish([event()]))[0]).message, /unroutable.*no ack within 100 ms/);
    await t.transport.close();
  });

  it('refuses oversize messages before sending them, counting headers', async () => {
    const { transport, nc, publish } = await scripted(() => ({ stream: 'ORDERS', seq: 1 }));
    nc.info = { max_payload: 400 };
    const [big, fits] = await publish([event({ payload: { blob: 'x'.repeat(300) } }), event({ payload: { blob: 'x'.repeat(20) } })]);
    assert.equal(failure(big).kind, 'permanent');
    assert.match(failure(big).message, /message too large: \d+ bytes with headers, over the server's max_payload of 400 bytes/);
    assert.equal(fits!.ok, true);
    assert.equal(nc.sent.length, 1, 'the big one was never sent');
    await transport.close();
  });

  it('refuses events that cannot travel unchanged, naming the reason but not the value', async () => {
    const { transport, nc, publish } = await scripted(() => ({ stream: 'ORDERS', seq: 1 }));
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const outcomes = await publish([
      event({ payload: cyclic }),
      event({ headers: { 'Nats-Rollup': 'all' } }),
      event({ headers: { 'txbox-key': 'x' } }),
      event({ headers: { 'bad name': 'x' } }),
      event({ headers: { baggage: 'a\r\nb' } }),
      event({ key: ' padded' }),
      event({ destination: 'a b' }),
      event({ headers: { 'Content-Type': 'application/vnd.order+json' } }),
      event({ payload: undefined, version: null }),
    ]);
    const messages = outcomes.slice(0, 7).map((o) => failure(o));
    assert.ok(messages.every((m) => m.kind === 'permanent'));
    assert.match(messages[0]!.message, /cannot be serialized to JSON/);
    assert.match(messages[1]!.message, /"Nats-Rollup" is reserved/);
    assert.match(messages[2]!.message, /"txbox-key" is reserved/);
    assert.match(messages[3]!.message, /not a valid NATS header name/);
    assert.match(messages[4]!.message, /CR or LF/);
    assert.match(messages[5]!.message, /txbox-key has leading or trailing whitespace/);
    assert.match(messages[6]!.message, /destination "a b" cannot be part of a NATS subject.*subjects\.a b/);
    assert.equal(outcomes[7]!.ok, true);
    assert.equal(nc.sent[0]!.headers.get('content-type'), 'application/vnd.order+json', "the event's content-type wins");
    assert.equal(outcomes[8]!.ok, true);
    assert.equal(new TextDecoder().decode(nc.sent[1]!.data), 'null');
    assert.equal(nc.sent[1]!.headers.has(NATS_HEADERS.version), false, 'no version header without a version');
    await transport.close();
  });

  it('keeps input order and sends a call concurrently', async () => {
    let inFlight = 0;
    let peak = 0;
    const { transport, publish } = await scripted(async (sent) => {
      peak = Math.max(peak, ++inFlight);
      await new Promise((r) => setTimeout(r, sent.headers.get(NATS_HEADERS.key) === 'k0' ? 30 : 1));
      inFlight--;
      return sent.headers.get(NATS_HEADERS.key) === 'k1' ? apiError(400, 10060, 'expected stream does not match') : { stream: 'S', seq: 1 };
    });
    const outcomes = await publish(Array.from({ length: 20 }, (_, i) => event({ id: `id${i}`, key: `k${i}` })));
    assert.equal(outcomes.length, 20);
    assert.equal(outcomes[0]!.ok, true);
    assert.equal(outcomes[1]!.ok, false);
    assert.ok(outcomes.slice(2).every((o) => o.ok));
    assert.equal(peak, 20, 'all events of the call were in flight at once');
    await transport.close();
  });

  it('matches acks by token: an ack after publishTimeoutMs is ignored and never settles a later publish', async () => {
    let call = 0;
    const { transport, publish } = await scripted(
      async () => {
        const mine = ++call;
        // The first publish is acked late, while the second call waits for its own ack.
        await new Promise((r) => setTimeout(r, mine === 1 ? 150 : 300));
        return mine === 1 ? { stream: 'S', seq: 1 } : apiError(400, 10109, 'invalid operation on sealed stream');
      },
      { publishTimeoutMs: 100 },
    );
    const [first] = await publish([event()]);
    assert.match(failure(first).message, /no JetStream ack .* within 100 ms/);
    const [second] = await publish([event({ id: 'second' })]);
    assert.match(failure(second).message, /no JetStream ack .* within 100 ms/, 'the late ack of the first publish did not count as the second one');
    await transport.close();
  });

  it('resolves waiting events as retriable when the signal aborts', async () => {
    const { transport, nc } = await scripted(() => new Promise(() => {}));
    const controller = new AbortController();
    const pending = transport.publish([event(), event({ key: 'k2' })], controller.signal);
    setTimeout(() => controller.abort(), 20);
    const outcomes = await pending;
    assert.deepEqual(outcomes.map((o) => failure(o).kind), ['retriable', 'retriable']);
    assert.match(failure(outcomes[0]).message, /aborted/);
    assert.equal(nc.sent.length, 2);
    await transport.close();
  });

  it('fails every event as retriable before start() and after close()', async () => {
    const t = new NatsTransport({ connection: new ScriptedConnection(() => ({})) as unknown as NatsConnection });
    const [before] = await t.publish([event()], new AbortController().signal);
    assert.match(failure(before).message, /not started/);
    await t.start();
    await t.close();
    const [after] = await t.publish([event()], new AbortController().signal);
    assert.match(failure(after).message, /closed; call start\(\)/);
  });
});

describe('NatsTransport start', () => {
  it('checks that JetStream answers and names the setting when it does not', async () => {
    const cases: [Reply, string, RegExp][] = [
      [noResponders('$JS.API.INFO'), 'servers', /JetStream is not enabled .* -js/],
      [apiError(503, 10039, 'jetstream not enabled for account'), 'servers', /not enabled for this account/],
      [new RequestError('perm', { cause: new PermissionViolationError('Permissions Violation for Publish to "$JS.API.INFO"', 'publish', '$JS.API.INFO') }), 'user/pass', /\$JS\.API/],
    ];
    for (const [reply, field, text] of cases) {
      const nc = new ScriptedConnection(() => reply);
      const t = new NatsTransport({ connection: nc as unknown as NatsConnection });
      await assert.rejects(t.start(), (e: unknown) => e instanceof ConfigError && e.field === field && text.test(e.message));
      await t.close();
    }
    const closed = new ScriptedConnection(() => ACCOUNT_INFO);
    closed.closed = true;
    await assert.rejects(new NatsTransport({ connection: closed as unknown as NatsConnection }).start(), (e: unknown) => e instanceof ConfigError && e.field === 'connection');
  });
});
