import { CliError, configMessage } from '../cli-error.ts';
import type { Command } from '../command.ts';
import { openDatabase } from '../database.ts';
import { migratePostgres, printMigrations } from '../../stores/postgres/postgres-migrations.ts';
import { postgresNames } from '../../stores/postgres/postgres-sql.ts';
import { ConfigError } from '../../core/errors.ts';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: 'create or upgrade the txbox tables (safe when several deploys run it at once)',
  help: `Usage: txbox migrate [--print]

Applies the numbered migrations in one transaction under an advisory lock:
two deploys migrating at once apply each migration exactly once.

Options:
  --print   write the SQL to stdout instead, for your own migration tool
            (needs no database)`,
  options: { print: { type: 'boolean' } },
  async run({ flags, config, logger, out }) {
    if (flags.print) {
      try {
        out(printMigrations(postgresNames({ schema: config.schema, table: config.table })));
      } catch (err) {
        if (err instanceof ConfigError) throw new CliError(configMessage(err, config.sources));
        throw err;
      }
      return 0;
    }
    const db = await openDatabase(config, logger, false, 'txbox migrate');
    try {
      const applied = await migratePostgres(db.connection, db.names);
      out(applied.length ? `applied ${applied.join(', ')} to ${db.names.outbox}` : `${db.names.outbox} is up to date`);
      return 0;
    } finally {
      await db.connection.close();
    }
  },
};
