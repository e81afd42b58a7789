import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Completion, RelayStore } from 'txbox';
import { scrubErrorText } from '../../src/core/error-text.ts';
import { completeIsolating, isDeterministicStoreError } from '../../src/relay/complete-isolating.ts';

describe('scrubErrorText', () => {
  it('replaces NUL and lone surrogates, keeps pairs, caps the length without splitting a pair', () => {
    assert.equal(scrubErrorText('a\u0000b'), 'a\uFFFDb');
    assert.equal(scrubErrorText('x\ud800y\udc00z'), 'x\uFFFDy\uFFFDz');
    assert.equal(scrubErrorText('ok 😀 fine'), 'ok 😀 fine');
    assert.equal(scrubErrorText('ab😀', 3), 'ab');
    assert.equal(scrubErrorText('x'.repeat(5000)).length, 2000);
    assert.equal(scrubErrorText('plain'), 'plain');
  });
});

/** A pure unit: a store whose complete fails by rule, recording what it took. */
function store(fail: (part: readonly Completion[]) => Error | undefined) {
  const taken: Completion[] = [];
  let calls = 0;
  const s = {
    taken,
    get calls() {
      return calls;
    },
    complete: async (_relay: string, part: readonly Completion[]) => {
      calls++;
      const e = fail(part);
      if (e) throw e;
      taken.push(...part);
      return { applied: part.length, rejected: 0 };
    },
  };
  return s;
}
const sql = (code: string) => Object.assign(new Error(`sqlstate ${code}`), { code });
const published = (n: number): Completion[] => Array.from({ length: n }, (_, i) => ({ seq: i + 1, token: '1', outcome: 'published' as const }));
const ctx = (s: ReturnType<typeof store>, errors: Error[] = []) => ({
  store: s as unknown as RelayStore,
  relayId: 'r',
  signal: new AbortController().signal,
  attempts: 2,
  onError: (e: Error) => errors.push(e),
});

describe('completeIsolating', () => {
  it('classifies SQLSTATE data/constraint errors as deterministic, connection errors and plain errors not', () => {
    assert.equal(isDeterministicStoreError(sql('22P05')), true);
    assert.equal(isDeterministicStoreError(sql('23505')), true);
    assert.equal(isDeterministicStoreError(sql('08006')), false);
    assert.equal(isDeterministicStoreError(sql('40001')), false);
    assert.equal(isDeterministicStoreError(Object.assign(new Error('x'), { code: 'EPIPE' })), false);
    assert.equal(isDeterministicStoreError(new Error('Connection terminated')), false);
  });

  it('bisects to the refused completions, marks the rest, parks the culprits with the reason', async () => {
    const s = store((part) => (part.some((c) => (c.seq === 37 || c.seq === 80) && c.outcome === 'published') ? sql('22P05') : undefined));
    const r = await completeIsolating(published(100), ctx(s));
    assert.equal(r.unmarked, 0);
    assert.deepEqual(r.isolated.map((c) => c.seq), [37, 80]);
    assert.match(r.isolated[0]!.error, /acked by the transport but could not be marked published: sqlstate 22P05/);
    assert.equal(s.taken.length, 100);
    assert.ok(s.calls < 40, `${s.calls} statements`);
  });

  it('a transient failure is retried as a whole, then left pending, never bisected or parked', async () => {
    const errors: Error[] = [];
    const s = store(() => new Error('Connection terminated unexpectedly'));
    const r = await completeIsolating(published(10), ctx(s, errors));
    assert.deepEqual([r.unmarked, r.isolated.length, s.calls, errors.length], [10, 0, 2, 2]);
  });

  it('stops isolating when the store refuses even the fixed-text park (the fault is not the completion)', async () => {
    const s = store(() => sql('42P01'));
    const r = await completeIsolating(published(64), ctx(s));
    assert.deepEqual([r.unmarked, r.isolated.length], [64, 0]);
    assert.ok(s.calls <= 12, `${s.calls} statements`);
  });
});
