import { it } from 'node:test';
import assert from 'node:assert/strict';
import { resolveRetryOptions, retryDelay, ConfigError } from 'txbox';

it('backs off exponentially with jitter up to the cap and honours Retry-After', () => {
  const o = resolveRetryOptions({ baseDelayMs: 100, maxDelayMs: 1000, maxAttempts: 5 });
  assert.equal(retryDelay(o, 1, 0, () => 0), 50);
  assert.equal(retryDelay(o, 1, 0, () => 1), 100);
  assert.equal(retryDelay(o, 3, 0, () => 1), 400);
  assert.equal(retryDelay(o, 10, 0, () => 1), 1000, 'capped');
  assert.equal(retryDelay(o, 1, 3000, () => 0), 3000, 'a requested delay is a floor');
  for (let i = 0; i < 100; i++) {
    const d = retryDelay(o, 2);
    assert.ok(d >= 100 && d <= 200);
  }
  assert.throws(() => resolveRetryOptions({ baseDelayMs: 10, maxDelayMs: 5 }), (e: unknown) => e instanceof ConfigError && e.field === 'retry.maxDelayMs');
});

it('a requested delay that is not a whole number (a custom transport\'s retryAfterMs) gives a whole number of ms; NaN is ignored', () => {
  const o = resolveRetryOptions({ baseDelayMs: 100, maxDelayMs: 1000 });
  assert.equal(retryDelay(o, 1, 1500.5, () => 0), 1501);
  assert.equal(retryDelay(o, 1, Number.NaN, () => 0), 50);
});
