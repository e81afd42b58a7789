/**
 * The write side is typed by the store's transaction (issue 15): `createOutbox`
 * and `createInbox` infer `Tx` from the store, so a client of another database
 * does not compile. The `@ts-expect-error` lines are checked by `tsc --noEmit`
 * (part of `npm test`): each fails the typecheck if it ever compiles.
 * At run time, the store's `checkTransaction` refuses what is not its transaction.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { createInbox, createOutbox, defineEvent, payloadType, InvalidEventError, NotInTransactionError, type InboxStore, type OutboxStore, type PreparedEvent, type SqlExecutor } from 'txbox';
import { PostgresOutboxStore } from 'txbox/postgres';
import type { PoolConnection } from 'mysql2/promise';
import { MysqlOutboxStore } from '../../src/stores/mysql/index.ts';
import { Firestore, type Transaction, type WriteBatch } from '@google-cloud/firestore';
import { FirestoreInboxStore, FirestoreOutboxStore, applyVersioned as firestoreApplyVersioned } from '../../src/stores/firestore/index.ts';

const E = defineEvent({ type: 'E', aggregateType: 'A', destination: 'd', payload: payloadType<{ n: number }>() });

/** A second dialect's transaction, shaped like mysql2's connection (`execute` with `?` placeholders), which pg's client lacks. */
interface OtherTx {
  execute(sql: string, values: unknown[]): Promise<[unknown, unknown]>;
}

class OtherOutboxStore implements OutboxStore<OtherTx> {
  readonly inserted: PreparedEvent[] = [];
  async insert(tx: OtherTx, events: readonly PreparedEvent[]): Promise<void> {
    await tx.execute('INSERT INTO outbox ...', events.map((e) => e.id));
    this.inserted.push(...events);
  }
  checkTransaction(tx: unknown) {
    return typeof (tx as Partial<OtherTx>).execute === 'function' ? undefined : { kind: 'invalid' as const, message: 'is not a connection of this database: pass the connection you began the transaction on' };
  }
}

it('a store of another database takes its own transaction, and a pg client neither compiles nor runs', async () => {
  const store = new OtherOutboxStore();
  const outbox = createOutbox({ store, events: [E] });
  const seen: unknown[][] = [];
  const otherTx: OtherTx = { execute: async (_sql, values) => (seen.push(values), [[], []]) };
  const [id] = await outbox.enqueue(otherTx, E({ aggregateId: 1, payload: { n: 1 } }));
  assert.deepEqual(seen, [[id]]);

  const pgClient = { query: async () => ({ rows: [] }), getTransactionStatus: () => 'T' } as unknown as pg.PoolClient;
  // @ts-expect-error a pg client is not this store's transaction
  await assert.rejects(outbox.enqueue(pgClient, E({ aggregateId: 1, payload: { n: 1 } })), (err: unknown) => err instanceof InvalidEventError && /tx/.test(err.message));
  assert.equal(store.inserted.length, 1, 'the refused call wrote nothing');

  // The PostgreSQL API is unchanged: Tx is SqlExecutor, inferred.
  const pgOutbox = createOutbox({ store: new PostgresOutboxStore(), events: [E] });
  const accepts: (tx: SqlExecutor) => Promise<string[]> = (tx) => pgOutbox.enqueue(tx, E({ aggregateId: 1, payload: { n: 1 } }));
  assert.equal(typeof accepts, 'function');
  // @ts-expect-error and the other database's transaction does not fit PostgreSQL's store
  void (() => pgOutbox.enqueue(otherTx, E({ aggregateId: 1, payload: { n: 1 } })));
});

it("an inbox's handlers get its store's transaction type", () => {
  const store = {} as InboxStore<OtherTx>;
  const inbox = createInbox({ store: { ...store, runBatch: async () => ({ ran: [], heldKeys: [] }) } as InboxStore<OtherTx>, consumer: 'types', autoStart: false, metrics: false });
  inbox.on(E, async (_event, tx) => {
    await tx.execute('UPDATE stock SET n = ?', [1]);
    // @ts-expect-error the handler's tx is not a pg client
    await tx.query('SELECT 1');
  });
  assert.equal(inbox.consumer, 'types');
});

it('the MySQL store takes a mysql2 connection; a pg client does not compile and is refused at run time', async () => {
  const outbox = createOutbox({ store: new MysqlOutboxStore(), events: [E] });
  const typed: (conn: PoolConnection) => Promise<string[]> = (conn) => outbox.enqueue(conn, E({ aggregateId: 1, payload: { n: 1 } }));
  assert.equal(typeof typed, 'function');
  const pgClient = { query: async () => ({ rows: [] }), getTransactionStatus: () => 'T' } as unknown as pg.PoolClient;
  // @ts-expect-error a pg client is not a mysql2 connection
  await assert.rejects(outbox.enqueue(pgClient, E({ aggregateId: 1, payload: { n: 1 } })), (err: unknown) => err instanceof InvalidEventError && /mysql2 connection/.test(err.message));
  const pool = { query: async () => [[], []], beginTransaction: async () => {}, getConnection: async () => ({}) } as unknown as PoolConnection; // a Pool's shape: getConnection without release
  await assert.rejects(outbox.enqueue(pool, E({ aggregateId: 1, payload: { n: 1 } })), /mysql2 Pool, not a transaction/);
});

it('the Firestore store takes a Transaction or a WriteBatch; a pg client does not compile and is refused at run time, the Firestore instance is autocommit', async () => {
  // No connection is made: the client connects lazily, and nothing here reaches the network.
  const firestore = new Firestore({ projectId: 'txbox-types' });
  const outbox = createOutbox({ store: new FirestoreOutboxStore({ firestore }), events: [E] });
  const inTx: (tx: Transaction) => Promise<string[]> = (tx) => outbox.enqueue(tx, E({ aggregateId: 1, payload: { n: 1 } }));
  const inBatch: (batch: WriteBatch) => Promise<string[]> = (batch) => outbox.enqueue(batch, E({ aggregateId: 1, payload: { n: 1 } }));
  assert.equal(typeof inTx, 'function');
  assert.equal(typeof inBatch, 'function');
  const pgClient = { query: async () => ({ rows: [] }), getTransactionStatus: () => 'T' } as unknown as pg.PoolClient;
  // @ts-expect-error a pg client is not a Firestore transaction
  await assert.rejects(outbox.enqueue(pgClient, E({ aggregateId: 1, payload: { n: 1 } })), (err: unknown) => err instanceof InvalidEventError && /not a Firestore Transaction or WriteBatch/.test(err.message));
  // @ts-expect-error the Firestore instance is not a transaction either
  await assert.rejects(outbox.enqueue(firestore, E({ aggregateId: 1, payload: { n: 1 } })), (err: unknown) => err instanceof NotInTransactionError && /runTransaction/.test(err.message));
  const batch = firestore.batch();
  assert.deepEqual((await outbox.enqueue(batch, E({ aggregateId: 1, payload: { n: 1 } }))).length, 1, 'a WriteBatch takes the events (written when it commits; this one never does)');
  await firestore.terminate();
});

it("the Firestore inbox's handlers get a Firestore Transaction: a Firestore outbox takes it, a SQL query does not compile", async () => {
  // No connection is made: nothing here reaches the network.
  const firestore = new Firestore({ projectId: 'txbox-types' });
  const inbox = createInbox({ store: new FirestoreInboxStore({ firestore }), consumer: 'types', autoStart: false, metrics: false });
  const outbox = createOutbox({ store: new FirestoreOutboxStore({ firestore }), events: [E] });
  inbox.on(E, async (event, tx) => {
    const read: Transaction = tx;
    await firestoreApplyVersioned(read, { document: firestore.collection('view').doc(String(event.aggregateId)), version: 1, values: { n: event.payload.n } });
    await outbox.enqueue(tx, E({ aggregateId: 1, payload: { n: 1 } }));
    // @ts-expect-error the handler's tx is not a SQL executor
    await tx.query('SELECT 1');
  });
  assert.equal(inbox.consumer, 'types');
  await firestore.terminate();
});
