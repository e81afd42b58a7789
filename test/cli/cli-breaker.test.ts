/**
 * `txbox relay`'s destination circuit breaker settings: `--breaker-base-delay`
 * / `TXBOX_BREAKER_BASE_DELAY` / `relay.breakerBaseDelay` and the max delay
 * alike, durations with a unit. A relay publishing to a refused port opens
 * the circuit, and its heartbeat (what `txbox status` shows) has the first
 * probe after the configured pause (half to all of it: equal jitter).
 * Subprocesses against the real PostgreSQL, one fresh schema per test.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createOutbox, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { runCli, startCli } from '../helpers/cli.ts';
import { waitFor } from '../helpers/wait.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });
const SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
/** Port 9 (discard) refuses connections here: the destination is down. */
const HTTP = ['--transport', 'http', '--endpoint', 'orders=http://127.0.0.1:9/hook', '--secret', SECRET];

const dbs: TestDb[] = [];
const tmp = mkdtempSync(join(tmpdir(), 'txbox-breaker-'));

describe('txbox relay circuit breaker settings', { concurrency: true, timeout: 180_000 }, () => {
  after(async () => {
    await Promise.all(dbs.map((db) => db.close()));
    rmSync(tmp, { recursive: true, force: true });
  });

  it('refuses bare numbers and a max below the base, naming the flag, variable or file', async () => {
    const env = { TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_LOG_LEVEL: 'warn' };
    const config = join(tmp, 'bad.json');
    writeFileSync(config, JSON.stringify({ relay: { breakerMaxDelay: 60000 } }));
    const [flag, variable, order, file] = await Promise.all([
      runCli(['relay', ...HTTP, '--breaker-base-delay', '5'], env),
      runCli(['relay', ...HTTP], { ...env, TXBOX_BREAKER_MAX_DELAY: '30' }),
      runCli(['relay', ...HTTP, '--breaker-base-delay', '2m', '--breaker-max-delay', '1m'], env),
      runCli(['relay', ...HTTP, '--config', config], env),
    ]);
    for (const r of [flag, variable, order, file]) assert.equal(r.code, 2, r.stderr);
    assert.match(flag.stderr, /--breaker-base-delay 5: give a unit, e\.g\. --breaker-base-delay 5/);
    assert.match(variable.stderr, /TXBOX_BREAKER_MAX_DELAY=30: give a unit/);
    assert.match(order.stderr, /--breaker-max-delay: the longest pause \(60000 ms\) is shorter than --breaker-base-delay \(120000 ms\)/);
    assert.match(file.stderr, /bad\.json relay\.breakerMaxDelay "60000": give a unit/);
  });

  for (const [how, args, env, baseMs] of [
    ['--breaker-base-delay 20s', ['--breaker-base-delay', '20s', '--breaker-max-delay', '2m'], {}, 20_000],
    ['TXBOX_BREAKER_BASE_DELAY=30s', [], { TXBOX_BREAKER_BASE_DELAY: '30s' }, 30_000],
    ['relay.breakerBaseDelay "40s" in the config file', ['--config', 'FILE'], {}, 40_000],
  ] as const) {
    it(`${how}: the first probe of a down destination comes after that pause, not the 1 s default`, async () => {
      const db = await openDb('postgres');
      dbs.push(db);
      const config = join(tmp, `${db.schema}.json`);
      writeFileSync(config, JSON.stringify({ relay: { breakerBaseDelay: '40s', breakerMaxDelay: '5m' } }));
      const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });
      await db.transaction((tx) => outbox.enqueue(tx, Placed({ aggregateId: 1, payload: { n: 1 } })));
      const relay = startCli(['relay', ...HTTP, ...args.map((a) => (a === 'FILE' ? config : a))], {
        TXBOX_DATABASE_URL: DATABASE_URL,
        TXBOX_SCHEMA: db.schema,
        TXBOX_LOG_LEVEL: 'warn',
        TXBOX_LEASE_TTL_MS: '3000',
        ...env,
      });
      try {
        let circuits: { openSince: string; nextProbeAt: string }[] = [];
        await waitFor(
          'an open circuit in the heartbeat',
          async () => {
            const rows = await db.query<{ circuits: typeof circuits }>(`SELECT circuits FROM "${db.schema}".outbox_relays`);
            circuits = rows.flatMap((r) => r.circuits);
            return circuits.length > 0;
          },
          60_000,
          100,
        );
        const pause = Date.parse(circuits[0]!.nextProbeAt) - Date.parse(circuits[0]!.openSince);
        assert.ok(pause >= baseMs / 2 && pause <= baseMs, `first pause ${pause} ms, configured ${baseMs} ms`);
      } finally {
        relay.child.kill('SIGTERM');
        const r = await relay.exited;
        assert.equal(r.code, 0, r.stderr);
      }
    });
  }
});
