/**
 * `txbox dashboard` as a subprocess: it refuses to start without a token
 * unless bound to loopback with an explicit --no-auth, refuses --no-auth on
 * any other address, names the flag or variable at fault, never prints the
 * token, and stops cleanly on SIGTERM.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { runCli, startCli, type CliResult } from '../helpers/cli.ts';
import { waitFor } from '../helpers/wait.ts';

const TOKEN = 'cli-dashboard-token-0123456789abcdef';

function expectExit(r: CliResult, code: number, what: string): void {
  assert.equal(r.code, code, `${what}: exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
}

describe('txbox dashboard', { timeout: 120_000 }, () => {
  let db: TestDb;
  let env: Record<string, string>;
  before(async () => {
    db = await openDb('postgres');
    env = { TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_SCHEMA: db.schema, TXBOX_LOG_LEVEL: 'warn' };
  });
  after(async () => {
    await db.close();
  });

  it('refuses to start without a token, --no-auth off loopback, both at once, and a short token', async () => {
    const [none, wide, wideNoAuth, both, short, port] = await Promise.all([
      runCli(['dashboard'], env),
      runCli(['dashboard', '--host', '0.0.0.0'], env),
      runCli(['dashboard', '--host', '0.0.0.0', '--no-auth'], env),
      runCli(['dashboard', '--no-auth'], { ...env, TXBOX_DASHBOARD_TOKEN: TOKEN }),
      runCli(['dashboard', '--token', 'short'], env),
      runCli(['dashboard', '--no-auth', '--port', '70000'], env),
    ]);
    expectExit(none, 2, 'no token');
    assert.match(none.stderr, /refuses to start without an access token: set TXBOX_DASHBOARD_TOKEN .* or pass --token, or --no-auth to serve loopback clients only/);
    expectExit(wide, 2, '0.0.0.0 without a token');
    assert.doesNotMatch(wide.stderr, /--no-auth/, 'off loopback, --no-auth is not offered');
    expectExit(wideNoAuth, 2, '--no-auth on 0.0.0.0');
    assert.match(wideNoAuth.stderr, /--no-auth with --host 0\.0\.0\.0: without a token the dashboard binds loopback only/);
    expectExit(both, 2, 'token and --no-auth');
    assert.match(both.stderr, /TXBOX_DASHBOARD_TOKEN and --no-auth: choose one/);
    expectExit(short, 2, 'short token');
    assert.match(short.stderr, /--token: the token is shorter than 16 characters/);
    expectExit(port, 2, 'bad port');
    assert.match(port.stderr, /--port 70000: give a port number/);
    const help = await runCli(['--help'], env);
    assert.match(help.stdout, /^ {2}dashboard /m);
  });

  it('serves with the token from the environment, never prints it, and stops on SIGTERM', async () => {
    const running = startCli(['dashboard', '--port', '0'], { ...env, TXBOX_DASHBOARD_TOKEN: TOKEN });
    await waitFor('the dashboard listens', () => /http:\/\/127\.0\.0\.1:\d+\//.test(running.stdout()) || running.child.exitCode !== null, 30_000);
    const url = /(http:\/\/127\.0\.0\.1:\d+\/)/.exec(running.stdout())?.[1] ?? assert.fail(running.stderr());
    assert.match(running.stdout(), /access token required/);
    const anonymous = await fetch(`${url}api/state`);
    assert.equal(anonymous.status, 401);
    const state = await fetch(`${url}api/state`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(state.status, 200);
    const body = (await state.json()) as { inbox: boolean; snapshot: { status: { destinations: unknown[] } } };
    assert.deepEqual(body.snapshot.status.destinations, []);
    assert.equal(body.inbox, false, 'no inbox table: no inbox section');
    running.child.kill('SIGTERM');
    const exited = await running.exited;
    expectExit(exited, 0, 'after SIGTERM');
    assert.ok(!exited.stdout.includes(TOKEN) && !exited.stderr.includes(TOKEN), 'the token is never printed');
  });
});
