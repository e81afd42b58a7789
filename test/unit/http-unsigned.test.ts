/**
 * Unsigned by accident (issue 11 item 8): a missing secret is refused unless
 * `allowUnsigned: true` says so, with an error that says how to make one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError } from 'txbox';
import { HttpTransport, createWebhookConsumer, createWebhookReceiver, resolveHttpTransportOptions, generateWebhookSecret } from 'txbox/http';
import type { Inbox } from '../../src/inbox/inbox.ts';

const endpoints = { orders: 'https://hooks.example.com/orders' };
const unsetEnv: string | undefined = process.env.TXBOX_TEST_SURELY_UNSET_SECRET;

function refusesUnsigned(fn: () => unknown): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof ConfigError, `expected ConfigError, got ${String(e)}`);
    assert.equal(e.field, 'secret');
    assert.equal(e.code, 'TXBOX_CONFIG');
    assert.match(e.message, /npx txbox secret/);
    assert.match(e.message, /allowUnsigned: true/);
    return true;
  });
}

describe('HTTP without a secret', () => {
  it('HttpTransport refuses to construct without a secret (an unset environment variable included)', () => {
    refusesUnsigned(() => resolveHttpTransportOptions({ endpoints }));
    refusesUnsigned(() => new HttpTransport({ endpoints, secret: unsetEnv }));
  });

  it('HttpTransport sends unsigned only when told allowUnsigned: true', () => {
    assert.equal(resolveHttpTransportOptions({ endpoints, allowUnsigned: true }).signingKey, null);
    assert.notEqual(resolveHttpTransportOptions({ endpoints, secret: generateWebhookSecret() }).signingKey, null);
    assert.throws(
      () => resolveHttpTransportOptions({ endpoints, allowUnsigned: 'yes' as unknown as boolean }),
      (e: unknown) => e instanceof ConfigError && e.field === 'allowUnsigned',
    );
  });

  it('the webhook receiver refuses to be created without a secret unless allowUnsigned: true', () => {
    refusesUnsigned(() => createWebhookReceiver({ onEvent() {} }));
    refusesUnsigned(() => createWebhookReceiver({ onEvent() {}, secret: unsetEnv }));
    assert.equal(typeof createWebhookReceiver({ onEvent() {}, allowUnsigned: true }), 'function');
  });

  it('the webhook consumer refuses to be created without a secret unless allowUnsigned: true', () => {
    const inbox = { process: async () => ({ status: 'processed' }) } as unknown as Inbox;
    refusesUnsigned(() => createWebhookConsumer({ inbox, secret: unsetEnv }));
    assert.equal(typeof createWebhookConsumer({ inbox, allowUnsigned: true }), 'function');
  });
});
