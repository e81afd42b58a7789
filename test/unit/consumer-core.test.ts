/**
 * The shared consumer core without a broker: start/stop coalescing and
 * order, the stop signal, failure reporting (per failure or once per
 * outage), health, the settle loop (handler retries in place, store outages
 * retried, give-up hooks, abort) and DeliveryCore's loop over a stand-in
 * broker port (ack after settle, dead letters, release on stop, worker mode,
 * the admit and retryLater hooks, onStop 'finish', whenBelow) and
 * ConsumerCore.retrying.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConsumerCore, DeliveryCore, receiveQueued, settleEvent, silentLogger, uuidv7, type Inbox, type InboxOutcome, type InboxQueue, type Logger, type OutboxEvent } from 'txbox';

const ev = (key: string, n = 1): OutboxEvent => ({ id: uuidv7(), type: 'T', aggregateType: 'A', aggregateId: key, key, destination: 'd', payload: { n }, headers: {}, occurredAt: new Date(), version: n });

function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const at = (level: string) => (_o: unknown, msg?: string) => void lines.push(`${level} ${msg ?? ''}`);
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } as Logger & { lines: string[] };
}

/** An inbox stand-in whose process() answers from a script. */
function scriptedInbox(answer: (event: OutboxEvent, call: number) => InboxOutcome | Error): Inbox & { calls: number } {
  const inbox = {
    calls: 0,
    async process(event: OutboxEvent): Promise<InboxOutcome> {
      const a = answer(event, ++inbox.calls);
      if (a instanceof Error) throw a;
      return a;
    },
  };
  return inbox as unknown as Inbox & { calls: number };
}

describe('ConsumerCore', () => {
  it('coalesces concurrent starts and stops, and a stop waits for a start in progress', async () => {
    const errors: string[] = [];
    const core = new ConsumerCore({ name: 'stub', logger: silentLogger, context: () => ({}), onError: (op) => errors.push(op) });
    let opens = 0;
    let closes = 0;
    let release!: () => void;
    const open = () => new Promise<void>((r) => ((release = r), opens++));
    const a = core.start(open);
    const b = core.start(open);
    assert.equal(core.state, 'starting');
    const stopping = core.stop(async () => void closes++);
    release();
    await Promise.all([a, b, stopping]);
    assert.deepEqual([opens, closes, core.state], [1, 1, 'stopped']);
    assert.equal(core.signal.aborted, true);
    await core.stop(async () => void closes++);
    assert.equal(closes, 1, 'stop when stopped does nothing');
  });

  it('a failed start leaves it stopped and rethrows; running callback runs once running', async () => {
    const core = new ConsumerCore({ name: 'stub', logger: silentLogger, context: () => ({}), onError: () => {} });
    await assert.rejects(core.start(async () => Promise.reject(new Error('no broker'))), /no broker/);
    assert.equal(core.state, 'stopped');
    let seen = '';
    await core.start(async () => {}, () => void (seen = core.state));
    assert.equal(seen, 'running');
    await core.stop(async () => {});
  });

  it('reports failures: an event each time, a warning per failure or once per outage; health shows the last one until recovered', async () => {
    const logger = recordingLogger();
    const events: string[] = [];
    let connected = true;
    const core = new ConsumerCore({ name: 'stub', logger, context: () => ({}), onError: (op, m) => events.push(`${op}: ${m}`), logOncePerOutage: true, connected: () => connected });
    await core.start(async () => {});
    assert.deepEqual(await core.health(), { live: true, ready: true, checks: [{ name: 'running', ok: true, detail: 'the stub consumer is running' }, { name: 'connection', ok: true, detail: 'connected to stub' }] });
    core.failed('inbox', new Error('database down'));
    core.failed('inbox', new Error('database down'));
    assert.deepEqual(events, ['inbox: Error: database down', 'inbox: Error: database down']);
    assert.equal(logger.lines.filter((l) => l.startsWith('warn')).length, 1, 'one warning per outage');
    const failing = await core.health();
    assert.equal(failing.ready, true, 'a retried failure does not make it unready');
    assert.match(failing.checks.find((c) => c.name === 'last-error')!.detail!, /inbox failed at .*: Error: database down/);
    core.recovered('inbox');
    assert.equal((await core.health()).checks.some((c) => c.name === 'last-error'), false);
    assert.ok(logger.lines.includes('info txbox stub consumer: operation works again'));
    connected = false;
    assert.equal((await core.health()).ready, false);
    await core.stop(async () => {});
    assert.equal((await core.health()).live, false);
  });
});

describe('settleEvent and receiveQueued', () => {
  it('waits a handler retry in place, retries a failing store, and ends with the settled outcome', async () => {
    const storeErrors: unknown[] = [];
    const inbox = scriptedInbox((_e, call) => (call === 1 ? { status: 'retry', delayMs: 5, attempts: 1, error: 'x' } : call === 2 ? new Error('db down') : { status: 'processed' }));
    const outcome = await settleEvent(inbox, ev('k'), { signal: new AbortController().signal, onStoreError: (e) => storeErrors.push(e), storeBackoffMs: () => 1 });
    assert.deepEqual(outcome, { status: 'processed' });
    assert.equal(inbox.calls, 3);
    assert.equal(storeErrors.length, 1);
  });

  it('null when aborted or when onRetry gives up; firstAttemptWhileStopping still tries once', async () => {
    const aborted = AbortSignal.abort();
    const inbox = scriptedInbox(() => ({ status: 'retry', delayMs: 60_000, attempts: 1, error: 'x' }));
    assert.equal(await settleEvent(inbox, ev('k'), { signal: aborted, onStoreError: () => {} }), null);
    assert.equal(inbox.calls, 0);
    assert.equal(await settleEvent(inbox, ev('k'), { signal: aborted, onStoreError: () => {}, firstAttemptWhileStopping: true }), null);
    assert.equal(inbox.calls, 1);
    assert.equal(await settleEvent(inbox, ev('k'), { signal: new AbortController().signal, onStoreError: () => {}, onRetry: () => false }), null);
  });

  it('receiveQueued retries an outage and maps refusals by index; null once aborted', async () => {
    let calls = 0;
    const queue = { receive: async () => (++calls === 1 ? Promise.reject(new Error('down')) : [{ index: 1, reason: 'bad id' }]) } as unknown as InboxQueue;
    const refused = await receiveQueued(queue, [ev('a'), ev('b')], new AbortController().signal, () => {}, () => 1);
    assert.deepEqual([...refused!], [[1, 'bad id']]);
    const down = { receive: async () => Promise.reject(new Error('down')) } as unknown as InboxQueue;
    const stop = new AbortController();
    setTimeout(() => stop.abort(), 20);
    assert.equal(await receiveQueued(down, [ev('a')], stop.signal, () => {}, () => 5), null);
  });
});

describe('DeliveryCore over a stand-in broker', () => {
  function setup(answer: (event: OutboxEvent, call: number) => InboxOutcome | Error) {
    const log: string[] = [];
    const core = new ConsumerCore({ name: 'stub', logger: silentLogger, context: () => ({}), onError: () => {} });
    const inbox = scriptedInbox(answer);
    const deliveries = new DeliveryCore<string>({
      core,
      handler: { kind: 'inbox', inbox },
      concurrency: 4,
      batch: 10,
      port: { ack: (m) => void log.push(`ack ${m}`), deadLetter: async (m, reason) => (log.push(`dead ${m} ${reason}`), true), release: (m) => void log.push(`release ${m}`) },
    });
    return { core, deliveries, log, inbox };
  }

  it('acks after the inbox settled, per key in order; dead and unreadable messages are dead-lettered', async () => {
    const { core, deliveries, log } = setup((e) => (e.aggregateId === 'poison' ? { status: 'dead', attempts: 3, error: 'boom' } : { status: 'processed' }));
    await core.start(async () => {});
    deliveries.accept('m1', { ok: true, event: ev('a', 1) });
    deliveries.accept('m2', { ok: true, event: ev('a', 2) });
    deliveries.accept('m3', { ok: true, event: ev('poison') });
    deliveries.accept('m4', { ok: false, message: 'no id' });
    await deliveries.onIdle();
    await new Promise((r) => setImmediate(r));
    assert.ok(log.indexOf('ack m1') < log.indexOf('ack m2'));
    assert.ok(log.includes('dead m3 handler failed 3 times: boom'));
    assert.ok(log.includes('dead m4 unreadable message: no id'));
    assert.equal(deliveries.inFlight, 0);
    await core.stop(async () => {});
  });

  it('stop releases what waits to retry and what has not started', async () => {
    const { core, deliveries, log } = setup(() => ({ status: 'retry', delayMs: 60_000, attempts: 1, error: 'x' }));
    await core.start(async () => {});
    deliveries.accept('m1', { ok: true, event: ev('a', 1) });
    deliveries.accept('m2', { ok: true, event: ev('a', 2) });
    await new Promise((r) => setTimeout(r, 20));
    await core.stop(() => deliveries.onIdle());
    assert.deepEqual(log.sort(), ['release m1', 'release m2']);
  });

  it('worker mode stores a batch, acks it, and dead-letters what the queue refused', async () => {
    const log: string[] = [];
    const core = new ConsumerCore({ name: 'stub', logger: silentLogger, context: () => ({}), onError: () => {} });
    const queue = { receive: async (events: OutboxEvent[]) => (events.length >= 2 ? [{ index: 1, reason: 'refused' }] : []) } as unknown as InboxQueue;
    const deliveries = new DeliveryCore<string>({ core, handler: { kind: 'queue', queue }, concurrency: 1, batch: 10, port: { ack: (m) => void log.push(`ack ${m}`), deadLetter: async (m, r) => (log.push(`dead ${m} ${r}`), true), release: (m) => void log.push(`release ${m}`) } });
    await core.start(async () => {});
    deliveries.accept('m1', { ok: true, event: ev('a') });
    deliveries.accept('m2', { ok: true, event: ev('b') });
    await deliveries.onIdle();
    assert.deepEqual(log, ['ack m1', 'dead m2 refused']);
    await core.stop(async () => {});
  });

  it('admit releases or dead-letters a message when its turn comes, unreadable ones too; released keys stay behind', async () => {
    const log: string[] = [];
    const core = new ConsumerCore({ name: 'stub', logger: silentLogger, context: () => ({}), onError: () => {} });
    const inbox = scriptedInbox(() => ({ status: 'processed' }));
    const admitted: string[] = [];
    const deliveries = new DeliveryCore<string>({
      core,
      handler: { kind: 'inbox', inbox },
      concurrency: 4,
      batch: 10,
      noun: 'entry',
      port: {
        ack: (m) => void log.push(`ack ${m}`),
        deadLetter: async (m, reason) => (log.push(`dead ${m} ${reason}`), true),
        release: (m) => void log.push(`release ${m}`),
        admit: (m, event) => {
          admitted.push(`${m}:${event === null ? 'unreadable' : event.aggregateId}`);
          if (m === 'm2') return 'release';
          if (m === 'm3') return { deadLetter: 'delivered 9 times' };
          return m === 'm5' ? 'release' : 'handle';
        },
      },
    });
    await core.start(async () => {});
    deliveries.accept('m1', { ok: true, event: ev('a', 1) });
    deliveries.accept('m2', { ok: true, event: ev('b', 1) });
    deliveries.accept('m3', { ok: true, event: ev('c', 1) });
    deliveries.accept('m4', { ok: false, message: 'no id' });
    deliveries.accept('m5', { ok: false, message: 'no type' });
    await deliveries.onIdle();
    assert.deepEqual(admitted.sort(), ['m1:a', 'm2:b', 'm3:c', 'm4:unreadable', 'm5:unreadable']);
    assert.deepEqual(log.sort(), ['ack m1', 'dead m3 delivered 9 times', 'dead m4 unreadable entry: no id', 'release m2', 'release m5']);
    assert.equal(inbox.calls, 1, 'only the admitted message reached the inbox');
    assert.equal(deliveries.inFlight, 0);
    await core.stop(async () => {});
  });

  it('retryLater leaves a message whose retry is due later; a sooner one waits in place', async () => {
    const log: string[] = [];
    const core = new ConsumerCore({ name: 'stub', logger: silentLogger, context: () => ({}), onError: () => {} });
    const inbox = scriptedInbox((e, call) => (e.aggregateId === 'late' ? { status: 'retry', delayMs: 60_000, attempts: 1, error: 'x' } : call <= 2 ? { status: 'retry', delayMs: 5, attempts: call, error: 'y' } : { status: 'processed' }));
    const asked: number[] = [];
    const deliveries = new DeliveryCore<string>({
      core,
      handler: { kind: 'inbox', inbox },
      concurrency: 1,
      batch: 10,
      port: {
        ack: (m) => void log.push(`ack ${m}`),
        deadLetter: async () => true,
        release: (m) => void log.push(`release ${m}`),
        retryLater: (_m, _e, _attempts, delayMs) => (asked.push(delayMs), delayMs > 1000),
      },
    });
    await core.start(async () => {});
    deliveries.accept('soon', { ok: true, event: ev('soon') });
    await deliveries.onIdle();
    deliveries.accept('late', { ok: true, event: ev('late') });
    await deliveries.onIdle();
    assert.deepEqual(log, ['ack soon', 'release late']);
    assert.deepEqual(asked, [5, 5, 60_000]);
    await core.stop(async () => {});
  });

  it("onStop 'finish' handles what was received once at stop, and releases a retry wait", async () => {
    const log: string[] = [];
    const core = new ConsumerCore({ name: 'stub', logger: silentLogger, context: () => ({}), onError: () => {} });
    let gate!: () => void;
    const opened = new Promise<void>((r) => (gate = r));
    const inbox = {
      calls: 0,
      async process(event: OutboxEvent): Promise<InboxOutcome> {
        inbox.calls++;
        if (event.aggregateId === 'slow') await opened;
        return event.aggregateId === 'fails' ? { status: 'retry', delayMs: 60_000, attempts: 1, error: 'x' } : { status: 'processed' };
      },
    };
    const deliveries = new DeliveryCore<string>({
      core,
      handler: { kind: 'inbox', inbox: inbox as unknown as Inbox },
      concurrency: 1,
      batch: 10,
      onStop: 'finish',
      port: { ack: (m) => void log.push(`ack ${m}`), deadLetter: async () => true, release: (m) => void log.push(`release ${m}`) },
    });
    await core.start(async () => {});
    deliveries.accept('m1', { ok: true, event: ev('slow') });
    deliveries.accept('m2', { ok: true, event: ev('fails') });
    deliveries.accept('m3', { ok: true, event: ev('c') });
    await new Promise((r) => setTimeout(r, 10));
    const stopped = core.stop(() => deliveries.onIdle());
    gate();
    await stopped;
    assert.deepEqual(log, ['ack m1', 'release m2', 'ack m3'], 'each received message was tried once; the retry wait ended at stop');
    assert.equal(inbox.calls, 3);
  });

  it('whenBelow waits until fewer messages are held, or the signal aborts', async () => {
    const core = new ConsumerCore({ name: 'stub', logger: silentLogger, context: () => ({}), onError: () => {} });
    let finish!: () => void;
    const held = new Promise<void>((r) => (finish = r));
    const inbox = scriptedInbox(() => ({ status: 'processed' }));
    const slow = { process: async (e: OutboxEvent) => (await held, inbox.process(e)) } as unknown as Inbox;
    const deliveries = new DeliveryCore<string>({ core, handler: { kind: 'inbox', inbox: slow }, concurrency: 4, batch: 10, port: { ack: () => {}, deadLetter: async () => true, release: () => {} } });
    await core.start(async () => {});
    deliveries.accept('m1', { ok: true, event: ev('a') });
    deliveries.accept('m2', { ok: true, event: ev('b') });
    let room = false;
    const waiting = deliveries.whenBelow(2, core.signal).then(() => (room = true));
    await new Promise((r) => setTimeout(r, 10));
    assert.equal(room, false, 'two held: no room below two');
    finish();
    await waiting;
    assert.ok(deliveries.inFlight < 2);
    await deliveries.onIdle();
    deliveries.accept('m3', { ok: true, event: ev('c', 2) });
    const aborted = new AbortController();
    const p = deliveries.whenBelow(1, aborted.signal);
    aborted.abort();
    await p;
    await deliveries.onIdle();
    await core.stop(async () => {});
  });
});

describe('ConsumerCore.retrying', () => {
  it('retries with backoff, reports each failure and the recovery; null once the signal aborts', async () => {
    const errors: string[] = [];
    const core = new ConsumerCore({ name: 'stub', logger: silentLogger, context: () => ({}), onError: (op, message) => errors.push(`${op} ${message}`) });
    await core.start(async () => {});
    let calls = 0;
    const result = await core.retrying('dead-letter', async () => {
      if (++calls < 2) throw new Error('broker down');
      return 'sent';
    });
    assert.equal(result, 'sent');
    assert.deepEqual(errors, ['dead-letter Error: broker down']);
    assert.equal((await core.health()).checks.some((c) => c.name === 'last-error'), false, 'recovered: health no longer reports it');
    const stop = new AbortController();
    const never = core.retrying('dead-letter', () => Promise.reject(new Error('still down')), stop.signal);
    setTimeout(() => stop.abort(), 20);
    assert.equal(await never, null);
    await core.stop(async () => {});
  });
});
