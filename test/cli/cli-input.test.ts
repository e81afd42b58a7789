/**
 * The CLI's handling of bad input, as a user meets it: durations without a
 * unit, stray positional arguments, unknown flags, `txbox secret`, and the
 * wording of the most common errors. A subprocess against the real
 * PostgreSQL at 127.0.0.1:5432, one fresh schema per test.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createOutbox, defineEvent, payloadType } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import { HttpTransport } from 'txbox/http';
import { DATABASE_URL, openDb, type TestDb } from '../helpers/databases.ts';
import { runCli, startCli, type CliResult } from '../helpers/cli.ts';
import { waitFor } from '../helpers/wait.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });

const dbs: TestDb[] = [];
async function freshDb(): Promise<TestDb> {
  const db = await openDb('postgres');
  dbs.push(db);
  return db;
}

function envFor(db: TestDb | undefined, extra: Record<string, string> = {}): Record<string, string> {
  return { TXBOX_DATABASE_URL: DATABASE_URL, ...(db ? { TXBOX_SCHEMA: db.schema } : {}), TXBOX_LOG_LEVEL: 'warn', ...extra };
}

function expectExit(r: CliResult, code: number, what: string): void {
  assert.equal(r.code, code, `${what}: exit ${r.code} (signal ${r.signal})\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
}

/** Runs a command that must fail at once; a relay that started instead is killed after 90 s (and the exit code shows it). */
const quick = (args: string[], env: Record<string, string>): Promise<CliResult> => runCli(args, env, 90_000);

/** A fixed signing secret, so that the HTTP transport's own checks pass and only the input under test is wrong. */
const SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
const HTTP = ['--transport', 'http', '--endpoint', 'orders=http://127.0.0.1:9/hook', '--secret', SECRET];

describe('txbox CLI input', { concurrency: true, timeout: 180_000 }, () => {
  after(async () => {
    await Promise.all(dbs.map((db) => db.close()));
  });

  it('an empty flag value (an unset shell variable) is refused, never read as no filter: parked discard --all --destination "" discards nothing', async () => {
    const db = await freshDb();
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });
    const ids = await db.transaction((tx) => outbox.enqueue(tx, [Placed({ aggregateId: 1, payload: { n: 1 } }), Placed({ aggregateId: 2, payload: { n: 2 } })]));
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'parked' WHERE id = ANY($1::uuid[])`, [ids]);
    const discard = await quick(['parked', 'discard', '--all', '--destination', ''], envFor(db));
    expectExit(discard, 2, 'parked discard --all --destination ""');
    assert.match(discard.stderr, /--destination has an empty value/);
    const left = await db.query(`SELECT 1 FROM "${db.schema}".outbox WHERE state = 'parked'`);
    assert.equal(left.length, 2, 'nothing was discarded');
    const inbox = await quick(['inbox', 'dead', 'discard', '--all', '--consumer', ''], envFor(db));
    expectExit(inbox, 2, 'inbox dead discard --all --consumer ""');
    assert.match(inbox.stderr, /--consumer has an empty value/);
    for (const flag of ['--host', '--port']) {
      const dashboard = await quick(['dashboard', flag, ''], envFor(db, { TXBOX_DASHBOARD_TOKEN: 'a'.repeat(32) }));
      expectExit(dashboard, 2, `dashboard ${flag} ""`);
      assert.match(dashboard.stderr, new RegExp(`${flag} has an empty value`));
    }
  });

  it('a malformed --endpoint or config file never prints the secret in it: no password, token, path or webhook secret in the error', async () => {
    const leaky = 'https://user:pw-LEAK@hooks.example.com/services/T0/B0/SECRETPATH?token=SECRETQ';
    const listed = await quick(['relay', '--transport', 'http', '--secret', SECRET], envFor(undefined, { TXBOX_HTTP_ENDPOINTS: `orders=http://127.0.0.1:9/hook,${leaky}` }));
    expectExit(listed, 2, 'TXBOX_HTTP_ENDPOINTS with a pair without dest=');
    assert.match(listed.stderr, /TXBOX_HTTP_ENDPOINTS #2: expected DEST=URL/);
    assert.doesNotMatch(listed.stderr, /LEAK|SECRETPATH|SECRETQ/, listed.stderr);
    const relay = await quick(['relay', '--transport', 'http', '--endpoint', leaky, '--secret', SECRET], envFor(undefined));
    expectExit(relay, 2, 'relay --endpoint without dest=');
    assert.match(relay.stderr, /--endpoint #1: expected DEST=URL/);
    assert.doesNotMatch(relay.stderr, /LEAK|SECRETPATH|SECRETQ/);
    const dir = mkdtempSync(join(tmpdir(), 'txbox-cfg-'));
    const config = join(dir, 'txbox.json');
    writeFileSync(config, '{"transport": {"secret": whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}}\n', { mode: 0o600 });
    const broken = await quick(['status', '--config', config], envFor(undefined));
    expectExit(broken, 2, 'a config file that is not JSON');
    assert.match(broken.stderr, /not valid JSON/);
    assert.doesNotMatch(broken.stderr, /whsec_|MfKQ/, broken.stderr);
  });

  it('Ctrl-C ends a one-shot command at once (exit 130): txbox migrate waiting for another migration\'s lock', async () => {
    const db = await freshDb();
    const holder = await db.connection.transaction(async (tx) => {
      // Another deploy's migrate holds the lock (the same key txbox migrate takes) while this test runs.
      await tx.query(`SELECT pg_advisory_xact_lock(hashtext($1))`, [`txbox:${db.schema}.outbox`]);
      const cli = startCli(['migrate'], envFor(db));
      await waitFor('migrate to wait for the lock', async () =>
        (await db.query(`SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name LIKE 'txbox%'`)).length > 0,
      );
      const sent = performance.now();
      cli.child.kill('SIGINT');
      const result = await Promise.race([cli.exited, new Promise<'still running'>((r) => setTimeout(r, 5000, 'still running'))]);
      if (result === 'still running') cli.child.kill('SIGKILL');
      return { result, ms: performance.now() - sent };
    });
    assert.notEqual(holder.result, 'still running', 'the first Ctrl-C did not end it');
    assert.equal((holder.result as CliResult).code, 130);
  });

  it('a bare number as a duration is an error naming the flag and an example; nothing is deleted', async () => {
    const db = await freshDb();
    const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed] });
    const ids = await db.transaction((tx) => outbox.enqueue(tx, [Placed({ aggregateId: 1, payload: { n: 1 } }), Placed({ aggregateId: 2, payload: { n: 2 } })]));
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'published', done_at = now() - interval '1 hour' WHERE id = ANY($1::uuid[])`, [ids]);

    const prune = await quick(['prune', '--older-than', '7'], envFor(db));
    expectExit(prune, 2, 'prune --older-than 7');
    assert.match(prune.stderr, /--older-than 7: give a unit, e.g\. --older-than 7d/);
    const left = await db.query(`SELECT 1 FROM "${db.schema}".outbox`);
    assert.equal(left.length, 2, 'prune with a bare number deleted nothing');

    const inbox = await quick(['inbox', 'prune', '--older-than', '30'], envFor(db));
    expectExit(inbox, 2, 'inbox prune --older-than 30');
    assert.match(inbox.stderr, /--older-than 30: give a unit, e\.g\. --older-than 30d/);

    const keepFlag = await quick(['relay', ...HTTP, '--keep-published', '7'], envFor(db));
    expectExit(keepFlag, 2, 'relay --keep-published 7');
    assert.match(keepFlag.stderr, /--keep-published 7: give a unit, e\.g\. --keep-published 7d/);

    const keepEnv = await quick(['relay', ...HTTP], envFor(db, { TXBOX_KEEP_PUBLISHED: '7' }));
    expectExit(keepEnv, 2, 'TXBOX_KEEP_PUBLISHED=7');
    assert.match(keepEnv.stderr, /TXBOX_KEEP_PUBLISHED=7: give a unit, e\.g\. TXBOX_KEEP_PUBLISHED=7d/);

    const compound = await quick(['prune', '--older-than', '1h30m'], envFor(db));
    expectExit(compound, 0, 'prune --older-than 1h30m');
    assert.equal((await db.query(`SELECT 1 FROM "${db.schema}".outbox`)).length, 2, 'rows done 1 h ago are younger than 1h30m');
  });

  it('stray positional arguments are refused in every command', async () => {
    const db = await freshDb();
    const cases: [string[], RegExp][] = [
      [['status', 'extra'], /unexpected argument "extra"/],
      [['migrate', 'now'], /unexpected argument "now"/],
      [['prune', '--older-than', '7d', 'x'], /unexpected argument "x"/],
      [['relay', '--transport', 'http', '--endpoint', 'orders=http://exa', 'mple.com/hook', '--secret', SECRET], /unexpected argument "mple\.com\/hook"/],
      [['parked', 'list', 'more'], /unexpected argument "more"/],
      [['inbox', 'dead', 'list', 'more'], /unexpected argument "more"/],
      [['replay', '--type', 'X', 'y'], /unexpected argument "y"/],
    ];
    const results = await Promise.all(cases.map(([args]) => quick(args, envFor(db))));
    results.forEach((r, i) => {
      const [args, pattern] = cases[i]!;
      expectExit(r, 2, args.join(' '));
      assert.match(r.stderr, pattern, args.join(' '));
      assert.match(r.stderr, /a value with spaces must be quoted/, args.join(' '));
    });
  });

  it('an unknown flag prints one clear line and the command usage', async () => {
    const r = await quick(['status', '--bogus'], envFor(undefined));
    expectExit(r, 2, 'status --bogus');
    const first = r.stderr.split('\n')[0]!;
    assert.equal(first, 'txbox status: unknown option --bogus; run txbox status --help for all options');
    assert.match(r.stderr, /^Usage: txbox status/m);
    assert.doesNotMatch(r.stderr, /txbox status: txbox status/);
    assert.doesNotMatch(r.stderr, /To specify a positional argument/);
    const missing = await quick(['prune', '--older-than'], envFor(undefined));
    expectExit(missing, 2, 'prune --older-than (no value)');
    assert.equal(missing.stderr.split('\n')[0], 'txbox prune: --older-than needs a value, e.g. --older-than 7d; run txbox prune --help for all options');
  });

  it('`txbox secret` prints a fresh Standard Webhooks secret that HttpTransport accepts', async () => {
    const [a, b] = await Promise.all([quick(['secret'], {}), quick(['secret'], {})]);
    expectExit(a, 0, 'secret');
    const secret = a.stdout.trim();
    assert.match(secret, /^whsec_[A-Za-z0-9+/]+={0,2}$/);
    assert.equal(Buffer.from(secret.slice('whsec_'.length), 'base64').length, 32);
    assert.notEqual(secret, b.stdout.trim(), 'each call makes a new secret');
    const transport = new HttpTransport({ endpoints: { orders: 'http://127.0.0.1:9/hook' }, secret });
    assert.ok(transport);
    const stray = await quick(['secret', 'x'], {});
    expectExit(stray, 2, 'secret x');
  });

  it('says a URL lacks its scheme, a role was refused, and the real table-name limit', async () => {
    const db = await freshDb();
    const noScheme = await quick(['relay', '--transport', 'http', '--endpoint', 'orders=localhost:8089/hook', '--secret', SECRET], envFor(db));
    expectExit(noScheme, 2, 'endpoint without scheme');
    assert.match(noScheme.stderr, /no scheme/);
    assert.match(noScheme.stderr, /http:\/\/localhost:8089\//);
    assert.doesNotMatch(noScheme.stderr, /uses localhost:/);

    const role = await quick(['status'], envFor(db, { TXBOX_DATABASE_URL: 'postgres://no_such_role_txbox@127.0.0.1:5432/test' }));
    expectExit(role, 3, 'unknown role');
    assert.doesNotMatch(role.stderr, /cannot reach/);
    assert.match(role.stderr, /refused the login/);

    const [leaseTtl, logLevel, batch, badUrl] = await Promise.all([
      quick(['relay', ...HTTP, '--lease-ttl-ms', '30s'], envFor(db)),
      quick(['status', '--log-level', 'verbose'], envFor(db)),
      quick(['prune', '--older-than', '7d', '--batch-size', 'lots'], envFor(db)),
      // mysql:// and mariadb:// pick the MySQL backend (test/cli/mysql-cli.test.ts); other schemes are refused.
      quick(['status'], envFor(db, { TXBOX_DATABASE_URL: 'mongodb://u@127.0.0.1/x' })),
    ]);
    expectExit(leaseTtl, 2, '--lease-ttl-ms 30s');
    assert.match(leaseTtl.stderr, /--lease-ttl-ms 30s: .*milliseconds.*e\.g\. --lease-ttl-ms 30000/);
    expectExit(logLevel, 2, '--log-level verbose');
    assert.match(logLevel.stderr, /--log-level verbose: choose debug, info, warn, error or silent/);
    expectExit(batch, 2, '--batch-size lots');
    assert.match(batch.stderr, /--batch-size lots: must be a (positive )?whole number.*e\.g\. --batch-size \d+/);
    expectExit(badUrl, 2, 'mongodb URL');
    assert.doesNotMatch(badUrl.stderr, /TXBOX_DATABASE_URL: databaseUrl:/, 'the field is named once');
    assert.match(badUrl.stderr, /TXBOX_DATABASE_URL: must be a postgres:\/\/ or postgresql:\/\/ URL/);

    const longTable = await quick(['status', '--table', 'x'.repeat(49)], envFor(db));
    expectExit(longTable, 2, 'long table name');
    assert.match(longTable.stderr, /at most 46/);
    assert.doesNotMatch(longTable.stderr, /\{0,62\}/);
  });
});
