import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { parseDuration } from '../../src/core/duration.ts';
import { ConfigError } from '../../src/core/errors.ts';

describe('parseDuration', () => {
  it('reads a number with a unit, and parts from the largest unit down', () => {
    assert.equal(parseDuration('500ms', 'x'), 500);
    assert.equal(parseDuration('30s', 'x'), 30_000);
    assert.equal(parseDuration('5m', 'x'), 300_000);
    assert.equal(parseDuration('24h', 'x'), 86_400_000);
    assert.equal(parseDuration('7d', 'x'), 604_800_000);
    assert.equal(parseDuration('1h30m', 'x'), 5_400_000);
    assert.equal(parseDuration('1.5s', 'x'), 1500);
    assert.equal(parseDuration(' 0s ', 'x'), 0);
  });

  it('refuses a bare number, naming the flag or variable as written and an example', () => {
    assert.throws(() => parseDuration('7', '--older-than'), (e: unknown) => e instanceof ConfigError && e.field === '--older-than' && e.message.startsWith('--older-than 7: give a unit, e.g. --older-than 7d'));
    assert.throws(() => parseDuration('7', 'TXBOX_KEEP_PUBLISHED'), (e: unknown) => e instanceof ConfigError && e.message.startsWith('TXBOX_KEEP_PUBLISHED=7: give a unit, e.g. TXBOX_KEEP_PUBLISHED=7d'));
  });

  it('refuses what is not a duration', () => {
    for (const bad of ['', 'a week', '7 d', '30m1h', '1h1h', '-5s', '5x', 'ms']) {
      assert.throws(() => parseDuration(bad, '--older-than'), (e: unknown) => e instanceof ConfigError && /not a duration/.test(e.message), bad);
    }
  });
});
