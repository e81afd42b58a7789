/**
 * test/integration/inbox-held-race.test.ts on MariaDB with the MySQL inbox
 * (its per-key lock rows instead of PostgreSQL's advisory lock): a held event
 * must not stay held once its missing version is applied. The race, made deterministic with injected latency: the
 * handler of version 3 reads the projection at version 1 and decides to
 * hold; while it is still deciding, version 2 starts in another consumer
 * process (another Inbox on the same table). Before the fix, version 2
 * looked for held events before version 3's hold was written, found none,
 * and version 3 stayed held for good. And a held event whose release was
 * missed is run again by the periodic re-check (`heldRecheckIntervalMs`).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { createInbox, HoldEvent, uuidv7, type Inbox, type InboxStore, type OutboxEvent } from 'txbox';
import { MysqlInboxStore, applyVersioned, migrateMysqlInbox, mysqlConnection, mysqlInboxNames, type MysqlExecutor } from 'txbox/mysql';
import { MYSQL_URL } from '../helpers/mysql-conformance.ts';
import { waitFor } from '../helpers/wait.ts';

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => {};
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

const changed = (sku: string, version: number): OutboxEvent => ({
  id: uuidv7(),
  type: 'StockChanged',
  aggregateType: 'Sku',
  aggregateId: sku,
  key: `Sku:${sku}`,
  destination: 'stock',
  payload: { quantity: version * 10 },
  headers: {},
  occurredAt: new Date(),
  version,
});

describe('held events on MariaDB (MySQL inbox)', () => {
  const database = `txbox_myheld_${randomBytes(4).toString('hex')}`;
  let root: mysql.Connection;
  let pool: mysql.Pool;
  let store: MysqlInboxStore;
  before(async () => {
    root = await mysql.createConnection({ uri: MYSQL_URL });
    await root.query(`CREATE DATABASE \`${database}\``);
    pool = mysql.createPool({ uri: MYSQL_URL.replace(/\/[^/]*$/, `/${database}`), connectionLimit: 8, dateStrings: true, timezone: 'Z' });
    const connection = await mysqlConnection({ pool });
    await migrateMysqlInbox(connection, mysqlInboxNames());
    store = new MysqlInboxStore({ connection });
    await pool.query('CREATE TABLE stock_view (sku VARCHAR(50) PRIMARY KEY, quantity INT NOT NULL, version BIGINT NOT NULL) ENGINE = InnoDB');
  });
  after(async () => {
    await pool.end();
    await root.query(`DROP DATABASE IF EXISTS \`${database}\``);
    await root.end();
  });

  const rowsOf = async <R>(sql: string, values: unknown[]): Promise<R[]> => ((await pool.query(sql, values)) as unknown as [R[]])[0];
  const version = async (sku: string): Promise<number | null> => {
    const rows = await rowsOf<{ version: string }>('SELECT version FROM stock_view WHERE sku = ?', [sku]);
    return rows[0] ? Number(rows[0].version) : null;
  };
  const heldCount = async (consumer: string): Promise<number> => Number((await rowsOf<{ n: number }>(`SELECT count(*) AS n FROM inbox WHERE consumer = ? AND status = 'held'`, [consumer]))[0]!.n);

  function projecting(consumer: string, inboxStore: InboxStore<MysqlExecutor>, beforeHold?: (e: OutboxEvent) => Promise<void>, heldRecheckIntervalMs?: number): Inbox<MysqlExecutor> {
    const inbox = createInbox({ store: inboxStore, consumer, metrics: false, ...(heldRecheckIntervalMs ? { heldRecheckIntervalMs } : {}) });
    inbox.on('StockChanged', async (e: OutboxEvent, tx: MysqlExecutor) => {
      try {
        await applyVersioned(tx, { table: 'stock_view', id: { sku: e.aggregateId }, version: e.version!, values: { quantity: (e.payload as { quantity: number }).quantity }, onGap: 'hold' });
      } catch (err) {
        if (err instanceof HoldEvent) await beforeHold?.(e);
        throw err;
      }
    });
    return inbox;
  }

  it('version 3 deciding to hold while version 2 commits in another process: version 3 is applied, nothing stays held', async () => {
    const consumer = 'race';
    const v1 = changed('race', 1);
    const v2 = changed('race', 2);
    const v3 = changed('race', 3);
    const v2Started = deferred();
    const v2Done = deferred();
    // Process B's store: says when version 2's transaction starts.
    const storeB: InboxStore<MysqlExecutor> = {
      runBatch: (c, events, handler, options) => {
        if (events.some((e) => e.id === v2.id)) v2Started.resolve();
        return store.runBatch(c, events, handler, options);
      },
      recordFailure: (...a) => store.recordFailure(...a),
      hold: (...a) => store.hold(...a),
      recheckHeld: (...a) => store.recheckHeld(...a),
      redrivable: (...a) => store.redrivable(...a),
    };
    // Process A's store: its separate hold write (if any) waits until version 2 committed.
    const storeA: InboxStore<MysqlExecutor> = {
      ...storeB,
      runBatch: (...a) => store.runBatch(...a),
      hold: async (...a) => {
        await v2Done.promise;
        return store.hold(...a);
      },
    };
    let delayed = false;
    const a = projecting(consumer, storeA, async (e) => {
      // Latency injected while deciding to hold: version 2 starts meanwhile.
      if (e.id === v3.id && !delayed) {
        delayed = true;
        await v2Started.promise;
      }
    });
    const b = projecting(consumer, storeB);
    assert.equal((await a.process(v1)).status, 'processed');
    const holding = a.process(v3);
    const second = b.process(v2).finally(() => v2Done.resolve());
    const [o3, o2] = await Promise.all([holding, second]);
    assert.equal(o2.status, 'processed');
    assert.ok(o3.status === 'held' || o3.status === 'processed', o3.status);
    assert.equal(await version('race'), 3, 'version 3 is applied once version 2 is');
    assert.equal(await heldCount(consumer), 0, 'nothing stays held');
  });

  it('version 2 claimed while version 3 is being held in its own transaction: version 2 waits on the key lock, sees the hold and releases it', async () => {
    // Without the per-key lock rows, version 2 looks for held events before version 3's hold commits
    // (the projection row lock only makes its handler wait), finds none, and version 3 stays held.
    const consumer = 'held-in-tx';
    const v2 = changed('intx', 2);
    const v3 = changed('intx', 3);
    const v2Started = deferred();
    const aHolding = deferred();
    const storeB: InboxStore<MysqlExecutor> = {
      runBatch: (c, events, handler, options) => {
        if (events.some((e) => e.id === v2.id)) v2Started.resolve();
        return store.runBatch(c, events, handler, options);
      },
      recordFailure: (...a) => store.recordFailure(...a),
      hold: (...a) => store.hold(...a),
      recheckHeld: (...a) => store.recheckHeld(...a),
      redrivable: (...a) => store.redrivable(...a),
    };
    let runsOfV3 = 0;
    const a = projecting(consumer, store, async (e) => {
      if (e.id !== v3.id || ++runsOfV3 !== 2) return;
      // The second run holds in its own transaction: version 2 starts meanwhile, and is given time to get as far as it can.
      aHolding.resolve();
      await v2Started.promise;
      await new Promise((r) => setTimeout(r, 300));
    });
    const b = projecting(consumer, storeB);
    assert.equal((await a.process(changed('intx', 1))).status, 'processed');
    const holding = a.process(v3);
    await aHolding.promise;
    const [o3, o2] = await Promise.all([holding, b.process(v2)]);
    assert.deepEqual([o3.status, o2.status], ['held', 'processed']);
    assert.equal(await version('intx'), 3, 'version 2 released the held version 3');
    assert.equal(await heldCount(consumer), 0, 'nothing stays held');
    a.stop();
    b.stop();
  });

  it('group commit: when process() of the missing version resolves, its held successor is already applied (released before the caller hears back)', async () => {
    const consumer = 'grouped';
    // Latency injected into the release's first look: the caller would otherwise see the answer first.
    const slowLook: InboxStore<MysqlExecutor> = {
      runBatch: (...a) => store.runBatch(...a),
      recordFailure: (...a) => store.recordFailure(...a),
      hold: (...a) => store.hold(...a),
      recheckHeld: (...a) => store.recheckHeld(...a),
      redrivable: async (...a) => {
        await new Promise((r) => setTimeout(r, 300));
        return store.redrivable(...a);
      },
    };
    const inbox = projecting(consumer, slowLook);
    assert.equal((await inbox.process(changed('g', 1))).status, 'processed');
    assert.equal((await inbox.process(changed('g', 3))).status, 'held');
    // Two keys at once: one group-commit batch.
    const [seen] = await Promise.all([inbox.process(changed('g', 2)).then(() => version('g')), inbox.process(changed('other', 1))]);
    assert.equal(seen, 3, 'version 3 was applied before the caller of version 2 heard back');
  });

  it('a held event whose release was missed is applied by the periodic re-check', async () => {
    const consumer = 'recheck';
    const inbox = projecting(consumer, store, undefined, 50);
    for (const v of [1, 2]) assert.equal((await inbox.process(changed('lost', v))).status, 'processed');
    // As if version 3 was held and the release after version 2 never ran (a process killed between them).
    const v3 = changed('lost', 3);
    const v4 = changed('lost', 4);
    await store.hold(consumer, v4, 'version 4 waits for version 3');
    await store.hold(consumer, v3, 'version 3 waits for version 2');
    // Another key whose gap is still open stays held (and is looked at again later).
    await store.hold(consumer, changed('open', 5), 'version 5 waits for version 1');
    assert.equal(await heldCount(consumer), 3);
    inbox.start();
    try {
      await waitFor('versions 3 and 4 applied by the re-check', async () => (await version('lost')) === 4, 15_000);
    } finally {
      inbox.stop();
    }
    assert.equal(await heldCount(consumer), 1, 'the open gap stays held');
    const [open] = await rowsOf<{ status: string }>("SELECT status FROM inbox WHERE consumer = ? AND `key` = 'Sku:open'", [consumer]);
    assert.equal(open!.status, 'held');
  });

  it('the re-check runs in a consumer process that never called start(): process() starts it', async () => {
    const consumer = 'autostart';
    const inbox = projecting(consumer, store, undefined, 50);
    try {
      for (const v of [1, 2]) assert.equal((await inbox.process(changed('auto', v))).status, 'processed');
      // As if a consumer was killed between version 2's commit and the release of version 3.
      await store.hold(consumer, changed('auto', 3), 'version 3 waits for version 2');
      await waitFor('version 3 applied by the re-check nobody started by hand', async () => (await version('auto')) === 3, 15_000);
    } finally {
      inbox.stop();
    }
    assert.equal(await heldCount(consumer), 0);
    assert.throws(() => createInbox({ store, consumer: 'x', autoStart: 'yes' as unknown as boolean }), { field: 'autoStart' });
  });
});
