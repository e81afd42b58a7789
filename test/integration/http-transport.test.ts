import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError, TransportError, uuidv7, type OutboxEvent, type PublishOutcome, type TransportErrorKind } from 'txbox';
import { HttpTransport, createWebhookReceiver, generateWebhookSecret, verifyWebhook, type HttpTransportOptions } from 'txbox/http';

interface Hit {
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: Buffer;
}

type Handler = (req: IncomingMessage, res: ServerResponse, body: Buffer) => void;

/** A real HTTP server on 127.0.0.1 that records requests and counts connections. */
async function testServer(handler: Handler) {
  const hits: Hit[] = [];
  let connections = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      hits.push({ url: req.url ?? '', headers: req.headers, body });
      handler(req, res, body);
    });
  });
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    get connections() {
      return connections;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

function event(overrides: Partial<OutboxEvent> = {}): OutboxEvent {
  const aggregateId = overrides.aggregateId ?? uuidv7();
  return {
    id: uuidv7(),
    type: 'OrderCreated',
    aggregateType: 'Order',
    aggregateId,
    key: `Order:${aggregateId}`,
    destination: 'orders',
    payload: { total: 42, items: ['a', 'b'] },
    headers: {},
    occurredAt: new Date('2025-01-02T03:04:05.678Z'),
    version: 1,
    ...overrides,
  };
}

const never = new AbortController().signal;
const cleanups: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

async function setup(handler: Handler, options: Partial<HttpTransportOptions> = {}) {
  const server = await testServer(handler);
  const transport = new HttpTransport({ endpoints: { orders: `${server.url}/hooks/orders` }, allowUnsigned: options.secret === undefined, ...options });
  cleanups.push(() => server.close(), () => transport.close());
  return { server, transport };
}

function failure(outcome: PublishOutcome | undefined): TransportError {
  assert.ok(outcome && !outcome.ok, `expected a failure, got ${JSON.stringify(outcome)}`);
  return outcome.error;
}

const answer = (status: number, headers: Record<string, string> = {}, body = '') => (_req: IncomingMessage, res: ServerResponse) => {
  res.writeHead(status, headers).end(body);
};

describe('HttpTransport', () => {
  it('acks a 2xx and sends the envelope, CloudEvents and Standard Webhooks headers', async () => {
    const secret = generateWebhookSecret();
    const { server, transport } = await setup(answer(200, { 'content-type': 'application/json' }, '{"ok":true}'), {
      secret,
      source: 'urn:test:orders',
      headers: { Authorization: 'Bearer static-token', 'X-Tenant': 't1' },
    });
    const e = event({
      headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', authorization: 'from-event', 'x-evil\r\n': 'x', 'x-multi': 'a\nb' },
    });
    const stored = { ...e, seq: 7, bucket: 3, attempts: 0 };
    const outcomes = await transport.publish([stored], never);
    assert.deepEqual(outcomes, [{ ok: true }]);
    const hit = server.hits[0]!;
    assert.equal(hit.url, '/hooks/orders');
    const h = hit.headers;
    assert.equal(h['content-type'], 'application/json');
    assert.equal(h['ce-specversion'], '1.0');
    assert.equal(h['ce-id'], e.id);
    assert.equal(h['ce-type'], 'OrderCreated');
    assert.equal(h['ce-source'], 'urn:test:orders');
    assert.equal(h['ce-subject'], `Order:${e.aggregateId}`);
    assert.equal(h['ce-time'], '2025-01-02T03:04:05.678Z');
    assert.equal(h['webhook-id'], e.id);
    assert.equal(h['traceparent'], e.headers['traceparent']);
    assert.equal(h['authorization'], 'Bearer static-token', 'static headers win; credentials never come from events');
    assert.equal(h['x-tenant'], 't1');
    assert.equal(h['x-multi'], undefined, 'a header value with a newline is not forwarded');
    assert.ok(Math.abs(Number(h['webhook-timestamp']) - Date.now() / 1000) < 5);
    assert.deepEqual(verifyWebhook({ secret, headers: h, body: hit.body }).ok, true);
    const body = JSON.parse(hit.body.toString()) as Record<string, unknown>;
    assert.deepEqual(Object.keys(body), ['id', 'type', 'aggregateType', 'aggregateId', 'key', 'destination', 'payload', 'headers', 'occurredAt', 'version']);
    assert.deepEqual(body['payload'], e.payload);
    assert.deepEqual(body['headers'], e.headers);
    assert.equal(body['occurredAt'], '2025-01-02T03:04:05.678Z');
  });

  it('sends each header once: a static header wins over the event header of that name, names differing in case are one header', async () => {
    const { server, transport } = await setup(answer(204), { headers: { 'X-Tenant': 'static' } });
    const e = event({ headers: { 'x-tenant': 'from-event', 'X-Trace': 'first', 'x-trace': 'second', 'x-other': 'o' } });
    const stored = { ...e, seq: 1, bucket: 0, attempts: 0 };
    assert.deepEqual(await transport.publish([stored], never), [{ ok: true }]);
    const hit = server.hits[0]!;
    const h = hit.headers;
    assert.equal(h['x-tenant'], 'static');
    assert.equal(h['x-trace'], 'second', 'one header, the last value of the event');
    assert.equal(h['x-other'], 'o');
    assert.equal(h['user-agent'], 'txbox');
    assert.equal(h['content-length'], String(hit.body.length));
    const body = JSON.parse(hit.body.toString()) as { headers: Record<string, string> };
    assert.deepEqual(body.headers, e.headers, 'the body keeps the event headers as they are');
  });

  it('sends a stored payload text as it is, and the same body as serializing the payload', async () => {
    const { server, transport } = await setup(answer(204));
    const parsed = { z: 1, a: { q: 'line\u2028é' }, list: [1, 2.5, null] };
    const withText = event({ payload: parsed, payloadJson: JSON.stringify(parsed) });
    const { payloadJson: _text, ...without } = withText;
    // Text that is not JSON.stringify's own output (an escape, spaces) still goes byte for byte.
    const odd = '{"q": "\\u00e9", "n": [1, 2]}';
    const oddEvent = event({ payload: JSON.parse(odd) as unknown, payloadJson: odd });
    assert.deepEqual(await transport.publish([withText], never), [{ ok: true }]);
    assert.deepEqual(await transport.publish([without], never), [{ ok: true }]);
    assert.deepEqual(await transport.publish([oddEvent], never), [{ ok: true }]);
    const [a, b, c] = server.hits;
    assert.equal(a!.body.toString(), b!.body.toString());
    assert.deepEqual((JSON.parse(a!.body.toString()) as { payload: unknown }).payload, parsed);
    assert.ok(c!.body.toString().includes(`"payload":${odd},"headers"`), c!.body.toString());
  });

  it('sends no signature headers without a secret, but always webhook-id', async () => {
    const { server, transport } = await setup(answer(204));
    const e = event();
    assert.deepEqual(await transport.publish([e], never), [{ ok: true }]);
    const h = server.hits[0]!.headers;
    assert.equal(h['webhook-id'], e.id);
    assert.equal(h['webhook-signature'], undefined);
    assert.equal(h['webhook-timestamp'], undefined);
  });

  it('is verified end to end by createWebhookReceiver', async () => {
    const secret = generateWebhookSecret();
    const received: OutboxEvent[] = [];
    const receiver = await createWebhookReceiver({ secret, onEvent: (e) => void received.push(e) }).listen();
    const transport = new HttpTransport({ endpoints: { orders: `${receiver.url}/orders` }, secret });
    cleanups.push(() => receiver.close(), () => transport.close());
    const e = event({ headers: { traceparent: '00-abc-def-01' } });
    assert.deepEqual(await transport.publish([e], never), [{ ok: true }]);
    assert.deepEqual(received, [e]);
    const wrong = new HttpTransport({ endpoints: { orders: `${receiver.url}/orders` }, secret: generateWebhookSecret() });
    cleanups.push(() => wrong.close());
    const error = failure((await wrong.publish([event()], never))[0]);
    assert.equal(error.kind, 'destination-down'); // a wrong secret concerns every event: the relay pauses the destination
    assert.match(error.message, /HTTP 401/);
  });

  it('classifies 5xx (but 503), 408 and 429 as retriable and honours Retry-After; 503 is destination-down', async () => {
    const retryAt = new Date(Date.now() + 30_000).toUTCString();
    const statuses: Record<string, [number, Record<string, string>]> = {
      a: [500, {}],
      b: [503, { 'retry-after': '7' }],
      c: [429, { 'retry-after': retryAt }],
      d: [408, {}],
      e: [502, { 'retry-after': 'garbage' }],
    };
    // One transport with a destination per status, all against one server.
    const srv = await testServer((req, res) => {
      const [status, headers] = statuses[req.url!.slice(1)]!;
      res.writeHead(status, headers).end('busy');
    });
    const multi = new HttpTransport({ endpoints: Object.fromEntries(Object.keys(statuses).map((k) => [k, `${srv.url}/${k}`])), allowUnsigned: true });
    cleanups.push(() => srv.close(), () => multi.close());
    const outcomes = await multi.publish(Object.keys(statuses).map((destination) => event({ destination })), never);
    const errors = outcomes.map(failure);
    errors.forEach((error, i) => assert.equal(error.kind, i === 1 ? 'destination-down' : 'retriable', error.message));
    assert.match(errors[1]!.message, /HTTP 503 Service Unavailable .*destination down: the receiver is unavailable/);
    assert.match(errors[0]!.message, /^HTTP 500 Internal Server Error from POST http:\/\/127\.0\.0\.1:\d+\/a: busy$/);
    assert.equal(errors[0]!.retryAfterMs, undefined);
    assert.equal(errors[1]!.retryAfterMs, 7000);
    assert.ok(errors[2]!.retryAfterMs! > 25_000 && errors[2]!.retryAfterMs! <= 30_000, String(errors[2]!.retryAfterMs));
    assert.match(errors[3]!.message, /HTTP 408/);
    assert.equal(errors[4]!.retryAfterMs, undefined);
  });

  const classes: [TransportErrorKind, Record<string, number>][] = [
    ['permanent', { a: 400, b: 410, c: 422 }],
    ['destination-down', { a: 401, b: 403, c: 404 }],
  ];
  for (const [kind, statuses] of classes) {
  it(`classifies ${Object.values(statuses).join(', ')} as ${kind}, with the status and a short excerpt, and redacts the URL`, async () => {
    const secret = generateWebhookSecret();
    const srv = await testServer((req, res) => {
      const status = statuses[new URL(req.url!, 'http://x').pathname.slice(1)]!;
      res.writeHead(status, { 'content-type': 'application/problem+json' }).end(`{"title":"bad\r\n\tthing","detail":"${'x'.repeat(5000)}"}`);
    });
    const endpoints = Object.fromEntries(Object.keys(statuses).map((k) => [k, srv.url.replace('//', '//user:pa55word@') + `/${k}?token=s3cret`]));
    const transport = new HttpTransport({ endpoints, secret });
    cleanups.push(() => srv.close(), () => transport.close());
    const events = Object.keys(statuses).map((destination) => event({ destination, payload: { card: '4111111111111111' } }));
    const errors = (await transport.publish(events, never)).map(failure);
    assert.equal(srv.hits[0]!.headers.authorization, `Basic ${Buffer.from('user:pa55word').toString('base64')}`);
    for (const [i, status] of Object.values(statuses).entries()) {
      const error = errors[i]!;
      assert.equal(error.kind, kind);
      assert.match(error.message, new RegExp(`^HTTP ${status} `));
      assert.match(error.message, /\?<redacted>( \(destination down: check [^)]+\))?: \{"title":"bad thing","detail":"x+\.\.\.$/);
      assert.ok(error.message.length < 400, `${error.message.length} chars`);
      for (const s of ['pa55word', 's3cret', '4111111111111111', secret.slice(6)]) assert.ok(!error.message.includes(s), `leaks ${s}`);
    }
  });
  }

  it('leaves the body out of errors with errorBodyChars: 0', async () => {
    const { transport } = await setup(answer(422, { 'content-type': 'text/plain' }, 'echo of your payload'), { errorBodyChars: 0 });
    const error = failure((await transport.publish([event()], never))[0]);
    assert.equal(error.message.includes('echo'), false);
    assert.match(error.message, /^HTTP 422 Unprocessable Entity from POST /);
  });

  it('treats a 3xx as permanent and does not follow it', async () => {
    const { server, transport } = await setup(answer(301, { location: '/elsewhere?sig=abc' }));
    const error = failure((await transport.publish([event()], never))[0]);
    assert.equal(error.kind, 'permanent');
    assert.match(error.message, /^HTTP 301 Moved Permanently .* to http:\/\/127\.0\.0\.1:\d+\/elsewhere\?<redacted>: redirects are not followed; set endpoints\.orders to the final URL$/);
    assert.equal(server.hits.length, 1);
  });

  it('times out a server that never answers, as retriable, within about timeoutMs', async () => {
    const { transport } = await setup(() => {}, { timeoutMs: 300 });
    const started = performance.now();
    const error = failure((await transport.publish([event()], never))[0]);
    const elapsed = performance.now() - started;
    assert.equal(error.kind, 'retriable');
    assert.match(error.message, /ETIMEDOUT: .*within 300 ms/);
    assert.ok(elapsed >= 290 && elapsed < 1000, `took ${elapsed} ms`);
  });

  it('keeps at most maxSockets requests of a call in flight, and times out the ones never sent', async () => {
    let inFlight = 0;
    let most = 0;
    const { transport } = await setup((_req, res) => {
      most = Math.max(most, ++inFlight);
      setTimeout(() => {
        inFlight--;
        res.writeHead(204).end();
      }, 20);
    }, { maxSockets: 3 });
    const outcomes = await transport.publish(Array.from({ length: 30 }, () => event()), never);
    assert.ok(outcomes.every((o) => o.ok));
    assert.equal(most, 3);

    // A server that never answers: 2 requests sent, 4 never started; all 6 time out as retriable.
    const stuck = await setup(() => {}, { maxSockets: 2, timeoutMs: 300 });
    const timedOut = await stuck.transport.publish(Array.from({ length: 6 }, () => event()), never);
    assert.equal(timedOut.length, 6);
    for (const o of timedOut) assert.equal(failure(o).kind, 'retriable');
    assert.equal(stuck.server.hits.length, 2, 'only maxSockets requests were sent');
  });

  it('never sends a request whose call ended (aborted) while it waited for a connection', async () => {
    // Two calls share maxSockets 2 connections to a server that never answers: the second call's requests
    // wait in the pool. The second call is aborted; when the first call's timeout frees the connections, its
    // requests must not go out.
    const stuck = await setup(() => {}, { maxSockets: 2, timeoutMs: 400 });
    const first = stuck.transport.publish([event(), event()], never);
    await sleep(50);
    const controller = new AbortController();
    const second = stuck.transport.publish([event(), event()], controller.signal);
    setTimeout(() => controller.abort(), 50);
    for (const o of await second) assert.match(failure(o).message, /aborted/);
    for (const o of await first) assert.match(failure(o).message, /ETIMEDOUT/);
    await sleep(300);
    assert.equal(stuck.server.hits.length, 2, 'only the first call\'s requests were sent');
  });

  it('reports a refused connection and an unknown host as destination-down', async () => {
    const srv = await testServer(() => {});
    await srv.close(); // the port is now free and refuses connections
    const transport = new HttpTransport({ endpoints: { orders: `${srv.url}/x` }, allowUnsigned: true });
    cleanups.push(() => transport.close());
    const error = failure((await transport.publish([event()], never))[0]);
    assert.equal(error.kind, 'destination-down');
    assert.match(error.message, /^ECONNREFUSED: POST http:\/\/127\.0\.0\.1:\d+\/x failed/);
    const nowhere = new HttpTransport({ endpoints: { orders: 'http://txbox-no-such-host.invalid/x' }, allowUnsigned: true });
    cleanups.push(() => nowhere.close());
    const dns = failure((await nowhere.publish([event()], never))[0]);
    assert.equal(dns.kind, 'destination-down', dns.message);
    assert.match(dns.message, /^(ENOTFOUND|EAI_AGAIN): POST http:\/\/txbox-no-such-host\.invalid\/x failed/);
  });

  it('reports an endpoint that no connection reaches within timeoutMs as destination-down; an answer that does not come in time stays retriable', async () => {
    // A listener that never accepts, its queue full: new connections hang in SYN_SENT, as toward a host that is gone.
    const py = spawn('python3', ['-c', 'import socket,time\ns=socket.socket()\ns.bind(("127.0.0.1",0))\ns.listen(0)\nprint(s.getsockname()[1], flush=True)\ntime.sleep(120)']);
    cleanups.push(async () => py.kill());
    const port = await new Promise<number>((resolve) => py.stdout.once('data', (d: Buffer) => resolve(Number(String(d).trim()))));
    for (let i = 0; i < 3; i++) {
      const filler = connect(port, '127.0.0.1').on('error', () => {});
      cleanups.push(async () => filler.destroy());
    }
    await sleep(200);
    const transport = new HttpTransport({ endpoints: { orders: `http://127.0.0.1:${port}/x` }, allowUnsigned: true, timeoutMs: 300 });
    cleanups.push(() => transport.close());
    const unreachable = failure((await transport.publish([event(), event()], never))[0]);
    assert.equal(unreachable.kind, 'destination-down', unreachable.message);
    assert.match(unreachable.message, /no connection .* within 300 ms/);
    // Connected, request sent, no answer: the receiver may be slow on this very event. Retriable, as before.
    const { transport: slow } = await setup(() => {}, { timeoutMs: 300 });
    const unanswered = failure((await slow.publish([event()], never))[0]);
    assert.equal(unanswered.kind, 'retriable', unanswered.message);
    assert.match(unanswered.message, /no complete answer within 300 ms/);
  });

  it('reports a connection the server drops as retriable', async () => {
    const { transport } = await setup((req) => req.socket.destroy());
    const error = failure((await transport.publish([event()], never))[0]);
    assert.equal(error.kind, 'retriable');
    assert.match(error.message, /ECONNRESET|socket hang up/);
  });

  it('sends again at once when a reused keep-alive socket turns out closed by the server', async () => {
    const perSocket = new WeakMap<object, number>();
    const { server, transport } = await setup((req, res) => {
      const n = (perSocket.get(req.socket) ?? 0) + 1;
      perSocket.set(req.socket, n);
      if (n === 2) req.socket.destroy(); // as a server closing an idle socket while the request was on its way
      else res.writeHead(200).end();
    });
    assert.deepEqual(await transport.publish([event()], never), [{ ok: true }]);
    await sleep(20); // the connection is idle in the pool, as a stale one is
    assert.deepEqual(await transport.publish([event()], never), [{ ok: true }]);
    assert.equal(server.hits.length, 3);
    assert.equal(server.connections, 2);
  });

  it('counts a 2xx as the ack even when its body stalls, and frees the socket by timeoutMs', async () => {
    const { transport } = await setup((_req, res) => res.writeHead(200, { 'content-length': '100' }).write('partial'), { timeoutMs: 200 });
    assert.deepEqual(await transport.publish([event()], never), [{ ok: true }]);
  });

  it('aborts waiting requests when the signal aborts; answered ones stay acked', async () => {
    const srv = await testServer((req, res) => {
      if (req.url === '/fast') res.writeHead(200).end();
    });
    const transport = new HttpTransport({ endpoints: { fast: `${srv.url}/fast`, slow: `${srv.url}/slow` }, allowUnsigned: true });
    cleanups.push(() => srv.close(), () => transport.close());
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 150);
    const started = performance.now();
    const outcomes = await transport.publish([event({ destination: 'fast' }), event({ destination: 'slow' })], controller.signal);
    assert.ok(performance.now() - started < 1000);
    assert.deepEqual(outcomes[0], { ok: true });
    const error = failure(outcomes[1]);
    assert.equal(error.kind, 'retriable');
    assert.match(error.message, /aborted/);
    const already = await transport.publish([event({ destination: 'fast' })], AbortSignal.abort());
    assert.equal(failure(already[0]).kind, 'retriable');
  });

  it('fails an event with an unknown destination permanently, without holding back the others', async () => {
    const { transport } = await setup(answer(200));
    const outcomes = await transport.publish([event({ destination: 'nowhere' }), event()], never);
    const error = failure(outcomes[0]);
    assert.equal(error.kind, 'permanent');
    assert.equal(error.message, 'unknown destination "nowhere": add it to endpoints');
    assert.deepEqual(outcomes[1], { ok: true });
  });

  it('throws ConfigError naming the endpoint with a bad URL', () => {
    assert.throws(
      () => new HttpTransport({ endpoints: { orders: 'http//missing-colon' } }),
      (e: unknown) => e instanceof ConfigError && e.field === 'endpoints.orders' && /https:\/\/host/.test(e.message),
    );
  });

  it('keeps outcome order for 200 concurrent events with mixed answers and delays', async () => {
    const { server, transport } = await setup((_req, res, body) => {
      const { payload } = JSON.parse(body.toString()) as { payload: { i: number } };
      const status = payload.i % 5 === 0 ? 502 : payload.i % 7 === 0 ? 400 : 200;
      setTimeout(() => res.writeHead(status).end(), Math.floor(Math.random() * 30));
    });
    const events = Array.from({ length: 200 }, (_, i) => event({ payload: { i } }));
    const outcomes = await transport.publish(events, never);
    assert.equal(outcomes.length, 200);
    outcomes.forEach((o, i) => {
      if (i % 5 === 0) assert.equal(failure(o).kind, 'retriable', `event ${i}`);
      else if (i % 7 === 0) assert.equal(failure(o).kind, 'permanent', `event ${i}`);
      else assert.deepEqual(o, { ok: true }, `event ${i}`);
    });
    assert.equal(server.hits.length, 200);
    assert.ok(server.connections <= 64, `${server.connections} connections for maxSockets 64`);
  });

  it('reuses keep-alive connections across calls and respects maxSockets', async () => {
    const { server, transport } = await setup((_req, res) => setTimeout(() => res.writeHead(200).end(), 5), { maxSockets: 4 });
    for (let round = 0; round < 5; round++) {
      const outcomes = await transport.publish(Array.from({ length: 20 }, () => event()), never);
      assert.ok(outcomes.every((o) => o.ok));
    }
    assert.equal(server.hits.length, 100);
    assert.ok(server.connections <= 4, `${server.connections} connections`);
  });

  it('passes the tls options to https connections: a private CA is trusted with tls.ca, refused without it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'txbox-http-tls-'));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    // A self-signed certificate for 127.0.0.1, made for this test.
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=txbox-test',
      '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')], { stdio: 'ignore' });
    const cert = readFileSync(join(dir, 'cert.pem'));
    const server = createHttpsServer({ key: readFileSync(join(dir, 'key.pem')), cert }, (req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(204).end());
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }));
    const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
    const trusted = new HttpTransport({ endpoints: { orders: url }, allowUnsigned: true, tls: { ca: cert } });
    const untrusted = new HttpTransport({ endpoints: { orders: url }, allowUnsigned: true });
    cleanups.push(() => trusted.close(), () => untrusted.close());
    assert.deepEqual(await trusted.publish([event()], never), [{ ok: true }]);
    const error = failure((await untrusted.publish([event()], never))[0]);
    assert.equal(error.kind, 'retriable');
    assert.match(error.message, /^(DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE): POST https:\/\/127\.0\.0\.1:\d+\/hooks failed/);
  });

  it('close() waits for in-flight publishes, then refuses until start()', async () => {
    const { transport } = await setup((_req, res) => setTimeout(() => res.writeHead(200).end(), 150));
    const publishing = transport.publish([event()], never);
    let published = false;
    void publishing.then(() => (published = true));
    await transport.close();
    assert.equal(published, true);
    assert.deepEqual(await publishing, [{ ok: true }]);
    const refused = failure((await transport.publish([event()], never))[0]);
    assert.equal(refused.kind, 'retriable');
    assert.match(refused.message, /closed/);
    await transport.start(never);
    assert.deepEqual(await transport.publish([event()], never), [{ ok: true }]);
  });
});
