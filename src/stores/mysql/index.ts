/**
 * MySQL 8 / MariaDB 10.6+ backend (the `mysql2` driver): outbox store, relay
 * store (polling, FOR UPDATE SKIP LOCKED), migrations (`migrateMysql`,
 * `migrateMysqlInbox`, under GET_LOCK; `print...` for your own migration
 * tool), parked/replay admin, the inbox (dedup and the handlers' writes in
 * one mysql2 transaction, held versions, dead letters), version-guarded
 * projections (`applyVersioned`) and the inbox admin; `MysqlAdmin` and
 * `MysqlInboxAdmin` also feed `txbox/dashboard`. The CLI runs on it
 * (docs/stores/mysql.md).
 */
export { MysqlOutboxStore, type MysqlOutboxStoreOptions } from './mysql-outbox-store.ts';
export { mysqlFromKysely, mysqlFromKnex, mysqlFromDrizzle } from './mysql-adapters.ts';
export { MysqlRelayStore, type MysqlRelayStoreOptions } from './mysql-relay-store.ts';
export { MysqlAdmin } from './mysql-admin.ts';
export { MysqlInboxStore, type MysqlInboxStoreOptions } from './mysql-inbox-store.ts';
export { MysqlInboxAdmin, type DeadEvent, type HeldEvent, type InboxConsumerStatus } from './mysql-inbox-admin.ts';
export { applyVersioned, type MysqlVersionedUpsert, type VersionedResult } from './mysql-projection.ts';
export { mysqlConnection, type MysqlConnection, type MysqlConnectionOptions, type MysqlExecutor } from './mysql-connection.ts';
export { mysqlNames, mysqlInboxNames, type MysqlNames, type MysqlInboxNames, type MysqlNamesOptions } from './mysql-sql.ts';
export {
  migrateMysql,
  migrateMysqlInbox,
  printMysqlMigrations,
  printMysqlInboxMigrations,
  mysqlMigrations,
  mysqlInboxMigrations,
  type MysqlMigration,
} from './mysql-migrations.ts';
