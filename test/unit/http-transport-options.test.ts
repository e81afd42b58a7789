import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError } from 'txbox';
import { HttpTransport, resolveHttpTransportOptions, type HttpTransportOptions } from 'txbox/http';

function configError(options: unknown, field: string, text?: RegExp): void {
  assert.throws(
    () => resolveHttpTransportOptions(options as HttpTransportOptions),
    (e: unknown) => {
      assert.ok(e instanceof ConfigError, `expected ConfigError, got ${String(e)}`);
      assert.equal(e.field, field);
      if (text) assert.match(e.message, text);
      return true;
    },
  );
}

describe('resolveHttpTransportOptions', () => {
  it('fills defaults and freezes', () => {
    const o = resolveHttpTransportOptions({ endpoints: { orders: 'https://hooks.example.com/orders?x=1' }, allowUnsigned: true });
    assert.equal(o.timeoutMs, 10_000);
    assert.equal(o.maxSockets, 64);
    assert.equal(o.source, 'txbox');
    assert.equal(o.signingKey, null);
    assert.equal(o.errorBodyChars, 200);
    assert.ok(Object.isFrozen(o));
    assert.ok(Object.isFrozen(o.headers));
    const e = o.endpoints.get('orders')!;
    assert.equal(e.secure, true);
    assert.equal(e.request.path, '/orders?x=1');
    assert.equal(e.display, 'https://hooks.example.com/orders?<redacted>');
  });

  it('names the endpoint of a bad URL, without quoting it', () => {
    configError({ endpoints: { orders: 'not a url' } }, 'endpoints.orders', /absolute URL/);
    configError({ endpoints: { orders: 'https://ok.example/', pay: 'ftp://user:hunter2@files.example/' } }, 'endpoints.pay', /only http: and https:/);
    assert.throws(
      () => resolveHttpTransportOptions({ endpoints: { pay: 'ftp://user:hunter2@files.example/' } }),
      (e: unknown) => e instanceof Error && !e.message.includes('hunter2'),
    );
    configError({ endpoints: { orders: 42 } }, 'endpoints.orders');
    configError({ endpoints: { orders: 'localhost:8089/hook?token=t0ps3cret' } }, 'endpoints.orders', /has no scheme; write it as "http:\/\/localhost:8089\/\.\.\."/);
    assert.throws(
      () => resolveHttpTransportOptions({ endpoints: { orders: 'localhost:8089/hook?token=t0ps3cret' } }),
      (e: unknown) => e instanceof Error && !e.message.includes('t0ps3cret') && !e.message.includes('uses localhost:'),
    );
  });

  it('requires at least one endpoint', () => {
    configError({}, 'endpoints', /is required/);
    configError({ endpoints: {} }, 'endpoints', /is required/);
  });

  it('checks numbers', () => {
    configError({ endpoints: { a: 'http://127.0.0.1/' }, timeoutMs: 0 }, 'timeoutMs', /integer from 1/);
    configError({ endpoints: { a: 'http://127.0.0.1/' }, maxSockets: 1.5 }, 'maxSockets');
    configError({ endpoints: { a: 'http://127.0.0.1/' }, errorBodyChars: -1 }, 'errorBodyChars');
  });

  it('refuses static headers that would replace framing or protocol headers', () => {
    configError({ endpoints: { a: 'http://127.0.0.1/' }, headers: { 'Content-Length': '1' } }, 'headers.Content-Length', /set by txbox/);
    configError({ endpoints: { a: 'http://127.0.0.1/' }, headers: { 'webhook-id': 'x' } }, 'headers.webhook-id');
    configError({ endpoints: { a: 'http://127.0.0.1/' }, headers: { 'ce-source': 'x' } }, 'headers.ce-source');
    configError({ endpoints: { a: 'http://127.0.0.1/' }, headers: { 'bad name': 'x' } }, 'headers.bad name', /not a valid header name/);
    configError({ endpoints: { a: 'http://127.0.0.1/' }, headers: { 'x-a': 'v\r\nx-b: injected' } }, 'headers.x-a', /control characters/);
    const o = resolveHttpTransportOptions({ endpoints: { a: 'http://127.0.0.1/' }, allowUnsigned: true, headers: { Authorization: 'Bearer t' } });
    assert.equal(o.headers['authorization'], 'Bearer t');
  });

  it('checks the secret', () => {
    configError({ endpoints: { a: 'http://127.0.0.1/' }, secret: 'tiny' }, 'secret', /at least 16 random bytes/);
  });

  it('encodes ce-source as the CloudEvents HTTP binding requires', () => {
    configError({ endpoints: { a: 'http://127.0.0.1/' }, source: '' }, 'source');
    const o = resolveHttpTransportOptions({ endpoints: { a: 'http://127.0.0.1/' }, allowUnsigned: true, source: 'urn:svc:ördérs 100%' });
    assert.equal(o.source, 'urn:svc:%C3%B6rd%C3%A9rs%20100%25');
  });

  it('throws from the HttpTransport constructor', () => {
    assert.throws(() => new HttpTransport({ endpoints: { orders: 'mailto:someone@example.com' } }), ConfigError);
  });
});
