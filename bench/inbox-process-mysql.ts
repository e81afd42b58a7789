/**
 * bench/inbox-process.ts on MySQL/MariaDB (TXBOX_BENCH_MYSQL_URL, default
 * mysql://root@127.0.0.1:3306/test): Inbox.process with a version-guarded
 * projection, no broker, BENCH_KEYS keys (default 64) each handled in order,
 * all keys at once, BENCH_VERSIONS versions per key (default 200); each event
 * one `applyVersioned` upsert with `onGap: 'hold'` in the inbox transaction
 * (group commit on, the default). A database of its own, dropped after.
 * Prints throughput, p50/p99 of one `process` call, and RSS. Never asserts timings.
 *
 *   node --conditions=txbox-source --import tsx bench/inbox-process-mysql.ts
 */
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { createInbox, type OutboxEvent } from 'txbox';
import { MysqlInboxStore, applyVersioned, migrateMysqlInbox, mysqlConnection, mysqlInboxNames } from 'txbox/mysql';
import { envInt, fmtInt, log, percentile, perSec, summary } from './lib.ts';

const KEYS = envInt('BENCH_KEYS', 64);
const VERSIONS = envInt('BENCH_VERSIONS', 200);
const URL = process.env.TXBOX_BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

const database = `txbox_bench_inbox_${randomBytes(4).toString('hex')}`;
const root = await mysql.createConnection({ uri: URL });
await root.query(`CREATE DATABASE \`${database}\``);
const pool = mysql.createPool({ uri: URL.replace(/\/[^/]*$/, `/${database}`), connectionLimit: 8, dateStrings: true, timezone: 'Z' });
try {
  const connection = await mysqlConnection({ pool });
  await migrateMysqlInbox(connection, mysqlInboxNames());
  await pool.query('CREATE TABLE view (`key` VARCHAR(100) PRIMARY KEY, n INT NOT NULL, version BIGINT NOT NULL) ENGINE = InnoDB');
  const inbox = createInbox({ store: new MysqlInboxStore({ connection }), consumer: 'bench', metrics: false });
  inbox.on('Changed', async (e: OutboxEvent, tx) => {
    await applyVersioned(tx, { table: 'view', id: { key: e.key }, version: e.version!, values: { n: e.version }, onGap: 'hold' });
  });
  const event = (k: number, v: number): OutboxEvent => ({
    id: crypto.randomUUID(),
    type: 'Changed',
    aggregateType: 'Item',
    aggregateId: String(k),
    key: `Item:${k}`,
    destination: 'items',
    payload: { v },
    headers: {},
    occurredAt: new Date(),
    version: v,
  });
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: KEYS }, async (_, k) => {
      for (let v = 1; v <= VERSIONS; v++) {
        const t = performance.now();
        const outcome = await inbox.process(event(k, v));
        latencies.push(performance.now() - t);
        if (outcome.status !== 'processed') throw new Error(`unexpected ${outcome.status}`);
      }
    }),
  );
  const ms = performance.now() - started;
  inbox.stop();
  latencies.sort((a, b) => a - b);
  const n = KEYS * VERSIONS;
  const rssMb = process.memoryUsage().rss / 1024 / 1024;
  log(`MySQL/MariaDB: ${fmtInt(n)} events over ${KEYS} keys in ${fmtInt(ms)} ms: ${fmtInt(perSec(n, ms))} events/s, process() p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms, RSS ${rssMb.toFixed(0)} MB`);
  summary('inbox-process-mysql', `${fmtInt(perSec(n, ms))} events/s, p50 ${percentile(latencies, 50).toFixed(1)} ms, p99 ${percentile(latencies, 99).toFixed(1)} ms (${KEYS} keys x ${VERSIONS} versions)`);
} finally {
  await pool.end();
  await root.query(`DROP DATABASE IF EXISTS \`${database}\``);
  await root.end();
}
