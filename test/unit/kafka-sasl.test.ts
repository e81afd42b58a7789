/**
 * Wrong SASL credentials, against a scripted broker: the local test broker
 * has no SASL listener, so this one speaks just enough of the Kafka protocol
 * (ApiVersions, SaslHandshake, SaslAuthenticate) to refuse a login the way a
 * real SASL_PLAINTEXT listener does (SASL_AUTHENTICATION_FAILED, code 58).
 */
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { ConfigError, type OutboxEvent } from 'txbox';
import { KafkaTransport } from 'txbox/kafka';

const PASSWORD = 'correct-horse-battery-staple';
const API = { saslHandshake: 17, apiVersions: 18, saslAuthenticate: 36 } as const;

let server: Server;
let address = '';
const sockets = new Set<Socket>();
let logins = 0;

function int16(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeInt16BE(n);
  return b;
}
function int32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
}
function str(s: string): Buffer {
  return Buffer.concat([int16(Buffer.byteLength(s)), Buffer.from(s)]);
}

/** The answer of the scripted broker to one request (non-flexible versions only, as kafkajs 2.2 sends for these APIs). */
function answer(apiKey: number, apiVersion: number): Buffer {
  if (apiKey === API.apiVersions) {
    const apis = [
      [API.apiVersions, 0, 2],
      [API.saslHandshake, 0, 1],
      [API.saslAuthenticate, 0, 1],
    ];
    const body = [int16(0), int32(apis.length), ...apis.flatMap(([k, min, max]) => [int16(k!), int16(min!), int16(max!)])];
    if (apiVersion >= 1) body.push(int32(0)); // throttle_time_ms
    return Buffer.concat(body);
  }
  if (apiKey === API.saslHandshake) return Buffer.concat([int16(0), int32(2), str('PLAIN'), str('SCRAM-SHA-512')]);
  if (apiKey === API.saslAuthenticate) {
    logins++;
    const body = [int16(58), str('Authentication failed: Invalid username or password'), int32(0)];
    if (apiVersion >= 1) body.push(Buffer.alloc(8)); // session_lifetime_ms
    return Buffer.concat(body);
  }
  throw new Error(`the scripted broker got API key ${apiKey}`);
}

function serve(socket: Socket): void {
  sockets.add(socket);
  socket.on('close', () => sockets.delete(socket));
  socket.on('error', () => {});
  let buffered = Buffer.alloc(0);
  socket.on('data', (chunk) => {
    buffered = Buffer.concat([buffered, chunk]);
    while (buffered.length >= 4 && buffered.length >= 4 + buffered.readInt32BE(0)) {
      const size = buffered.readInt32BE(0);
      const request = buffered.subarray(4, 4 + size);
      buffered = buffered.subarray(4 + size);
      const body = answer(request.readInt16BE(0), request.readInt16BE(2));
      const correlationId = request.readInt32BE(4);
      socket.write(Buffer.concat([int32(body.length + 4), int32(correlationId), body]));
    }
  });
}

function event(): OutboxEvent {
  return {
    id: '0190a0b0-0000-7000-8000-000000000001',
    type: 'T',
    aggregateType: 'A',
    aggregateId: '1',
    key: 'A:1',
    destination: 'orders',
    payload: {},
    headers: {},
    occurredAt: new Date(),
    version: null,
  };
}

describe('KafkaTransport with wrong SASL credentials (scripted broker)', () => {
  before(async () => {
    server = createServer(serve);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it('start() throws ConfigError naming sasl, without the password, at once', async () => {
    const transport = new KafkaTransport({ brokers: [address], sasl: { mechanism: 'plain', username: 'relay', password: PASSWORD } });
    const started = Date.now();
    const err = await transport.start(AbortSignal.timeout(10_000)).then(
      () => null,
      (e: unknown) => e,
    );
    await transport.close();
    assert.ok(err instanceof ConfigError, `a ConfigError, got ${String(err)}`);
    assert.equal(err.field, 'sasl');
    assert.match(err.message, /SASL_AUTHENTICATION_FAILED|authentication failed/i);
    assert.doesNotMatch(err.message, new RegExp(PASSWORD));
    assert.doesNotMatch(JSON.stringify(err, Object.getOwnPropertyNames(err)), new RegExp(PASSWORD));
    assert.ok(logins >= 1, 'the broker saw a login attempt');
    assert.ok(Date.now() - started < 5000, 'not retried for long');
  });

  it('a publish without start() is destination-down (refused credentials pause the destination), naming sasl', async () => {
    const transport = new KafkaTransport({ brokers: [address], sasl: { mechanism: 'scram-sha-512', username: 'relay', password: PASSWORD }, allowAutoTopicCreation: true });
    const [outcome] = await transport.publish([event()], AbortSignal.timeout(10_000));
    await transport.close();
    assert.ok(outcome && !outcome.ok);
    assert.equal(outcome.error.kind, 'destination-down');
    assert.match(outcome.error.message, /sasl/);
    assert.doesNotMatch(outcome.error.message, new RegExp(PASSWORD));
  });
});
