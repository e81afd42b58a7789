/**
 * The broker-down-at-start rule (src/core/broker-outage.ts) and the consumer
 * core's retry loop: network errors anywhere in the cause chain are an
 * outage, anything else is configuration; a consumer's start() retries an
 * outage and rejects configuration at once.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { brokerOutage, ConfigError, ConsumerCore, silentLogger, startDespiteOutage } from 'txbox';

const refused = (): Error => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' });

describe('brokerOutage', () => {
  it('finds a network error in the cause chain or an AggregateError, and nothing in a configuration error', () => {
    assert.match(brokerOutage(new ConfigError('url', 'cannot connect', { cause: refused() }))!, /ECONNREFUSED/);
    assert.match(brokerOutage(new AggregateError([new Error('x'), Object.assign(new Error('getaddrinfo ENOTFOUND kafka'), { code: 'ENOTFOUND' })]))!, /ENOTFOUND/);
    assert.match(brokerOutage(new Error('connect ETIMEDOUT 10.0.0.1:9092'))!, /ETIMEDOUT/);
    assert.equal(brokerOutage(new ConfigError('sasl', 'refused the credentials (SASL_AUTHENTICATION_FAILED)')), null);
    assert.equal(brokerOutage(new Error('wrong version number')), null);
    assert.equal(brokerOutage('ECONNREFUSED as a string is not an error object'), null);
  });

  it('startDespiteOutage warns once and resolves false for an outage, rethrows configuration', async () => {
    const lines: { obj: object; msg: string }[] = [];
    const logger = { ...silentLogger, warn: (obj: object, msg?: string) => void lines.push({ obj, msg: msg ?? '' }) };
    assert.equal(await startDespiteOutage({ transport: 'kafka', address: '127.0.0.1:9', logger }, async () => Promise.reject(new ConfigError('brokers', 'could not connect', { cause: refused() }))), false);
    assert.equal(lines.length, 1);
    assert.match(lines[0]!.msg, /^kafka transport: the broker does not answer at start; starting anyway, its events wait/);
    await assert.rejects(startDespiteOutage({ transport: 'kafka', address: 'x', logger }, async () => Promise.reject(new ConfigError('sasl', 'refused'))), { field: 'sasl' });
    assert.equal(await startDespiteOutage({ transport: 'kafka', address: 'x', logger }, async () => {}), true);
  });
});

describe('ConsumerCore.start() during an outage', () => {
  function core(errors: string[]): ConsumerCore {
    return new ConsumerCore({ name: 'test', logger: silentLogger, context: () => ({}), onError: (operation) => void errors.push(operation), startRetry: { initialMs: 5, maxMs: 20 } });
  }

  it('retries an unreachable broker until open succeeds, with an error event per failed attempt', async () => {
    const errors: string[] = [];
    const c = core(errors);
    let calls = 0;
    await c.start(async () => {
      if (++calls < 4) throw new ConfigError('url', 'cannot reach', { cause: refused() });
    });
    assert.equal(calls, 4);
    assert.deepEqual(errors, ['start', 'start', 'start']);
    assert.equal(c.state, 'running');
    assert.equal((await c.health()).checks.some((k) => k.name === 'last-error'), false, 'the start failures are over');
  });

  it('rejects a configuration error at once', async () => {
    const c = core([]);
    let calls = 0;
    await assert.rejects(c.start(async () => void (calls++, (() => { throw new ConfigError('password', 'refused'); })())), { field: 'password' });
    assert.equal(calls, 1);
    assert.equal(c.state, 'stopped');
  });

  it('stop() ends the wait: start() rejects with AbortedError', async () => {
    const errors: string[] = [];
    const c = core(errors);
    const started = c.start(async () => Promise.reject(refused()));
    while (errors.length < 2) await new Promise((r) => setTimeout(r, 5));
    await c.stop(async () => {});
    await assert.rejects(started, { code: 'TXBOX_ABORTED' });
    assert.equal(c.state, 'stopped');
  });
});
