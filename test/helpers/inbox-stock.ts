/**
 * The stock projection the inbox tests of held events use: a database with
 * the inbox migrated into its schema and a `stock_view` table, and
 * `StockChanged` events of one SKU.
 */
import { uuidv7, type OutboxEvent } from 'txbox';
import { inboxNames, migrateInbox } from 'txbox/postgres';
import { openDb, type TestDb } from './databases.ts';

export async function openStockDb(kind: 'postgres' | 'pglite'): Promise<TestDb> {
  const db = await openDb(kind);
  await migrateInbox(db.connection, inboxNames({ schema: db.schema }));
  await db.query(`CREATE TABLE "${db.schema}".stock_view (sku text PRIMARY KEY, quantity int NOT NULL, version bigint NOT NULL)`);
  return db;
}

export function stockChanged(sku: string, version: number | null, quantity: number): OutboxEvent {
  return { id: uuidv7(), type: 'StockChanged', aggregateType: 'Sku', aggregateId: sku, key: `Sku:${sku}`, destination: 'stock', payload: { quantity }, headers: {}, occurredAt: new Date(), version };
}
