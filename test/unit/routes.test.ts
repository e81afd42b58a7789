import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { StoredEvent } from '../../src/core/envelope.ts';
import { TransportError } from '../../src/core/errors.ts';
import type { PublishOutcome, Transport } from '../../src/core/ports.ts';
import { publishToRoutes, resolveRoutes } from '../../src/relay/routes.ts';

const stored = (n: number, routesDone: string[] = []): StoredEvent => ({
  seq: n, id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`, type: 'T', aggregateType: 'A', aggregateId: String(n), key: `A:${n}`,
  destination: 'd', payload: null, headers: {}, occurredAt: new Date(0), version: null, bucket: 0, attempts: 0, routesDone,
});

function transport(answer: (events: readonly StoredEvent[]) => PublishOutcome[] | Promise<PublishOutcome[]>): Transport & { calls: StoredEvent[][] } {
  const calls: StoredEvent[][] = [];
  return { name: 't', calls, publish: async (events) => { calls.push([...(events as StoredEvent[])]); return answer(events as StoredEvent[]); }, close: async () => {} };
}

describe('publishToRoutes with one route for every event', () => {
  const failed = new TransportError('retriable', 'boom');
  const call = (t: Transport, events: StoredEvent[]) => t.publish(events, new AbortController().signal);

  it('gives each event its outcome: acked by the route, or the error with nothing acked', async () => {
    const t = transport((events) => events.map((e) => (e.seq === 2 ? { ok: false, error: failed } : { ok: true })));
    const wave = [stored(1), stored(2), stored(3)];
    const out = await publishToRoutes(wave, resolveRoutes(t, undefined), call);
    assert.deepEqual(out, [{ ok: true, acked: ['default'] }, { ok: false, acked: [], error: failed }, { ok: true, acked: ['default'] }]);
    assert.deepEqual(t.calls, [wave], 'one call with the whole wave, in order');
    assert.notEqual(t.calls[0], wave, 'the transport gets its own array');
  });

  it('turns a call that throws into a failure of every event', async () => {
    const t = transport(() => {
      throw new TransportError('permanent', 'refused');
    });
    const out = await publishToRoutes([stored(1), stored(2)], resolveRoutes(t, undefined), call);
    assert.equal(out.length, 2);
    for (const o of out) assert.deepEqual([o.ok, o.acked, o.error?.kind, o.error?.message], [false, [], 'permanent', 'refused']);
  });

  it('does not send an event again to a route it was published to (the general path), and sends the rest', async () => {
    const t = transport((events) => events.map(() => ({ ok: true })));
    const out = await publishToRoutes([stored(1, ['default']), stored(2)], resolveRoutes(t, undefined), call);
    assert.deepEqual(out, [{ ok: true, acked: [] }, { ok: true, acked: ['default'] }]);
    assert.deepEqual(t.calls.map((c) => c.map((e) => e.seq)), [[2]]);
  });

  it('answers an empty wave without a call', async () => {
    const t = transport(() => []);
    assert.deepEqual(await publishToRoutes([], resolveRoutes(t, undefined), call), []);
    assert.equal(t.calls.length, 0);
  });
});
