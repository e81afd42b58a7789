/**
 * `txbox` as a user runs it: a subprocess against the real PostgreSQL at
 * 127.0.0.1:5432, one fresh schema per test. Checks exit codes, messages,
 * config precedence, and what each command does to the tables.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { createOutbox, defineEvent, payloadType, type NewEvent } from 'txbox';
import { PostgresAdmin, PostgresOutboxStore } from 'txbox/postgres';
import { DATABASE_URL, openDb, uniqueSchema, type TestDb } from '../helpers/databases.ts';
import { runCli, startCli, type CliResult } from '../helpers/cli.ts';
import { startReceiver } from '../helpers/receiver.ts';
import { waitFor } from '../helpers/wait.ts';

const Placed = defineEvent({ type: 'OrderPlaced', aggregateType: 'Order', destination: 'orders', payload: payloadType<{ n: number }>() });
const Shipped = defineEvent({ type: 'ItemShipped', aggregateType: 'Item', destination: 'items', payload: payloadType<{ n: number }>() });
const Rejected = defineEvent({ type: 'Rejected', aggregateType: 'Bad', destination: 'rejects', payload: payloadType<{ n: number }>() });

const VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

let pool: pg.Pool;
let tmp: string;
const dbs: TestDb[] = [];

/** A fresh migrated schema, dropped in after(). */
async function freshDb(): Promise<TestDb> {
  const db = await openDb('postgres');
  dbs.push(db);
  return db;
}

function envFor(db: TestDb, extra: Record<string, string> = {}): Record<string, string> {
  return { TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_SCHEMA: db.schema, TXBOX_LOG_LEVEL: 'warn', ...extra };
}

function expectExit(r: CliResult, code: number, what: string): void {
  assert.equal(r.code, code, `${what}: exit ${r.code} (signal ${r.signal})\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
}

async function enqueue(db: TestDb, events: NewEvent<{ n: number }>[]): Promise<string[]> {
  const outbox = createOutbox({ store: new PostgresOutboxStore({ schema: db.schema }), events: [Placed, Shipped, Rejected] });
  return db.transaction((tx) => outbox.enqueue(tx, events));
}

const markPublished = (db: TestDb, ids: string[]): Promise<unknown> =>
  db.query(`UPDATE "${db.schema}".outbox SET state = 'published', done_at = now() WHERE id = ANY($1::uuid[])`, [ids]);

const markParked = (db: TestDb, ids: string[], error = 'HTTP 400 Bad Request from POST http://127.0.0.1/x: no such order'): Promise<unknown> =>
  db.query(`UPDATE "${db.schema}".outbox SET state = 'parked', attempts = 3, last_error = $2, parked_at = now() WHERE id = ANY($1::uuid[])`, [ids, error]);

async function rowsById(db: TestDb): Promise<Map<string, { state: string; attempts: number }>> {
  const rows = await db.query<{ id: string; state: string; attempts: number }>(`SELECT id, state, attempts FROM "${db.schema}".outbox WHERE replay_id IS NULL`);
  return new Map(rows.map((r) => [r.id, r]));
}

const events = (def: typeof Placed | typeof Shipped | typeof Rejected, count: number, from = 0): NewEvent<{ n: number }>[] =>
  Array.from({ length: count }, (_, i) => def({ aggregateId: `a${from + i}`, payload: { n: from + i } }));

describe('txbox CLI', { concurrency: true, timeout: 120_000 }, () => {
  before(async () => {
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    tmp = await mkdtemp(join(tmpdir(), 'txbox-cli-'));
  });
  after(async () => {
    await Promise.all(dbs.map((db) => db.close()));
    await pool.end();
    await rm(tmp, { recursive: true, force: true });
  });

  it('`txbox --help`, bare `txbox`, an unknown command and `--version`', async () => {
    const [help, bare, nope, version] = await Promise.all([runCli(['--help']), runCli([]), runCli(['nope']), runCli(['--version'])]);
    expectExit(help, 0, 'txbox --help');
    for (const c of ['migrate', 'relay', 'status', 'parked', 'replay', 'prune', 'demo']) assert.match(help.stdout, new RegExp(`^  ${c} `, 'm'), `help lists ${c}`);
    assert.match(help.stdout, /TXBOX_DATABASE_URL/);
    assert.match(help.stdout, /Exit codes/);
    expectExit(bare, 2, 'txbox');
    assert.match(bare.stdout, /Usage: txbox <command>/);
    expectExit(nope, 2, 'txbox nope');
    assert.match(nope.stderr, /unknown command "nope"/);
    expectExit(version, 0, 'txbox --version');
    assert.equal(version.stdout.trim(), VERSION);
  });

  it('`<command> --help` works for every command and names its options', async () => {
    const expected: Record<string, string[]> = {
      migrate: ['--print'],
      relay: ['--transport', '--endpoint', '--secret', '--unsigned', '--batch-size', '--lanes', '--lease-ttl-ms', '--poll-interval-ms', '--max-attempts', '--skip-parked', '--keep-published', '--delete-on-publish', '--synchronous-marks', '--breaker-base-delay', '--breaker-max-delay', '--relay-id'],
      status: ['--json'],
      parked: ['list', 'retry', 'skip', 'discard', '--id', '--all', '--destination', '--limit', '--json', '--actor'],
      replay: ['--from', '--to', '--key', '--type', '--destination', '--actor'],
      prune: ['--older-than', '--batch-size'],
      demo: ['--events', '--writers', '--rollback-rate', '--crash-relay-every', '--database-url', '--transport'],
    };
    const results = await Promise.all(Object.keys(expected).map((c) => runCli([c, '--help'])));
    for (const [i, [command, options]] of Object.entries(expected).entries()) {
      const r = results[i]!;
      expectExit(r, 0, `txbox ${command} --help`);
      assert.match(r.stdout, new RegExp(`Usage: txbox ${command}`));
      for (const option of [...options, '--database-url', '--schema', '--config']) assert.ok(r.stdout.includes(option), `txbox ${command} --help mentions ${option}:\n${r.stdout}`);
    }
  });

  it('bad usage exits 2, an unreachable or un-migrated database exits 3', async () => {
    const unmigrated = uniqueSchema('unmig');
    const [flag, noUrl, badSchema, unreachable, secret, notMigrated] = await Promise.all([
      runCli(['status', '--bogus'], { TXBOX_DATABASE_URL: DATABASE_URL }),
      runCli(['status']),
      runCli(['status', '--schema', 'x;drop', '--database-url', DATABASE_URL]),
      runCli(['status', '--database-url', 'postgres://postgres@127.0.0.1:1/test']),
      runCli(['status'], { TXBOX_DATABASE_URL: 'postgres://u:supersecret@127.0.0.1:1/x' }),
      runCli(['status', '--schema', unmigrated], { TXBOX_DATABASE_URL: DATABASE_URL }),
    ]);
    expectExit(flag, 2, 'unknown flag');
    assert.match(flag.stderr, /--bogus/);
    expectExit(noUrl, 2, 'no database URL');
    assert.match(noUrl.stderr, /TXBOX_DATABASE_URL/);
    expectExit(badSchema, 2, 'invalid schema');
    assert.match(badSchema.stderr, /--schema/);
    expectExit(unreachable, 3, 'unreachable database');
    assert.match(unreachable.stderr, /cannot reach the database/);
    expectExit(secret, 3, 'unreachable database with a password');
    assert.ok(!secret.stderr.includes('supersecret') && !secret.stdout.includes('supersecret'), `password leaked:\n${secret.stderr}`);
    assert.match(secret.stderr, /TXBOX_DATABASE_URL/, 'names where the URL came from');
    expectExit(notMigrated, 3, 'un-migrated schema');
    assert.match(notMigrated.stderr, /run `txbox migrate`/);
    const { rows } = await pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [unmigrated]);
    assert.equal(rows.length, 0, 'status does not create the schema');
  });

  it('config precedence: flag over environment over config file; a malformed file exits 2', async () => {
    const file = join(tmp, 'txbox.config.json');
    await writeFile(file, JSON.stringify({ schema: 'from_file', table: 'file_outbox' }));
    const broken = join(tmp, 'broken.json');
    await writeFile(broken, '{ "schema": "x", ');
    const [viaFlag, viaEnv, envWins, flagWins, malformed, missing] = await Promise.all([
      runCli(['migrate', '--print', '--config', file]),
      runCli(['migrate', '--print'], { TXBOX_CONFIG: file }),
      runCli(['migrate', '--print'], { TXBOX_CONFIG: file, TXBOX_SCHEMA: 'from_env' }),
      runCli(['migrate', '--print', '--schema', 'from_flag'], { TXBOX_CONFIG: file, TXBOX_SCHEMA: 'from_env' }),
      runCli(['migrate', '--print', '--config', broken]),
      runCli(['migrate', '--print'], { TXBOX_CONFIG: join(tmp, 'absent.json') }),
    ]);
    for (const [r, what] of [[viaFlag, '--config'], [viaEnv, 'TXBOX_CONFIG'], [envWins, 'env'], [flagWins, 'flag']] as const) expectExit(r, 0, what);
    assert.match(viaFlag.stdout, /CREATE TABLE IF NOT EXISTS "from_file"\."file_outbox"/);
    assert.match(viaEnv.stdout, /CREATE TABLE IF NOT EXISTS "from_file"\."file_outbox"/);
    assert.match(envWins.stdout, /CREATE TABLE IF NOT EXISTS "from_env"\."file_outbox"/, 'env overrides the schema, the file still gives the table');
    assert.doesNotMatch(envWins.stdout, /"from_file"/);
    assert.match(flagWins.stdout, /CREATE TABLE IF NOT EXISTS "from_flag"\."file_outbox"/);
    assert.doesNotMatch(flagWins.stdout, /"from_env"|"from_file"/);
    expectExit(malformed, 2, 'malformed config file');
    assert.ok(malformed.stderr.includes(broken), `names the file:\n${malformed.stderr}`);
    expectExit(missing, 2, 'missing config file');
    assert.ok(missing.stderr.includes('absent.json'), `names the file:\n${missing.stderr}`);
  });

  it('`txbox relay` rejects a bad endpoint URL and an unknown transport with exit 2', async () => {
    const env = { TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_SCHEMA: uniqueSchema('relaycfg') };
    const [badUrl, badScheme, unknown, none] = await Promise.all([
      runCli(['relay', '--transport', 'http', '--endpoint', 'orders=not a url'], env),
      runCli(['relay', '--transport', 'http', '--endpoint', 'orders=ftp://user:hunter2@example.com/x'], env),
      runCli(['relay', '--transport', 'carrier-pigeon'], env),
      runCli(['relay'], env),
    ]);
    expectExit(badUrl, 2, 'bad endpoint URL');
    assert.match(badUrl.stderr, /endpoints\.orders/);
    expectExit(badScheme, 2, 'ftp endpoint');
    assert.match(badScheme.stderr, /endpoints\.orders/);
    assert.ok(!badScheme.stderr.includes('hunter2'), `endpoint password leaked:\n${badScheme.stderr}`);
    expectExit(unknown, 2, 'unknown transport');
    assert.match(unknown.stderr, /"carrier-pigeon"/);
    assert.match(unknown.stderr, /choose one of http/);
    expectExit(none, 2, 'no transport');
    assert.match(none.stderr, /--transport/);
  });

  it('`txbox status` and `status --json` show backlog, parked, oldest age, relays and table health', async () => {
    const db = await freshDb();
    const placed = await enqueue(db, events(Placed, 6));
    const shipped = await enqueue(db, events(Shipped, 5));
    // orders: 2 pending (one 5 minutes old), 3 published, 1 parked; items: 3 pending, 2 parked.
    await markPublished(db, placed.slice(0, 3));
    await markParked(db, [placed[3]!, ...shipped.slice(0, 2)]);
    await db.query(`UPDATE "${db.schema}".outbox SET created_at = now() - interval '5 minutes' WHERE id = $1`, [placed[4]]);
    await db.query(`INSERT INTO "${db.schema}".outbox_relays (relay_id, host, pid, published_total, rate_per_minute) VALUES ('relay-status-test', 'host-a', 4242, 3, 3)`);

    const [text, json] = await Promise.all([runCli(['status'], envFor(db)), runCli(['status', '--json'], envFor(db))]);
    expectExit(text, 0, 'status');
    expectExit(json, 0, 'status --json');

    assert.match(text.stdout, /pending 5 .*parked 3/);
    assert.match(text.stdout, /^items\s+3\s+0\s+2\s+0\s+\S+s$/m);
    assert.match(text.stdout, /^orders\s+2\s+0\s+1\s+0\s+5\.\dm$/m, `oldest pending of orders is about 5 minutes:\n${text.stdout}`);
    assert.match(text.stdout, /^relay-status-test\s+alive, heartbeat [\d.]+s ago\s+0/m);
    assert.match(text.stdout, /^table: [\d.]+ MiB with indexes/m);

    const status = JSON.parse(json.stdout) as {
      destinations: { destination: string; pending: number; parked: number; backingOff: number; oldestPendingSeconds: number | null }[];
      relays: { relayId: string; host: string; pid: number; alive: boolean }[];
      table: { totalBytes: number; liveRows: number; deadRows: number };
      inFlight: number;
      publishedLastMinute: number;
    };
    const byDest = new Map(status.destinations.map((d) => [d.destination, d]));
    assert.deepEqual([...byDest.keys()].sort(), ['items', 'orders']);
    assert.equal(byDest.get('orders')!.pending, 2);
    assert.equal(byDest.get('orders')!.parked, 1);
    assert.ok(byDest.get('orders')!.oldestPendingSeconds! >= 299 && byDest.get('orders')!.oldestPendingSeconds! < 400, JSON.stringify(byDest.get('orders')));
    assert.equal(byDest.get('items')!.pending, 3);
    assert.equal(byDest.get('items')!.parked, 2);
    assert.ok(byDest.get('items')!.oldestPendingSeconds! < 120);
    assert.deepEqual(
      status.relays.map((r) => [r.relayId, r.host, r.pid, r.alive]),
      [['relay-status-test', 'host-a', 4242, true]],
    );
    assert.ok(status.table.totalBytes > 0);
    assert.equal(status.publishedLastMinute, 3);
  });

  it('`txbox status` shows each destination down: circuit open since, reason, next probe (text and --json)', async () => {
    const db = await freshDb();
    const circuits = [{ destination: 'billing', reason: 'destination-down: HTTP 401 Unauthorized from POST http://127.0.0.1:9/billing', openSince: '2026-11-24T10:00:00.000Z', nextProbeAt: '2026-11-24T10:00:08.000Z', failedProbes: 3 }];
    await db.query(`INSERT INTO "${db.schema}".outbox_relays (relay_id, host, pid, circuits) VALUES ('relay-down', 'h', 1, $1::jsonb), ('relay-ok', 'h', 2, '[]')`, [JSON.stringify(circuits)]);
    const [text, json, none] = await Promise.all([runCli(['status'], envFor(db)), runCli(['status', '--json'], envFor(db)), runCli(['status'], envFor(await freshDb()))]);
    expectExit(text, 0, 'status');
    assert.match(text.stdout, /^  billing: circuit open since 2026-11-24T10:00:00\.000Z \(relay relay-down\), reason destination-down: HTTP 401 Unauthorized from POST http:\/\/127\.0\.0\.1:9\/billing, next probe 2026-11-24T10:00:08\.000Z, 3 failed probes$/m);
    assert.match(none.stdout, /^destinations down: none/m);
    const status = JSON.parse(json.stdout) as { circuits: { destination: string; relayId: string; reason: string; openSince: string; nextProbeAt: string; failedProbes: number }[] };
    assert.deepEqual(status.circuits, [{ ...circuits[0], relayId: 'relay-down' }]);
  });

  it('`txbox parked` lists, retries, skips and discards parked events, with an audit trail', async () => {
    const db = await freshDb();
    const [a, b, c, d] = await enqueue(db, events(Placed, 4));
    const [pending] = await enqueue(db, events(Shipped, 1));
    await markParked(db, [a!, b!, c!, d!], 'HTTP 422 Unprocessable Entity from POST http://127.0.0.1/orders: total must be positive');
    const unknown = randomUUID();

    const [list, listJson, notUuid, notParked, noSelector] = await Promise.all([
      runCli(['parked', 'list'], envFor(db)),
      runCli(['parked', 'list', '--json', '--destination', 'orders'], envFor(db)),
      runCli(['parked', 'retry', '--id', 'not-a-uuid'], envFor(db)),
      runCli(['parked', 'retry', '--id', pending!, '--id', unknown], envFor(db)),
      runCli(['parked', 'retry'], envFor(db)),
    ]);
    expectExit(list, 0, 'parked list');
    for (const id of [a, b, c, d]) assert.ok(list.stdout.includes(id!), `list shows ${id}:\n${list.stdout}`);
    assert.ok(!list.stdout.includes(pending!), 'list does not show the pending event');
    assert.match(list.stdout, /HTTP 422 Unprocessable Entity .*total must be positive/);
    expectExit(listJson, 0, 'parked list --json');
    const parsed = JSON.parse(listJson.stdout) as { id: string; lastError: string; destination: string }[];
    assert.deepEqual(parsed.map((p) => p.id), [a, b, c, d]);
    assert.ok(parsed.every((p) => p.destination === 'orders' && /HTTP 422/.test(p.lastError)));
    expectExit(notUuid, 2, 'parked retry --id not-a-uuid');
    assert.match(notUuid.stderr, /--id: "not-a-uuid"/);
    expectExit(notParked, 1, 'parked retry of ids that are not parked');
    const said = notParked.stdout + notParked.stderr;
    assert.ok(said.includes(pending!) && said.includes(unknown), `lists the ids that were not parked:\n${said}`);
    expectExit(noSelector, 2, 'parked retry without --id or --all');

    const [retry, discard] = await Promise.all([
      runCli(['parked', 'retry', '--id', a!, '--actor', 'alice'], envFor(db)),
      runCli(['parked', 'discard', '--id', b!.toUpperCase(), '--actor', 'bob'], envFor(db)),
    ]);
    expectExit(retry, 0, 'parked retry --id');
    assert.match(retry.stdout, /retried 1 parked event/);
    expectExit(discard, 0, 'parked discard --id (upper case)');
    assert.match(discard.stdout, /discarded 1 parked event/);
    const skip = await runCli(['parked', 'skip', '--all'], envFor(db));
    expectExit(skip, 0, 'parked skip --all');
    assert.match(skip.stdout, /skipped 2 parked event/);

    const rows = await rowsById(db);
    assert.deepEqual(rows.get(a!), { id: a, state: 'pending', attempts: 0 });
    assert.equal(rows.has(b!), false, 'discarded row is deleted');
    assert.equal(rows.get(c!)!.state, 'skipped');
    assert.equal(rows.get(d!)!.state, 'skipped');
    assert.equal(rows.get(pending!)!.state, 'pending');
    const audit = await db.query<{ action: string; event_id: string; actor: string; detail: string | null }>(
      `SELECT action, event_id, actor, detail FROM "${db.schema}".outbox_audit ORDER BY seq`,
    );
    const me = userInfo().username;
    assert.deepEqual(
      audit.map((r) => [r.action, r.event_id, r.actor]).sort(),
      [['retry', a, 'alice'], ['discard', b, 'bob'], ['skip', c, me], ['skip', d, me]].sort(),
    );
    assert.ok(audit.every((r) => /HTTP 422/.test(r.detail ?? '')), 'audit keeps the last error');
  });

  it('`txbox replay` copies published events back as pending with the same ids and a replay header', async () => {
    const db = await freshDb();
    const placed = await enqueue(db, events(Placed, 3));
    const shipped = await enqueue(db, events(Shipped, 2));
    await markPublished(db, [placed[0]!, placed[1]!, ...shipped]); // placed[2] stays pending: not replayed

    const [replay, noFilter, badDate] = await Promise.all([
      runCli(['replay', '--type', 'OrderPlaced', '--actor', 'carol'], envFor(db)),
      runCli(['replay'], envFor(db)),
      runCli(['replay', '--from', 'yesterday-ish', '--type', 'OrderPlaced'], envFor(db)),
    ]);
    expectExit(replay, 0, 'replay --type');
    const replayId = /replay ([0-9a-f-]{36}): 2 event\(s\) queued/.exec(replay.stdout)?.[1];
    assert.ok(replayId, replay.stdout);
    expectExit(noFilter, 2, 'replay without a filter');
    assert.match(noFilter.stderr, /at least one filter/);
    expectExit(badDate, 2, 'replay with a bad date');
    assert.match(badDate.stderr, /--from: "yesterday-ish" is not a date/);

    const copies = await db.query<{ id: string; state: string; header: string | null; replay_id: string; seq: string }>(
      `SELECT id, state, headers->>'txbox-replay-id' AS header, replay_id, seq FROM "${db.schema}".outbox WHERE replay_id IS NOT NULL ORDER BY seq`,
    );
    assert.deepEqual(copies.map((c) => c.id), [placed[0], placed[1]], 'same ids, original order');
    for (const c of copies) {
      assert.equal(c.state, 'pending');
      assert.equal(c.header, replayId);
      assert.equal(c.replay_id, replayId);
    }
    const [maxOriginal] = await db.query<{ seq: string }>(`SELECT max(seq)::text AS seq FROM "${db.schema}".outbox WHERE replay_id IS NULL`);
    assert.ok(Number(copies[0]!.seq) > Number(maxOriginal!.seq), 'copies come after whatever was pending');
    const originals = await rowsById(db);
    assert.equal(originals.get(placed[0]!)!.state, 'published', 'originals untouched');
    const [audit] = await db.query<{ actor: string; detail: string }>(`SELECT actor, detail FROM "${db.schema}".outbox_audit WHERE action = 'replay'`);
    assert.equal(audit!.actor, 'carol');
    assert.match(audit!.detail, new RegExp(replayId));
    const [start] = await db.query<{ actor: string; detail: string }>(`SELECT actor, detail FROM "${db.schema}".outbox_audit WHERE action = 'replay-start'`);
    assert.deepEqual([start!.actor, JSON.parse(start!.detail)], ['carol', { replayId, type: 'OrderPlaced' }]);
  });

  it('a replay cut short is audited: its start is written before the first copy, with the id its copies carry', async () => {
    const db = await freshDb();
    await markPublished(db, await enqueue(db, events(Placed, 5)));
    const interrupted = new Error('interrupted after the first chunk');
    await assert.rejects(
      new PostgresAdmin(db.connection, { schema: db.schema }).replay({ type: 'OrderPlaced' }, 'dave', () => {
        throw interrupted;
      }, 2),
      (err: unknown) => err === interrupted,
    );
    const copies = await db.query<{ replay_id: string }>(`SELECT replay_id FROM "${db.schema}".outbox WHERE replay_id IS NOT NULL`);
    assert.equal(copies.length, 2, 'the first chunk was copied');
    const audit = await db.query<{ action: string; actor: string; detail: string }>(`SELECT action, actor, detail FROM "${db.schema}".outbox_audit ORDER BY at`);
    assert.deepEqual(audit.map((a) => [a.action, a.actor, JSON.parse(a.detail)]), [['replay-start', 'dave', { replayId: copies[0]!.replay_id, type: 'OrderPlaced' }]]);
  });

  it('`txbox prune --older-than 0s` deletes published and skipped rows only', async () => {
    const db = await freshDb();
    const ids = await enqueue(db, events(Placed, 7));
    await markPublished(db, ids.slice(0, 3));
    await markParked(db, [ids[3]!]);
    await db.query(`UPDATE "${db.schema}".outbox SET state = 'skipped', done_at = now() WHERE id = $1`, [ids[4]]);

    const [missing, badDuration] = await Promise.all([runCli(['prune'], envFor(db)), runCli(['prune', '--older-than', 'a week'], envFor(db))]);
    expectExit(missing, 2, 'prune without --older-than');
    assert.match(missing.stderr, /--older-than is required/);
    expectExit(badDuration, 2, 'prune with a bad duration');
    assert.match(badDuration.stderr, /--older-than a week: not a duration/);

    const kept = await runCli(['prune', '--older-than', '1h'], envFor(db));
    expectExit(kept, 0, 'prune --older-than 1h');
    assert.match(kept.stdout, /deleted 0 row/);
    const prune = await runCli(['prune', '--older-than', '0s', '--batch-size', '2'], envFor(db));
    expectExit(prune, 0, 'prune --older-than 0s');
    assert.match(prune.stdout, /deleted 4 row/);
    const rows = await rowsById(db);
    assert.deepEqual([...rows.keys()].sort(), [ids[3], ids[5], ids[6]].sort());
    assert.equal(rows.get(ids[3]!)!.state, 'parked');
  });

  it('`txbox relay --transport http` refuses to start without a secret unless --unsigned, which warns once', async () => {
    const db = await freshDb();
    const endpoint = ['--endpoint', 'orders=http://127.0.0.1:1/orders'];
    const refused = await runCli(['relay', '--transport', 'http', ...endpoint], envFor(db));
    expectExit(refused, 2, 'relay without a secret');
    assert.match(refused.stderr, /TXBOX_WEBHOOK_SECRET/);
    assert.match(refused.stderr, /npx txbox secret/);
    assert.match(refused.stderr, /--unsigned/);
    const empty = await runCli(['relay', '--transport', 'http', ...endpoint], envFor(db, { TXBOX_WEBHOOK_SECRET: '' }));
    expectExit(empty, 2, 'relay with an empty secret');
    assert.match(empty.stderr, /secret/);
    const relay = startCli(['relay', '--transport', 'http', ...endpoint, '--unsigned', '--relay-id', 'relay-unsigned'], envFor(db, { TXBOX_LOG_LEVEL: 'info' }));
    try {
      await waitFor('the unsigned relay started', () => /txbox relay started/.test(relay.stdout() + relay.stderr()), 20_000);
    } finally {
      relay.child.kill('SIGTERM');
    }
    const result = await relay.exited;
    expectExit(result, 0, 'unsigned relay after SIGTERM');
    const warnings = (result.stdout + result.stderr).split('\n').filter((l) => /UNSIGNED/.test(l));
    assert.equal(warnings.length, 1, `one warning:\n${result.stdout}\n${result.stderr}`);
    assert.match(warnings[0]!, /"level":"?(warn|40)/);
  });

  it('`txbox relay` publishes, parks what a receiver rejects, and stops on SIGTERM releasing its leases', async () => {
    const db = await freshDb();
    const receiver = await startReceiver();
    const rejecting: Server = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(400, { 'content-type': 'text/plain' }).end('unknown order'));
    });
    await new Promise<void>((resolve) => rejecting.listen(0, '127.0.0.1', resolve));
    const rejectUrl = `http://127.0.0.1:${(rejecting.address() as AddressInfo).port}/rejects`;
    try {
      const good = await enqueue(db, events(Shipped, 20));
      const bad = await enqueue(db, events(Rejected, 2));
      const relay = startCli(
        // --synchronous-marks: the marks of this relay wait for their WAL flush (the other relays of the suite mark asynchronously).
        ['relay', '--transport', 'http', '--endpoint', `items=${receiver.url}/items`, '--endpoint', `rejects=${rejectUrl}`, '--poll-interval-ms', '50', '--relay-id', 'relay-e2e', '--synchronous-marks'],
        envFor(db, { TXBOX_WEBHOOK_SECRET: receiver.secret, TXBOX_LOG_LEVEL: 'info' }),
      );
      try {
        await waitFor('every event published or parked', async () => {
          const [row] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE state IN ('published', 'parked')`);
          return row!.n === 22;
        }, 20_000);
        // Written after the relay started: found by NOTIFY or polling.
        const late = await enqueue(db, events(Shipped, 3, 100));
        await waitFor('late events delivered', () => late.every((id) => receiver.arrivals.some((x) => x.id === id)), 10_000);
        const live = await db.query<{ relay_id: string }>(`SELECT relay_id FROM "${db.schema}".outbox_relays`);
        assert.deepEqual(live.map((r) => r.relay_id), ['relay-e2e'], 'the running relay is registered');
        const [held] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_buckets WHERE owner = 'relay-e2e'`);
        assert.ok(held!.n > 0, 'the running relay holds leases');
      } finally {
        const stopping = Date.now();
        relay.child.kill('SIGTERM');
        const result = await relay.exited;
        expectExit(result, 0, 'relay after SIGTERM');
        assert.ok(Date.now() - stopping < 5000, `stopped in ${Date.now() - stopping} ms`);
      }
      assert.deepEqual(new Set(receiver.arrivals.map((x) => x.id)).size, 23);
      for (const id of good) assert.ok(receiver.arrivals.some((x) => x.id === id), `delivered ${id}`);
      const rows = await rowsById(db);
      for (const id of bad) {
        assert.equal(rows.get(id)!.state, 'parked');
      }
      const parkedErrors = await db.query<{ last_error: string }>(`SELECT last_error FROM "${db.schema}".outbox WHERE state = 'parked'`);
      for (const p of parkedErrors) assert.match(p.last_error, /HTTP 400 Bad Request.*unknown order/);
      const [owned] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox_buckets WHERE owner IS NOT NULL`);
      assert.equal(owned!.n, 0, 'leases released');
      const left = await db.query<{ relay_id: string; left: boolean; in_flight: number }>(
        `SELECT relay_id, left_at IS NOT NULL AS left, in_flight FROM "${db.schema}".outbox_relays`,
      );
      assert.deepEqual(left, [{ relay_id: 'relay-e2e', left: true, in_flight: 0 }], 'a gracefully stopped relay is marked left (txbox status shows it)');
    } finally {
      await receiver.close();
      await new Promise<void>((resolve) => rejecting.close(() => resolve()));
    }
  });

  it('`txbox demo` verifies on PGlite, on PostgreSQL (dropping its schema), and across relay crashes', async () => {
    const demoSchemas = async (): Promise<string[]> =>
      (await pool.query<{ nspname: string }>(`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'txbox\\_demo\\_%'`)).rows.map((r) => r.nspname);
    const beforeSchemas = new Set(await demoSchemas());
    const [pglite, postgres, crashing] = await Promise.all([
      runCli(['demo', '--events', '300'], {}, 90_000),
      runCli(['demo', '--events', '300', '--database-url', DATABASE_URL], {}, 90_000),
      runCli(['demo', '--events', '400', '--crash-relay-every', '300ms'], {}, 110_000),
    ]);
    for (const [r, what, database] of [
      [pglite, 'demo on PGlite', /PGlite/],
      [postgres, 'demo on PostgreSQL', /PostgreSQL/],
      [crashing, 'demo with relay crashes', /PGlite/],
    ] as const) {
      expectExit(r, 0, what);
      assert.match(r.stdout, database);
      assert.match(r.stdout, /lost\s+0\s+ok/, what);
      assert.match(r.stdout, /phantom\s+0\s+ok/, what);
      assert.match(r.stdout, /order violations\s+0\s+ok/, what);
    }
    const restarts = Number(/relay restarts\s+(\d+)/.exec(crashing.stdout)?.[1]);
    assert.ok(restarts > 0, `relay restarts ${restarts}`);
    assert.match(pglite.stdout, /relay restarts\s+0/);
    // Another test file's demo on PostgreSQL (test/cli/demo-cloud.test.ts) can be running now, its schema not yet
    // dropped: wait for every new demo schema to go; a schema this demo left behind never does.
    let left: string[] = [];
    const deadline = Date.now() + 120_000;
    do {
      left = (await demoSchemas()).filter((s) => !beforeSchemas.has(s));
      if (left.length > 0) await new Promise((r) => setTimeout(r, 500));
    } while (left.length > 0 && Date.now() < deadline);
    assert.deepEqual(left, [], 'the PostgreSQL demo drops its schema');
  });
  it('bad --skip-parked and a non-URL database exit 2; an unreachable demo database exits 3', async () => {
    const [skip, badUrl, demo] = await Promise.all([
      runCli(['relay', '--transport', 'http', '--endpoint', 'items=http://127.0.0.1:9/x', '--skip-parked', '[bad', '--database-url', DATABASE_URL]),
      runCli(['status', '--database-url', 'postgres://u:supersecret@127.0.0.1:99999/x']),
      runCli(['demo', '--events', '10', '--database-url', 'postgres://u:supersecret@127.0.0.1:1/x']),
    ]);
    assert.equal(skip.code, 2, skip.stderr);
    assert.match(skip.stderr, /--skip-parked/);
    assert.equal(badUrl.code, 2, badUrl.stderr);
    assert.match(badUrl.stderr, /--database-url: must be a postgres:\/\//);
    assert.equal(demo.code, 3, demo.stderr);
    assert.match(demo.stderr, /cannot reach the database/);
    for (const r of [badUrl, demo]) assert.doesNotMatch(r.stderr + r.stdout, /supersecret/);
  });

  it('`txbox demo` stops on the first SIGINT with exit 130 and a summary', async () => {
    const demo = startCli(['demo', '--events', '200000']);
    try {
      await waitFor('the demo is writing', () => /committed [1-9]/.test(demo.stderr()), 60_000);
    } catch (err) {
      // Not left running: a 200,000-event demo kept on loading the machine for minutes after this failed once.
      demo.child.kill('SIGKILL');
      throw err;
    }
    demo.child.kill('SIGINT');
    const r = await demo.exited;
    assert.equal(r.code, 130, r.stderr);
    assert.match(r.stdout, /interrupted/);
    assert.match(r.stdout, /phantom\s+0/);
  });
});
