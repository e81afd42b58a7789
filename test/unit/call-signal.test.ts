import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { CallSignal } from '../../src/relay/call-signal.ts';

describe('CallSignal (one publish call: stop, timeout, lease deadline)', () => {
  it('aborts at once with cause lease when the deadline has passed, and no send should start', () => {
    const call = new CallSignal(new AbortController().signal, 10_000, () => performance.now() - 1);
    assert.equal(call.signal.aborted, true);
    assert.equal(call.cause, 'lease');
  });

  it('aborts with cause stop when the relay stops now, and not after dispose', () => {
    const parent = new AbortController();
    const a = new CallSignal(parent.signal, 10_000, () => Infinity);
    const b = new CallSignal(parent.signal, 10_000, () => Infinity);
    b.dispose();
    parent.abort(new Error('stop now'));
    assert.deepEqual([a.signal.aborted, a.cause], [true, 'stop']);
    assert.deepEqual([b.signal.aborted, b.cause], [false, undefined]);
  });

  it('aborts with cause timeout when the lease holds', async () => {
    const call = new CallSignal(new AbortController().signal, 5, () => Infinity);
    await once(call.signal, 'abort');
    assert.equal(call.cause, 'timeout');
  });

  it('reads the deadline again when its timer fires: a renewal that moved it keeps the call alive', async () => {
    let reads = 0;
    const first = performance.now() + 5;
    const call = new CallSignal(new AbortController().signal, 40, () => (reads++ === 0 ? first : Infinity));
    await once(call.signal, 'abort');
    assert.equal(call.cause, 'timeout');
    assert.ok(reads >= 2);
  });

  it('aborts with cause lease when the deadline passes during the call', async () => {
    const deadline = performance.now() + 5;
    const call = new CallSignal(new AbortController().signal, 60_000, () => deadline);
    await once(call.signal, 'abort');
    assert.equal(call.cause, 'lease');
  });
});
