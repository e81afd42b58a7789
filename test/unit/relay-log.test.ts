/** The relay's logs (RelayLog), with an injected logger and no timers: pure. */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { TypedEmitter } from '../../src/core/emitter.ts';
import type { Logger } from '../../src/core/logger.ts';
import type { RelayEvents } from '../../src/relay/relay.ts';
import { RelayLog, type RelayLogOptions } from '../../src/relay/relay-log.ts';
import { resolveRelayOptions } from '../../src/relay/relay-options.ts';
import type { RelayStore, Transport } from '../../src/core/ports.ts';

class Source extends TypedEmitter<RelayEvents> {
  fire<K extends keyof RelayEvents>(name: K, payload: RelayEvents[K]): void {
    this.emit(name, payload);
  }
}

interface Line {
  level: keyof Logger;
  obj: Record<string, unknown>;
  msg: string | undefined;
}

function recorder(): { logger: Logger; lines: Line[] } {
  const lines: Line[] = [];
  const at =
    (level: keyof Logger) =>
    (obj: object, msg?: string): void =>
      void lines.push({ level, obj: obj as Record<string, unknown>, msg });
  return { logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, lines };
}

function setup(extra: Partial<RelayLogOptions> = {}) {
  const source = new Source();
  const { logger, lines } = recorder();
  const log = new RelayLog(source, { logger, relayId: 'r1', summaryIntervalMs: 0, snapshot: () => ({ leasesHeld: 128, inFlight: 7 }), ...extra });
  return { source, lines, log };
}

const batch = (published: number, extra: Partial<RelayEvents['batch']> = {}): RelayEvents['batch'] => ({
  lane: 1,
  claimed: published,
  published,
  retried: 0,
  parked: 0,
  rejected: 0,
  durationMs: 12.345,
  ...extra,
});

it('logs each batch at debug with lane, counts and duration, and nothing else', () => {
  const { source, lines } = setup();
  source.fire('batch', batch(500, { claimed: 503, retried: 2, parked: 1 }));
  assert.deepEqual(lines, [
    {
      level: 'debug',
      msg: 'txbox relay batch',
      obj: { relayId: 'r1', lane: 1, claimed: 503, published: 500, retried: 2, parked: 1, rejected: 0, durationMs: 12.3 },
    },
  ]);
});

it('the summary reports published since the last one, its rate, backlog, parked and leases held, then starts a new period', async () => {
  const { source, lines, log } = setup({ backlog: async () => ({ pending: 4200, parked: 3 }) });
  const t0 = performance.now();
  log.start(); // summaryIntervalMs 0: no timer, only the period's start
  source.fire('batch', batch(500));
  source.fire('batch', batch(100, { claimed: 102, retried: 2 }));
  const s = await log.summarize(t0 + 60_000);
  assert.equal(s.published, 600);
  assert.equal(s.batches, 2);
  assert.equal(s.retried, 2);
  assert.ok(s.intervalSeconds >= 59.9 && s.intervalSeconds <= 60.1, String(s.intervalSeconds));
  assert.ok(s.ratePerSecond >= 9.9 && s.ratePerSecond <= 10.1, String(s.ratePerSecond));
  assert.equal(s.backlog, 4200);
  assert.equal(s.parkedTotal, 3);
  assert.equal(s.leasesHeld, 128);
  assert.equal(s.inFlight, 7);
  const info = lines.filter((l) => l.level === 'info');
  assert.equal(info.length, 1);
  assert.equal(info[0]!.msg, 'txbox relay summary');
  assert.equal(info[0]!.obj.published, 600);
  const next = await log.summarize(t0 + 120_000);
  assert.equal(next.published, 0, 'a new period starts after each summary');
  assert.equal(next.ratePerSecond, 0);
});

it('a failing backlog count does not stop the summary: it logs null counts and the error', async () => {
  const { lines, log } = setup({
    backlog: async () => {
      throw new Error('connection terminated');
    },
  });
  const s = await log.summarize();
  assert.equal(s.backlog, null);
  assert.equal(s.parkedTotal, null);
  assert.equal(lines[0]!.obj.backlogError, 'connection terminated');
});

it('a store without a backlog count: the summary says null', async () => {
  const { log } = setup();
  const s = await log.summarize();
  assert.equal(s.backlog, null);
});

it('retries and parked events log key hashes from the event, never a key or payload field of their own', () => {
  const { source, lines } = setup();
  source.fire('retry', { id: 'e1', type: 'T', keyHash: 'abcd1234', attempts: 1, delayMs: 500, error: 'HTTP 503' });
  source.fire('parked', { id: 'e2', type: 'T', keyHash: 'abcd1234', attempts: 12, error: 'HTTP 400' });
  assert.deepEqual(lines.map((l) => [l.level, l.msg]), [
    ['warn', 'txbox relay: publish failed, will retry'],
    ['error', 'txbox relay: event parked'],
  ]);
  for (const l of lines) assert.ok(!('key' in l.obj) && !('payload' in l.obj));
});

it('logSummaryIntervalMs: default one minute, 0 turns it off, bad values name the field', () => {
  const store = { claim: async () => [] } as unknown as RelayStore;
  const transport = { name: 'x', publish: async () => [], close: async () => {} } as unknown as Transport;
  assert.equal(resolveRelayOptions({ store, transport }).logSummaryIntervalMs, 60_000);
  assert.equal(resolveRelayOptions({ store, transport, logSummaryIntervalMs: 0 }).logSummaryIntervalMs, 0);
  assert.throws(() => resolveRelayOptions({ store, transport, logSummaryIntervalMs: -1 }), /logSummaryIntervalMs/);
  assert.throws(() => resolveRelayOptions({ store, transport, logSummaryIntervalMs: 1.5 }), /logSummaryIntervalMs/);
});
