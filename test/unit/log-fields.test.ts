/**
 * The logs documented in docs/operations.md ("Logs") are what a pino-shaped
 * logger receives: the relay's, the inbox's and the CLI's JSON logger, each
 * message with its level and exactly its documented fields. Pure: the relay's
 * logs are driven through its events, the inbox through a store double.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createInbox, type InboxStore, type Logger, type OutboxEvent } from 'txbox';
import { TypedEmitter } from '../../src/core/emitter.ts';
import { InboxBatchError } from '../../src/core/inbox-ports.ts';
import { jsonLogger } from '../../src/cli/json-logger.ts';
import type { RelayEvents } from '../../src/relay/relay.ts';
import { RelayLog } from '../../src/relay/relay-log.ts';

/** pino's log method: `(obj, msg?, ...args)` or `(msg, ...args)`. */
interface PinoLogFn {
  <T extends object>(obj: T, msg?: string, ...args: unknown[]): void;
  (obj: unknown, msg?: string, ...args: unknown[]): void;
  (msg: string, ...args: unknown[]): void;
}
/** The part of pino's Logger type txbox can meet: what `pino()` returns has these members. */
interface PinoShaped {
  level: string;
  fatal: PinoLogFn;
  error: PinoLogFn;
  warn: PinoLogFn;
  info: PinoLogFn;
  debug: PinoLogFn;
  trace: PinoLogFn;
  silent: PinoLogFn;
  child(bindings: Record<string, unknown>): PinoShaped;
}

interface Line {
  level: string;
  fields: Record<string, unknown>;
  msg: string | undefined;
}

/** A pino-shaped recorder: pino's method signatures, children merging their bindings, as pino does. */
function pinoRecorder(lines: Line[] = [], bindings: Record<string, unknown> = {}): PinoShaped {
  const at =
    (level: string): PinoLogFn =>
    (first: unknown, msg?: unknown): void => {
      if (typeof first === 'string') lines.push({ level, fields: { ...bindings }, msg: first });
      else lines.push({ level, fields: { ...bindings, ...(first as object) }, msg: typeof msg === 'string' ? msg : undefined });
    };
  return {
    level: 'debug',
    fatal: at('fatal'),
    error: at('error'),
    warn: at('warn'),
    info: at('info'),
    debug: at('debug'),
    trace: at('trace'),
    silent: () => {},
    child: (more) => pinoRecorder(lines, { ...bindings, ...more }),
  };
}

interface DocRow {
  level: string;
  required: Set<string>;
  optional: Set<string>;
}

/** The rows of the tables under "## Logs" in docs/operations.md, by message. */
function documentedLogs(): Map<string, DocRow> {
  const doc = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');
  const start = doc.indexOf('\n## Logs\n');
  assert.ok(start >= 0, 'docs/operations.md has no "## Logs" section');
  const end = doc.indexOf('\n## ', start + 1);
  const rows = new Map<string, DocRow>();
  for (const line of doc.slice(start, end < 0 ? undefined : end).split('\n')) {
    const m = /^\| (debug|info|warn|error) \| (.+?) \| (.*) \|$/.exec(line);
    if (!m) continue;
    const fieldsText = m[3]!.replace(/\([^)]*\)/g, '');
    const required = new Set<string>();
    const optional = new Set<string>();
    for (const f of fieldsText.matchAll(/(\[)?`([A-Za-z]+)`\]?/g)) (f[1] ? optional : required).add(f[2]!);
    for (const msg of m[2]!.matchAll(/`([^`]+)`/g)) rows.set(msg[1]!, { level: m[1]!, required, optional });
  }
  return rows;
}

/** Each line's message is documented, at its level, with exactly the documented fields (bindings aside). */
function assertDocumented(lines: Line[], bindings: readonly string[] = []): void {
  const docs = documentedLogs();
  for (const line of lines) {
    const row = docs.get(line.msg ?? '');
    assert.ok(row, `not in docs/operations.md, Logs: "${line.msg}"`);
    assert.equal(line.level, row.level, line.msg);
    const fields = Object.keys(line.fields).filter((k) => line.fields[k] !== undefined && !bindings.includes(k));
    for (const f of row.required) assert.ok(fields.includes(f), `${line.msg}: documented field ${f} not logged (logged: ${fields.join(', ')})`);
    for (const f of fields) assert.ok(row.required.has(f) || row.optional.has(f), `${line.msg}: logs ${f}, which the docs do not list`);
  }
}

it('a pino logger fits the Logger seam (its method signatures, checked at compile time)', () => {
  const pinoLike: PinoShaped = pinoRecorder();
  const logger: Logger = pinoLike; // does not compile if txbox's Logger asks for more than pino has
  const child: Logger = pinoLike.child({ component: 'relay' });
  assert.equal(typeof logger.info, 'function');
  assert.equal(typeof child.warn, 'function');
});

class Source extends TypedEmitter<RelayEvents> {
  fire<K extends keyof RelayEvents>(name: K, payload: RelayEvents[K]): void {
    this.emit(name, payload);
  }
}

it('the relay logs every documented message with its documented fields, to a pino child logger', async () => {
  const lines: Line[] = [];
  const source = new Source();
  let failCount = false;
  const log = new RelayLog(source, {
    logger: pinoRecorder(lines).child({ component: 'relay' }),
    relayId: 'r1',
    summaryIntervalMs: 0,
    snapshot: () => ({ leasesHeld: 128, inFlight: 3 }),
    backlog: async () => {
      if (failCount) throw new Error('connection terminated');
      return { pending: 10, parked: 1 };
    },
  });
  const openSince = new Date('2026-11-24T10:00:00Z');
  source.fire('started', { relayId: 'r1', buckets: 128 });
  source.fire('leases', { relayId: 'r1', held: 128, acquired: 128, lost: 0, released: 0, liveRelays: 2 });
  source.fire('batch', { lane: 0, claimed: 10, published: 8, retried: 1, parked: 1, rejected: 0, durationMs: 4.56 });
  source.fire('retry', { id: 'e1', type: 'OrderPlaced', keyHash: 'abcd1234', attempts: 1, delayMs: 500, error: 'HTTP 503' });
  source.fire('parked', { id: 'e2', type: 'OrderPlaced', keyHash: 'abcd1234', attempts: 12, error: 'HTTP 400' });
  source.fire('leaseEnded', { lane: 1, left: 4 });
  source.fire('fenced', { lane: 1, rejected: 4 });
  source.fire('error', { phase: 'claim', error: new Error('canceling statement due to statement timeout') });
  source.fire('circuit', { relayId: 'r1', destination: 'orders', state: 'open', reason: 'HTTP 401', openSince, nextProbeAt: new Date(openSince.getTime() + 1000), failedProbes: 0 });
  source.fire('circuit', { relayId: 'r1', destination: 'orders', state: 'probe-failed', reason: 'HTTP 401', openSince, nextProbeAt: new Date(openSince.getTime() + 3000), failedProbes: 1 });
  source.fire('circuit', { relayId: 'r1', destination: 'orders', state: 'closed', reason: 'HTTP 401', openSince, failedProbes: 1 });
  await log.summarize();
  failCount = true;
  await log.summarize();
  source.fire('stopped', { relayId: 'r1', releasedBuckets: 128 });

  assert.equal(lines.length, 14);
  assert.ok(lines.every((l) => l.fields.component === 'relay'), 'the child logger\'s bindings reach every line');
  assertDocumented(lines, ['component']);
  assert.ok(lines.every((l) => l.fields.relayId === 'r1'), 'every relay line names its relay');
  // All but the CLI's own lines and relay.stop()'s (logged by Relay, not RelayLog).
  const documentedRelay = [...documentedLogs().keys()].filter((m) => m.startsWith('txbox relay') && !/stopping|signal received|UNSIGNED|could not release|wake by polling|wake by a snapshot listener/.test(m));
  assert.deepEqual(new Set(lines.map((l) => l.msg)), new Set(documentedRelay), 'every documented relay message was produced');
});

const event = (over: Partial<OutboxEvent> = {}): OutboxEvent => ({
  id: '0193a1b2-0000-7000-8000-000000000001',
  type: 'OrderPlaced',
  aggregateType: 'order',
  aggregateId: 'o-1',
  key: 'order:o-1',
  destination: 'orders',
  payload: { total: 1 },
  headers: {},
  occurredAt: new Date(),
  version: null,
  ...over,
});

it('the inbox logs its failures with the documented fields', async () => {
  const lines: Line[] = [];
  const refusedId = '0193a1b2-0000-7000-8000-000000000002';
  const heldKeyId = '0193a1b2-0000-7000-8000-000000000003';
  const store: InboxStore = {
    async runBatch(_consumer, events, handler) {
      for (const [i, e] of events.entries()) {
        try {
          await handler({ query: async () => ({ rows: [], rowCount: 0 }) } as never, e);
        } catch (err) {
          throw new InboxBatchError(i, err);
        }
      }
      return { ran: events.map(() => true), heldKeys: events.some((e) => e.id === heldKeyId) ? [events[0]!.key] : [] };
    },
    async recordFailure(_consumer, e) {
      if (e.id === refusedId) throw Object.assign(new Error('new row violates check constraint "x"'), { code: '23514' });
      return { attempts: 1, dead: false };
    },
    async recheckHeld() {
      return [];
    },
    async hold() {},
    async redrivable() {
      throw new Error('connection terminated');
    },
  };
  const inbox = createInbox({ store, consumer: 'inventory', logger: pinoRecorder(lines), autoStart: false, batch: { maxSize: 1 } });
  inbox.on('OrderPlaced', async (e) => {
    if (e.id !== heldKeyId) throw new Error('inventory service answered 503');
  });
  assert.equal((await inbox.process(event())).status, 'retry');
  assert.equal((await inbox.process(event({ id: refusedId }))).status, 'retry');
  assert.equal((await inbox.process(event({ id: 'not-a-uuid' }))).status, 'dead');
  assert.equal((await inbox.process(event({ id: heldKeyId }))).status, 'processed');

  assert.deepEqual(lines.map((l) => [l.level, l.msg]), [
    ['warn', 'txbox inbox: handler failed'],
    ['warn', 'txbox inbox: the store refused the event'],
    ['warn', 'txbox inbox: event cannot be stored; dead without running the handler'],
    ['warn', 'txbox inbox: releasing held events failed; the held re-check will retry'],
  ]);
  assertDocumented(lines);
  for (const l of lines) assert.ok(!('payload' in l.fields) && !('key' in l.fields), `${l.msg}: no payload, no key in clear`);
});

it('the CLI\'s JSON logger: one line per entry with level, time, msg and the fields; below the level nothing', () => {
  const out: string[] = [];
  const logger = jsonLogger('info', (l) => void out.push(l));
  logger.debug({ relayId: 'r1' }, 'txbox relay batch');
  logger.info({ relayId: 'r1', buckets: 128 }, 'txbox relay started');
  logger.error({ relayId: 'r1', phase: 'claim', err: 'boom' }, 'txbox relay error');
  assert.equal(out.length, 2);
  assert.ok(out.every((l) => l.endsWith('\n') && !l.slice(0, -1).includes('\n')));
  const first = JSON.parse(out[0]!) as Record<string, unknown>;
  assert.deepEqual(Object.keys(first), ['level', 'time', 'msg', 'relayId', 'buckets']);
  assert.equal(first.level, 'info');
  assert.ok(!Number.isNaN(Date.parse(String(first.time))), 'time is an ISO 8601 string');
  assert.equal(first.msg, 'txbox relay started');
  assert.equal(JSON.parse(out[1]!).level, 'error');
  const silent: string[] = [];
  const none = jsonLogger('silent', (l) => void silent.push(l));
  none.error({}, 'x');
  assert.equal(silent.length, 0);
});
