/**
 * The producer benchmark's transaction driven by pgbench, PostgreSQL's own C
 * client, instead of Node: what one more statement costs the database alone,
 * without node-postgres in the way. Same tables and transaction as
 * bench/producer.ts (BEGIN; INSERT an order; UPDATE one of 1000 customers;
 * [one more statement]; COMMIT), 4 clients, prepared protocol (-M prepared).
 *
 *   node --conditions=txbox-source --import tsx bench/producer-pgbench.ts
 *
 * Modes: business only; + SELECT 1; + INSERT of the payload into a jsonb
 * table with only a primary key; + txbox's own single-event INSERT (the text
 * of PostgresOutboxStore with notify off, the parameters written as SQL
 * expressions: a UUID made of the time in µs and random bits, which appends
 * to the id index as the client's UUIDv7 does, the same
 * ~450-byte payload and headers); the same INSERT into copies of the outbox
 * table without the event id's unique index, without the claim's open-rows
 * index, and with only its primary key (what each index costs). Modes
 * run interleaved for BENCH_ROUNDS rounds, each after TRUNCATE, VACUUM and
 * CHECKPOINT.
 *
 * Needs `pgbench` on the PATH (package postgresql-client or postgresql-contrib).
 * Settings: BENCH_SECONDS (8 per mode and round), BENCH_CLIENTS (4), BENCH_ROUNDS (3),
 * BENCH_SYNC_COMMIT (on; "off" takes the WAL flush out and leaves CPU only),
 * BENCH_MODES (comma list of mode names, default all).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { insertEventsSql } from '../src/stores/postgres/postgres-sql.ts';
import { createBusinessTables, CUSTOMERS, DATABASE_URL, envInt, fmtInt, log, median, orderPayload, printTable, summary, withBench } from './lib.ts';

const SECONDS = envInt('BENCH_SECONDS', 8);
const CLIENTS = envInt('BENCH_CLIENTS', 4);
const ROUNDS = envInt('BENCH_ROUNDS', 3);
const SYNC_COMMIT = process.env.BENCH_SYNC_COMMIT ?? 'on';
if (!['on', 'off', 'local'].includes(SYNC_COMMIT)) throw new Error(`BENCH_SYNC_COMMIT must be on, off or local, got ${JSON.stringify(SYNC_COMMIT)}`);

const literal = (text: string): string => `'${text.replaceAll("'", "''")}'`;

await withBench('pgbench', async (bench) => {
  try {
    execFileSync('pgbench', ['--version'], { stdio: 'ignore' });
  } catch {
    throw new Error('pgbench is not on the PATH: install postgresql-client (Debian: apt-get install postgresql-client)');
  }
  const s = `"${bench.schema}"`;
  await createBusinessTables(bench);

  const payload = literal(JSON.stringify(orderPayload(1234567, 42)));
  // txbox's statement, parameters replaced from the highest number down so that $1 does not match $10.
  const params: Record<number, string> = {
    10: 'NULL',
    9: 'now()',
    8: literal(JSON.stringify({ 'content-type': 'application/json' })),
    7: payload,
    6: `'orders'`,
    5: `'Order:' || 'c' || :c::text`, // a ':c' inside a literal would be taken for the variable
    4: `'c' || :c::text`,
    3: `'Order'`,
    2: `'OrderPlaced'`,
    // Like a UUIDv7, which txbox's client sends: a time prefix (so inserts append to the id index) and random
    // bits. gen_random_uuid() would add a system call and spread inserts over the whole index.
    1: `(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000000)::bigint), 16, '0') || left(md5(:r::text), 16))`,
  };
  let enqueue = insertEventsSql(bench.names, false, false, true);
  for (const n of Object.keys(params).map(Number).sort((a, b) => b - a)) enqueue = enqueue.replaceAll(`$${n}`, params[n]!);
  enqueue = enqueue.replace(/\s+/g, ' ');

  // Copies of the outbox (columns, defaults, generated column, check) without some of its secondary
  // indexes: `drop` picks them by their definition.
  const copies: Record<string, (indexdef: string) => boolean> = {
    outbox_pk_only: (def) => !def.includes('_pkey'),
    outbox_no_id_index: (def) => def.includes('(id)'),
    outbox_no_open_index: (def) => def.includes('(seq) WHERE'),
  };
  for (const [table, drop] of Object.entries(copies)) {
    await bench.sql(`CREATE TABLE ${s}.${table} (LIKE ${bench.names.outbox} INCLUDING ALL)`);
    const indexes = await bench.sql<{ name: string; def: string }>(
      `SELECT indexname AS name, indexdef AS def FROM pg_indexes WHERE schemaname = $1 AND tablename = $2`,
      [bench.schema, table],
    );
    const dropped = indexes.filter((i) => drop(i.def));
    if (dropped.length === 0) throw new Error(`no index of ${table} to drop: the outbox's indexes changed, update this benchmark`);
    for (const { name } of dropped) await bench.sql(`DROP INDEX ${s}."${name}"`);
  }
  const into = (table: string): string => `${enqueue.replace(bench.names.outbox, `${s}.${table}`)};`;

  const business = [
    `\\set c random(0, ${CUSTOMERS - 1})`,
    '\\set t random(1000, 9999)',
    '\\set r random(1, 9000000000000000000)',
    'BEGIN;',
    `INSERT INTO ${s}.orders (customer_id, total, status) VALUES (:c, :t, 'placed') RETURNING id;`,
    `UPDATE ${s}.customers SET orders = orders + 1, spent = spent + :t WHERE id = :c;`,
  ];
  const allModes: { name: string; what: string; extra?: string }[] = [
    { name: 'business', what: '(a) business transaction only' },
    { name: 'roundtrip', what: '(a) + SELECT 1', extra: 'SELECT 1;' },
    { name: 'plain-insert', what: '(a) + INSERT of the payload into a jsonb table with only a PK', extra: `INSERT INTO ${s}.plain_events (payload) VALUES (${payload}::jsonb);` },
    { name: 'enqueue', what: "(a) + txbox's single-event INSERT", extra: `${enqueue};` },
    { name: 'enqueue-no-id-index', what: "(a) + the same INSERT into a copy of the outbox without the event id's unique index", extra: into('outbox_no_id_index') },
    { name: 'enqueue-no-open-index', what: "(a) + the same INSERT into a copy of the outbox without the claim's open-rows index", extra: into('outbox_no_open_index') },
    { name: 'enqueue-pk-only', what: '(a) + the same INSERT into a copy of the outbox with only its primary key', extra: into('outbox_pk_only') },
  ];
  const wanted = process.env.BENCH_MODES?.split(',').map((m) => m.trim());
  const modes = allModes.filter((m) => m.name === 'business' || !wanted || wanted.includes(m.name));
  const dir = mkdtempSync(join(tmpdir(), 'txbox-pgbench-'));
  try {
    for (const m of modes) writeFileSync(join(dir, `${m.name}.sql`), [...business, ...(m.extra ? [m.extra] : []), 'END;', ''].join('\n'));
    const url = new URL(DATABASE_URL);
    const env = {
      ...process.env,
      PGOPTIONS: `-c synchronous_commit=${SYNC_COMMIT}`,
      ...(url.password ? { PGPASSWORD: decodeURIComponent(url.password) } : {}),
    };
    const args = ['-n', '-M', 'prepared', '-c', String(CLIENTS), '-j', '1', '-T', String(SECONDS), '-h', url.hostname, '-p', url.port || '5432', '-U', decodeURIComponent(url.username || 'postgres')];
    const db = url.pathname.slice(1) || 'postgres';
    log(`pgbench producer benchmark: ${CLIENTS} clients, ${SECONDS} s per mode, ${ROUNDS} round(s), synchronous_commit ${SYNC_COMMIT}, schema ${bench.schema}`);
    const tps = new Map<string, number[]>(modes.map((m) => [m.name, []]));
    for (let round = 1; round <= ROUNDS; round++) {
      for (const m of round % 2 === 1 ? modes : [...modes].reverse()) {
        await bench.sql(`TRUNCATE ${s}.orders, ${s}.plain_events, ${bench.names.outbox}, ${Object.keys(copies).map((t) => `${s}.${t}`).join(', ')}`);
        await bench.sql(`VACUUM ${s}.customers`);
        await bench.sql('CHECKPOINT');
        const out = execFileSync('pgbench', [...args, '-f', join(dir, `${m.name}.sql`), db], { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
        const found = /tps = ([\d.]+)/.exec(out);
        if (!found) throw new Error(`pgbench printed no tps for ${m.name}:\n${out}`);
        tps.get(m.name)!.push(Number(found[1]));
        log(`round ${round} ${m.name}: ${fmtInt(Number(found[1]))} tx/s`);
      }
    }
    const base = tps.get('business')!;
    const rows = modes.map((m) => {
      const rs = tps.get(m.name)!;
      const slow = rs.map((r, i) => 1 - r / base[i]!);
      const slowText = m.name === 'business' ? '' : `${(median(slow) * 100).toFixed(1)}% (${slow.map((x) => (x * 100).toFixed(0)).join(' / ')})`;
      if (m.name !== 'business') summary('producer-pgbench', `${m.name}: median slowdown ${(median(slow) * 100).toFixed(1)}% vs business-only (median ${fmtInt(median(base))} tx/s), synchronous_commit ${SYNC_COMMIT}`);
      return [m.name, m.what, fmtInt(median(rs)), rs.map(fmtInt).join(' / '), slowText];
    });
    console.log(`\nMedian of ${ROUNDS} round(s), pgbench, ${CLIENTS} clients, synchronous_commit ${SYNC_COMMIT}; slowdown = 1 - mode / business-only of the same round:`);
    printTable(['mode', 'what', 'tx/s (median)', 'per round', 'slowdown vs (a), median (per round)'], rows);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
