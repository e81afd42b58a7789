/**
 * SqsBatcher (pure, a fake request): the entries of DeleteMessageBatch and
 * ChangeMessageVisibilityBatch collected across settles. Ten go at once; a
 * partial batch goes at the end of the turn when nothing is in flight, else
 * when the request in flight answers; flush() sends what waits and waits for
 * every request. Also the consumer's receiveConcurrency option (default and
 * range).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setImmediate as turn } from 'node:timers/promises';
import { ConfigError, createInbox } from 'txbox';
import { resolveSqsConsumerOptions } from 'txbox/sqs';
import { SqsBatcher } from '../../src/transports/sqs/sqs-batcher.ts';

/** A request function whose calls answer only when the test says so. */
function gatedRequests(): { calls: number[][]; send: (entries: number[]) => Promise<void>; answer(i: number): void } {
  const calls: number[][] = [];
  const gates: (() => void)[] = [];
  return {
    calls,
    send: (entries) => {
      calls.push(entries);
      return new Promise<void>((resolve) => gates.push(resolve));
    },
    answer: (i) => gates[i]!(),
  };
}

describe('SqsBatcher', () => {
  it('an idle batcher sends a partial batch at the end of the turn: the entries of one turn go together', async () => {
    const r = gatedRequests();
    const b = new SqsBatcher(r.send);
    b.add(1);
    b.add(2);
    b.add(3);
    assert.equal(r.calls.length, 0, 'nothing before the end of the turn');
    await turn();
    assert.deepEqual(r.calls, [[1, 2, 3]]);
    r.answer(0);
    await b.flush();
  });

  it('ten go at once; while a request is in flight a partial batch waits for its answer and collects what comes meanwhile', async () => {
    const r = gatedRequests();
    const b = new SqsBatcher(r.send);
    b.add(0);
    await turn();
    assert.deepEqual(r.calls, [[0]]);
    // Settles in separate turns while the first request is in flight.
    for (let i = 1; i <= 13; i++) {
      b.add(i);
      await turn();
    }
    assert.deepEqual(r.calls, [[0], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]], 'a full batch does not wait; the partial one does');
    assert.equal(b.waiting, 3);
    r.answer(0);
    await turn();
    assert.deepEqual(r.calls.length, 2, 'still one request in flight: the partial batch waits');
    r.answer(1);
    await turn();
    await turn();
    assert.deepEqual(r.calls.at(-1), [11, 12, 13], 'sent when the last request in flight answered');
    r.answer(2);
    await b.flush();
    assert.equal(b.inFlight, 0);
  });

  it('flush() sends what waits, in batches of 10, and resolves only after every request answered', async () => {
    const r = gatedRequests();
    const b = new SqsBatcher(r.send);
    b.add(0);
    await turn();
    for (let i = 1; i <= 12; i++) b.add(i);
    let flushed = false;
    const flush = b.flush().then(() => (flushed = true));
    assert.deepEqual(r.calls, [[0], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [11, 12]]);
    r.answer(0);
    r.answer(1);
    await turn();
    assert.equal(flushed, false, 'a request is still in flight');
    r.answer(2);
    await flush;
    assert.equal(flushed, true);
  });

  it('a request that fails does not stop the next ones', async () => {
    const calls: number[][] = [];
    const b = new SqsBatcher<number>(async (entries) => {
      calls.push(entries);
      if (calls.length === 1) throw new Error('network');
    });
    b.add(1);
    await turn();
    b.add(2);
    await b.flush();
    assert.deepEqual(calls, [[1], [2]]);
  });

  it('receiveConcurrency: 3 by default, 1-100, a ConfigError naming it otherwise', () => {
    const base = { queueUrl: 'http://127.0.0.1:9324/000000000000/orders.fifo', region: 'us-east-1', inbox: createInbox({ store: { runBatch: async () => ({ ran: [], heldKeys: [] }) } as never, consumer: 'c', autoStart: false }) };
    assert.equal(resolveSqsConsumerOptions(base).receiveConcurrency, 3);
    assert.equal(resolveSqsConsumerOptions({ ...base, receiveConcurrency: 1 }).receiveConcurrency, 1);
    for (const bad of [0, 101, 2.5]) {
      assert.throws(() => resolveSqsConsumerOptions({ ...base, receiveConcurrency: bad }), (err: unknown) => err instanceof ConfigError && /receiveConcurrency/.test(err.message));
    }
  });
});
