import assert from 'node:assert/strict';
import { createSecretKey } from 'node:crypto';
import { describe, it } from 'node:test';
import { ConfigError } from 'txbox';
import { generateWebhookSecret, signWebhook, verifyWebhook, webhookKey } from 'txbox/http';

// The example from the Standard Webhooks specification.
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const ID = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
const TS = 1614265330;
const BODY = '{"test": 2432232314}';
const SIGNATURE = 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=';

const headers = (signature: string, ts: number | string = TS, id = ID) => ({
  'webhook-id': id,
  'webhook-timestamp': String(ts),
  'webhook-signature': signature,
});

describe('Standard Webhooks signatures', () => {
  it('signs the specification example', () => {
    assert.equal(signWebhook(SECRET, ID, TS, BODY), SIGNATURE);
    assert.equal(signWebhook(SECRET, ID, String(TS), Buffer.from(BODY)), SIGNATURE);
  });

  it('treats raw bytes, the decoded whsec_ bytes and a KeyObject alike', () => {
    const raw = Buffer.from('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'base64');
    assert.equal(signWebhook(new Uint8Array(raw), ID, TS, BODY), SIGNATURE);
    assert.equal(signWebhook(createSecretKey(raw), ID, TS, BODY), SIGNATURE);
    assert.equal(signWebhook(webhookKey(SECRET), ID, TS, BODY), SIGNATURE);
  });

  it('uses a string without the whsec_ prefix as its UTF-8 bytes', () => {
    const text = 'a-plain-shared-secret-of-some-length';
    assert.equal(signWebhook(text, ID, TS, BODY), signWebhook(Buffer.from(text, 'utf8'), ID, TS, BODY));
    assert.notEqual(signWebhook(text, ID, TS, BODY), SIGNATURE);
  });

  it('verifies the specification example', () => {
    const result = verifyWebhook({ secret: SECRET, headers: headers(SIGNATURE), body: BODY, nowSeconds: TS + 10 });
    assert.deepEqual(result, { ok: true, id: ID, timestamp: TS });
  });

  it('accepts any listed signature and skips unknown versions', () => {
    const list = `v1a,abcd v1,${Buffer.alloc(32).toString('base64')} ${SIGNATURE}`;
    assert.equal(verifyWebhook({ secret: SECRET, headers: headers(list), body: BODY, nowSeconds: TS }).ok, true);
  });

  it('accepts any of several secrets (rotation)', () => {
    const result = verifyWebhook({ secret: [generateWebhookSecret(), SECRET], headers: headers(SIGNATURE), body: BODY, nowSeconds: TS });
    assert.equal(result.ok, true);
  });

  it('rejects a changed body, id, timestamp or secret', () => {
    const cases = [
      { secret: SECRET, headers: headers(SIGNATURE), body: '{"test": 2432232315}' },
      { secret: SECRET, headers: headers(SIGNATURE, TS, 'msg_other'), body: BODY },
      { secret: SECRET, headers: headers(SIGNATURE, TS + 1), body: BODY },
      { secret: generateWebhookSecret(), headers: headers(SIGNATURE), body: BODY },
    ];
    for (const c of cases) {
      const result = verifyWebhook({ ...c, nowSeconds: TS });
      assert.equal(result.ok, false);
      assert.equal(!result.ok && result.reason, 'invalid-signature');
    }
  });

  it('rejects stale and future timestamps outside the tolerance', () => {
    const stale = verifyWebhook({ secret: SECRET, headers: headers(SIGNATURE), body: BODY, nowSeconds: TS + 301 });
    assert.equal(!stale.ok && stale.reason, 'stale-timestamp');
    const future = verifyWebhook({ secret: SECRET, headers: headers(SIGNATURE), body: BODY, nowSeconds: TS - 301 });
    assert.equal(!future.ok && future.reason, 'stale-timestamp');
    const wide = verifyWebhook({ secret: SECRET, headers: headers(SIGNATURE), body: BODY, nowSeconds: TS + 3000, toleranceSeconds: 3600 });
    assert.equal(wide.ok, true);
  });

  it('refuses a tolerance or a clock that is not a number (NaN from an unset variable) instead of skipping the freshness check', () => {
    // Signed in 2021: only a check that was skipped lets it through.
    for (const bad of [{ toleranceSeconds: Number.NaN }, { toleranceSeconds: -1 }, { toleranceSeconds: Number(process.env.TXBOX_UNSET_FOR_TEST) }, { nowSeconds: Number.NaN }]) {
      assert.throws(
        () => verifyWebhook({ secret: SECRET, headers: headers(SIGNATURE), body: BODY, ...bad }),
        (e: unknown) => e instanceof ConfigError && /toleranceSeconds|nowSeconds/.test(e.field),
        JSON.stringify(bad),
      );
    }
  });

  it('rejects missing headers and a malformed timestamp', () => {
    const missing = verifyWebhook({ secret: SECRET, headers: { 'webhook-id': ID }, body: BODY });
    assert.equal(!missing.ok && missing.reason, 'missing-headers');
    const malformed = verifyWebhook({ secret: SECRET, headers: headers(SIGNATURE, '16142x'), body: BODY });
    assert.equal(!malformed.ok && malformed.reason, 'invalid-timestamp');
  });

  it('refuses malformed and short secrets with a ConfigError naming the field', () => {
    assert.throws(() => webhookKey('whsec_not*base64!'), (e: unknown) => e instanceof ConfigError && e.field === 'secret');
    assert.throws(() => webhookKey('short', 'receiver.secret'), (e: unknown) => e instanceof ConfigError && e.field === 'receiver.secret' && /at least 16/.test(e.message));
    assert.throws(() => webhookKey('whsec_'), ConfigError);
  });

  it('generates 24-byte whsec_ secrets that round-trip', () => {
    const secret = generateWebhookSecret();
    assert.match(secret, /^whsec_[A-Za-z0-9+/]{32}$/);
    const signature = signWebhook(secret, ID, TS, BODY);
    assert.equal(verifyWebhook({ secret, headers: headers(signature), body: BODY, nowSeconds: TS }).ok, true);
  });
});
