/**
 * MySQL 8 / MariaDB 10.6+ backend (the `mysql2` driver): outbox store, relay
 * store, migrations and parked/replay admin. The inbox, projections, status
 * and the CLI are not there yet (docs/stores/mysql.md).
 */
export { MysqlOutboxStore, type MysqlOutboxStoreOptions } from './mysql-outbox-store.ts';
export { MysqlRelayStore, type MysqlRelayStoreOptions } from './mysql-relay-store.ts';
export { MysqlAdmin } from './mysql-admin.ts';
export { mysqlConnection, type MysqlConnection, type MysqlConnectionOptions, type MysqlExecutor } from './mysql-connection.ts';
export { mysqlNames, type MysqlNames, type MysqlNamesOptions } from './mysql-sql.ts';
export { migrateMysql, printMysqlMigrations, mysqlMigrations, type MysqlMigration } from './mysql-migrations.ts';
