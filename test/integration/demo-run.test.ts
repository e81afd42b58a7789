/**
 * `txbox demo`'s run (runDemo) when a simulated relay crash cannot restart the
 * relay: the run must fail with that error. The restart ran in a timer's
 * fire-and-forget task: its failure was an unhandled rejection (the process
 * died), its "crashing" flag stayed set, and the run waited for it for ever;
 * after a writer's failure the crash timer also went on starting relays
 * against the closed database.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import type { OutboxEvent, PublishOutcome, Transport } from 'txbox';
import { runDemo } from '../../src/cli/demo/demo-run.ts';
import type { Arrival, Deliver, DemoSink } from '../../src/cli/demo/demo-sink.ts';

/** An in-process sink whose `failFrom`-th transport (1-based) and later refuse to start. */
function sink(failFrom: number): DemoSink & { transports: number } {
  const arrivals: Arrival[] = [];
  let deliver: Deliver = async () => {};
  const s = {
    name: 'in-process (test)',
    arrivals,
    transports: 0,
    async start(d: Deliver) {
      deliver = d;
    },
    transport(): Transport {
      const n = ++s.transports;
      return {
        name: 'test',
        async start() {
          if (n >= failFrom) throw new Error(`transport ${n} refuses to start`);
        },
        async publish(events: readonly OutboxEvent[]): Promise<PublishOutcome[]> {
          for (const e of events) {
            await deliver(e);
            arrivals.push({ id: e.id, key: e.key, at: performance.now() });
          }
          return events.map(() => ({ ok: true as const }));
        },
        async close() {},
      };
    },
    relayTransport: () => ({ type: 'test' }),
    async close() {},
  };
  return s;
}

it('a relay that cannot be restarted after a simulated crash fails the run with its error: no unhandled rejection, no wait for ever', { timeout: 60_000 }, async () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    const s = sink(3);
    await assert.rejects(
      runDemo({ events: 100_000, writers: 2, rollbackRate: 0, crashEveryMs: 50, databaseUrl: undefined, sink: s, onProgress: () => {} }),
      /transport 3 refuses to start/,
    );
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(unhandled, []);
    const made = s.transports;
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(s.transports, made, 'no relay is started after the run ended');
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
});
