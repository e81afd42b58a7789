import assert from 'node:assert/strict';
import { request, createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { ConfigError, uuidv7, type OutboxEvent } from 'txbox';
import {
  HttpTransport,
  createWebhookReceiver,
  generateWebhookSecret,
  listenWebhookReceiver,
  signWebhook,
  type WebhookContext,
  type WebhookReceiverOptions,
} from 'txbox/http';

interface Answer {
  readonly status: number;
  readonly body: string;
}

/** One POST on its own connection (no agent, so nothing stays open). */
function post(url: string, headers: Record<string, string>, body: string | Buffer, method = 'POST'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function envelope(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: uuidv7(),
    type: 'OrderCreated',
    aggregateType: 'Order',
    aggregateId: '17',
    key: 'Order:17',
    destination: 'orders',
    payload: { total: 42 },
    headers: { traceparent: '00-a-b-01' },
    occurredAt: '2025-01-02T03:04:05.678Z',
    version: 3,
    ...overrides,
  };
}

function signed(secret: string, body: string, id = 'msg_1', timestamp = Math.floor(Date.now() / 1000)): Record<string, string> {
  return {
    'content-type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': signWebhook(secret, id, timestamp, body),
  };
}

const cleanups: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

async function start(options: Partial<WebhookReceiverOptions> & { secret?: string }) {
  const received: { event: OutboxEvent; ctx: WebhookContext }[] = [];
  const receiver = createWebhookReceiver({
    onEvent: (event, ctx) => void received.push({ event, ctx }),
    ...options,
  });
  const listening = await receiver.listen();
  cleanups.push(() => listening.close());
  return { url: `${listening.url}/hooks`, received };
}

describe('createWebhookReceiver', () => {
  const secret = generateWebhookSecret();

  it('accepts a correctly signed envelope and hands onEvent the event', async () => {
    const { url, received } = await start({ secret });
    const body = JSON.stringify(envelope());
    const answer = await post(url, signed(secret, body, 'evt-1'), body);
    assert.equal(answer.status, 204);
    assert.equal(received.length, 1);
    const { event, ctx } = received[0]!;
    assert.equal(event.type, 'OrderCreated');
    assert.deepEqual(event.payload, { total: 42 });
    assert.equal(event.version, 3);
    assert.ok(event.occurredAt instanceof Date);
    assert.equal(event.occurredAt.toISOString(), '2025-01-02T03:04:05.678Z');
    assert.equal(ctx.webhookId, 'evt-1');
    assert.equal(ctx.verified, true);
    assert.ok(ctx.timestamp! > 0);
  });

  it('answers 401 to a bad or missing signature and never calls onEvent', async () => {
    const { url, received } = await start({ secret });
    const body = JSON.stringify(envelope());
    const forged = signed(generateWebhookSecret(), body);
    assert.equal((await post(url, forged, body)).status, 401);
    const tampered = signed(secret, body);
    assert.equal((await post(url, tampered, body.replace('42', '43'))).status, 401);
    const missing = await post(url, { 'content-type': 'application/json' }, body);
    assert.equal(missing.status, 401);
    assert.match(missing.body, /missing webhook-id/);
    assert.equal(received.length, 0);
  });

  it('answers 401 to a stale or future timestamp', async () => {
    const { url, received } = await start({ secret, toleranceSeconds: 60 });
    const body = JSON.stringify(envelope());
    const now = Math.floor(Date.now() / 1000);
    const stale = await post(url, signed(secret, body, 'm', now - 61), body);
    assert.equal(stale.status, 401);
    assert.match(stale.body, /webhook-timestamp/);
    assert.equal((await post(url, signed(secret, body, 'm', now + 120), body)).status, 401);
    assert.equal((await post(url, signed(secret, body, 'm', now - 30), body)).status, 204);
    assert.equal(received.length, 1);
  });

  it('answers 400 to malformed JSON and to an envelope without id or type', async () => {
    const { url, received } = await start({ secret });
    for (const [body, text] of [
      ['{"id": "x", "type": ', /not valid JSON/],
      ['[1,2]', /JSON object/],
      [JSON.stringify(envelope({ id: undefined })), /"id"/],
      [JSON.stringify(envelope({ type: 42 })), /"type"/],
      [JSON.stringify(envelope({ headers: { a: 1 } })), /"headers"/],
      [JSON.stringify(envelope({ occurredAt: 'yesterday' })), /"occurredAt"/],
    ] as const) {
      const answer = await post(url, signed(secret, body), body);
      assert.equal(answer.status, 400, body);
      assert.match(answer.body, text);
    }
    assert.equal(received.length, 0);
  });

  it('answers 413 above maxBodyBytes', async () => {
    const { url, received } = await start({ secret, maxBodyBytes: 1024 });
    const body = JSON.stringify(envelope({ payload: 'x'.repeat(4096) }));
    const answer = await post(url, signed(secret, body), body);
    assert.equal(answer.status, 413);
    assert.match(answer.body, /larger than 1024 bytes/);
    assert.equal(received.length, 0);
  });

  it('answers 405 to anything but POST', async () => {
    const { url } = await start({ secret });
    assert.equal((await post(url, {}, '', 'GET')).status, 405);
  });

  it('refuses to start without a secret: an unset WEBHOOK_SECRET no longer accepts forged events', async () => {
    const fromEnv = process.env.TXBOX_TEST_UNSET_WEBHOOK_SECRET; // unset, as in a misconfigured deploy
    assert.throws(
      () => createWebhookReceiver({ secret: fromEnv, onEvent: () => {} }),
      (e: unknown) => e instanceof ConfigError && e.field === 'secret' && /npx txbox secret/.test(e.message),
    );
    // With the secret set, a forged (unsigned) request is answered 401 and never reaches onEvent.
    const { url, received } = await start({ secret });
    const body = JSON.stringify(envelope());
    const forged = await post(url, { 'content-type': 'application/json', 'webhook-id': 'msg_forged' }, body);
    assert.equal(forged.status, 401);
    assert.equal(received.length, 0);
    const signedByTransport = new HttpTransport({ endpoints: { orders: url }, secret });
    cleanups.push(() => signedByTransport.close());
    const event: OutboxEvent = { ...(envelope() as unknown as OutboxEvent), occurredAt: new Date() };
    assert.deepEqual(await signedByTransport.publish([event], new AbortController().signal), [{ ok: true }]);
    assert.equal(received.length, 1);
    assert.equal(received[0]!.ctx.verified, true);
  });

  it('accepts unsigned requests only with allowUnsigned: true', async () => {
    const { url, received } = await start({ allowUnsigned: true });
    const body = JSON.stringify(envelope({ aggregateType: undefined, aggregateId: undefined, key: undefined, version: undefined }));
    assert.equal((await post(url, { 'content-type': 'application/json' }, body)).status, 204);
    assert.equal(received[0]!.ctx.verified, false);
    assert.equal(received[0]!.event.version, null);
  });

  it('answers 2xx only after onEvent resolved', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let handled = false;
    const { url } = await start({
      secret,
      onEvent: async () => {
        await gate;
        handled = true;
      },
    });
    const body = JSON.stringify(envelope());
    let answered = false;
    const answer = post(url, signed(secret, body), body).then((a) => {
      answered = true;
      return a;
    });
    await new Promise((resolve) => setTimeout(resolve, 150));
    assert.equal(answered, false);
    release();
    assert.equal((await answer).status, 204);
    assert.equal(handled, true);
  });

  it('answers 500 when onEvent throws, which the transport retries', async () => {
    const logged: object[] = [];
    const logger = { debug() {}, info() {}, warn() {}, error: (o: object) => void logged.push(o) };
    const receiver = createWebhookReceiver({
      secret,
      logger,
      onEvent: () => {
        throw new Error('database unavailable');
      },
    });
    const listening = await listenWebhookReceiver(receiver, { port: 0 });
    const transport = new HttpTransport({ endpoints: { orders: `${listening.url}/orders` }, secret });
    cleanups.push(() => listening.close(), () => transport.close());
    const event: OutboxEvent = { ...(envelope() as unknown as OutboxEvent), occurredAt: new Date() };
    const [outcome] = await transport.publish([event], new AbortController().signal);
    assert.ok(outcome && !outcome.ok);
    assert.equal(outcome.error.kind, 'retriable');
    assert.match(outcome.error.message, /^HTTP 500 .*: the event handler failed$/);
    assert.equal(logged.length, 1);
    assert.ok(!JSON.stringify(logged).includes('total'), 'no payload in logs');
  });

  it('aborts ctx.signal when the sender gives up', async () => {
    let seen: AbortSignal | undefined;
    const { url } = await start({
      secret,
      onEvent: (_event, ctx) => {
        seen = ctx.signal;
        return new Promise((resolve) => ctx.signal.addEventListener('abort', () => resolve()));
      },
    });
    const transport = new HttpTransport({ endpoints: { orders: url }, secret, timeoutMs: 100 });
    cleanups.push(() => transport.close());
    const event: OutboxEvent = { ...(envelope() as unknown as OutboxEvent), occurredAt: new Date() };
    const [outcome] = await transport.publish([event], new AbortController().signal);
    assert.ok(outcome && !outcome.ok && outcome.error.kind === 'retriable');
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(seen?.aborted, true);
  });

  it('serves as a plain node:http handler too', async () => {
    const handler = createWebhookReceiver({ secret, onEvent: () => {} });
    const server = createServer(handler);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => server.close(resolve)));
    const body = JSON.stringify(envelope());
    const { port } = server.address() as AddressInfo;
    assert.equal((await post(`http://127.0.0.1:${port}/any/path`, signed(secret, body), body)).status, 204);
  });

  it('checks its options', () => {
    assert.throws(() => createWebhookReceiver({} as WebhookReceiverOptions), (e: unknown) => e instanceof ConfigError && e.field === 'onEvent');
    assert.throws(() => createWebhookReceiver({ onEvent() {}, secret: 'short' }), (e: unknown) => e instanceof ConfigError && e.field === 'secret');
    assert.throws(() => createWebhookReceiver({ onEvent() {}, maxBodyBytes: 0 }), (e: unknown) => e instanceof ConfigError && e.field === 'maxBodyBytes');
  });
});
