/**
 * `txbox relay --metrics-port N`: /metrics (prom-client text with txbox's
 * and the process's metrics), /healthz and /readyz on 127.0.0.1; a
 * non-loopback --metrics-host is refused without --metrics-allow-remote.
 * Subprocess against the real PostgreSQL, one schema per test.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { runCli, startCli, type CliResult } from '../helpers/cli.ts';
import { freePort } from '../helpers/ports.ts';
import { waitFor } from '../helpers/wait.ts';

const dbs: TestDb[] = [];
async function freshDb(): Promise<TestDb> {
  const db = await openDb('postgres');
  dbs.push(db);
  return db;
}

function expectExit(r: CliResult, code: number, what: string): void {
  assert.equal(r.code, code, `${what}: exit ${r.code} (signal ${r.signal})\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
}

const RELAY = ['relay', '--transport', 'http', '--endpoint', 'orders=http://127.0.0.1:9/x', '--unsigned'];

describe('txbox relay --metrics-port', { concurrency: true, timeout: 120_000 }, () => {
  after(async () => {
    await Promise.all(dbs.map((db) => db.close()));
  });

  it('serves /metrics, /healthz and /readyz on 127.0.0.1', async () => {
    const db = await freshDb();
    const port = await freePort();
    const relay = startCli([...RELAY, '--metrics-port', String(port)], { TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_SCHEMA: db.schema, TXBOX_LOG_LEVEL: 'info' });
    try {
      await waitFor('the ready line', () => /^txbox relay ready: /m.test(relay.stdout()), 60_000);
      assert.match(relay.stderr() + relay.stdout(), new RegExp(`http://127\\.0\\.0\\.1:${port}`));
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
      assert.equal(ready.status, 200);
      const body = (await ready.json()) as { ready: boolean; components: { name: string; checks: { name: string; ok: boolean }[] }[] };
      assert.equal(body.ready, true);
      assert.deepEqual(body.components[0]!.checks.map((c) => c.name), ['database', 'leases', 'transport']);
      assert.equal((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200);
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      assert.match(text, /^txbox_relay_leases_held 256$/m);
      assert.match(text, /^txbox_relay_relays_alive 1$/m);
      assert.match(text, /^process_cpu_user_seconds_total /m);
    } finally {
      relay.child.kill('SIGTERM');
      expectExit(await relay.exited, 0, 'relay after SIGTERM');
    }
  });

  it('refuses a non-loopback --metrics-host without --metrics-allow-remote, and a bad port', async () => {
    const db = await freshDb();
    const env = { TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_SCHEMA: db.schema, TXBOX_LOG_LEVEL: 'warn' };
    const remote = await runCli([...RELAY, '--metrics-port', String(await freePort()), '--metrics-host', '0.0.0.0'], env);
    expectExit(remote, 2, 'non-loopback host');
    assert.match(remote.stderr, /--metrics-host: "0\.0\.0\.0" is not a loopback address.*--metrics-allow-remote/);
    const bad = await runCli([...RELAY, '--metrics-port', 'nine'], env);
    expectExit(bad, 2, 'bad port');
    assert.match(bad.stderr, /--metrics-port: must be a port number/);
    const hostOnly = await runCli([...RELAY, '--metrics-host', '127.0.0.1'], env);
    expectExit(hostOnly, 2, 'host without port');
    assert.match(hostOnly.stderr, /need --metrics-port/);
  });
});
