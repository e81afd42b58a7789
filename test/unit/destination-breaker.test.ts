import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DestinationBreakers, type CircuitChange } from '../../src/relay/destination-breaker.ts';
import { resolveRelayOptions } from '../../src/relay/relay-options.ts';
import { ConfigError, type RelayStore, type Transport } from 'txbox';

function breakers(random = 1) {
  const clock = { now: 1_000_000 };
  const changes: CircuitChange[] = [];
  const b = new DestinationBreakers(
    { baseDelayMs: 100, maxDelayMs: 1000 },
    { probeTimeoutMs: 5000, onChange: (c) => void changes.push(c), now: () => clock.now, random: () => random },
  );
  return { b, clock, changes };
}

describe('DestinationBreakers', () => {
  it('sends while closed; opens once on the first down answer and holds until the pause is over', () => {
    const { b, clock, changes } = breakers();
    assert.equal(b.admit('billing'), 'send');
    b.down('billing', 'HTTP 401', false);
    b.down('billing', 'HTTP 401', false); // another event of the same wave: no second opening
    assert.deepEqual(changes.map((c) => c.state), ['open']);
    assert.equal(b.admit('billing'), 'hold');
    assert.equal(b.admit('orders'), 'send', 'other destinations are not affected');
    assert.equal(b.holdMs('billing'), 100);
    clock.now += 100;
    assert.equal(b.admit('billing'), 'probe');
    assert.equal(b.admit('billing'), 'hold', 'one probe at a time');
    assert.deepEqual(b.open().map((c) => [c.destination, c.reason, c.failedProbes]), [['billing', 'HTTP 401', 0]]);
  });

  it('doubles the pause after each failed probe up to maxDelayMs, and closes on success', () => {
    const { b, clock, changes } = breakers();
    b.down('billing', 'ECONNREFUSED', false);
    const pauses: number[] = [];
    for (let i = 0; i < 6; i++) {
      clock.now = b.open()[0]!.nextProbeAt.getTime();
      assert.equal(b.admit('billing'), 'probe');
      const before = clock.now;
      b.down('billing', 'ECONNREFUSED', true);
      pauses.push(b.open()[0]!.nextProbeAt.getTime() - before);
    }
    assert.deepEqual(pauses, [200, 400, 800, 1000, 1000, 1000]);
    b.up('billing');
    assert.equal(b.admit('billing'), 'send');
    assert.deepEqual(b.open(), []);
    assert.deepEqual(changes.map((c) => c.state), ['open', ...Array(6).fill('probe-failed'), 'closed']);
  });

  it('jitters the pause between half and all of it', () => {
    const { b } = breakers(0);
    b.down('x', 'r', false);
    const c = b.open()[0]!;
    assert.equal(c.nextProbeAt.getTime() - c.openSince.getTime(), 50);
  });

  it('a probe that ends without a verdict, or never reports, does not wedge the destination', () => {
    const { b, clock } = breakers();
    b.down('billing', 'HTTP 404', false);
    clock.now += 100;
    assert.equal(b.admit('billing'), 'probe');
    b.probeEnded('billing'); // e.g. the probe's event got a 500: retried as usual
    assert.equal(b.admit('billing'), 'hold');
    clock.now += 100;
    assert.equal(b.admit('billing'), 'probe');
    clock.now += 5000; // that probe was lost (relay stopping, lease moved)
    assert.equal(b.admit('billing'), 'probe');
  });
});

describe('RelayOptions.circuitBreaker', () => {
  const store = { claim: async () => [] } as unknown as RelayStore;
  const transport = { name: 't', publish: async () => [], close: async () => {} } as unknown as Transport;
  it('defaults to 1 s doubling to 1 min and names bad fields', () => {
    assert.deepEqual({ ...resolveRelayOptions({ store, transport }).circuitBreaker }, { baseDelayMs: 1000, maxDelayMs: 60_000 });
    assert.throws(() => resolveRelayOptions({ store, transport, circuitBreaker: { baseDelayMs: 0 } }), (e: unknown) => e instanceof ConfigError && e.field === 'circuitBreaker.baseDelayMs');
    assert.throws(
      () => resolveRelayOptions({ store, transport, circuitBreaker: { baseDelayMs: 500, maxDelayMs: 100 } }),
      (e: unknown) => e instanceof ConfigError && e.field === 'circuitBreaker.maxDelayMs',
    );
  });
});
