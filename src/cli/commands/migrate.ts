import { CliError, configMessage } from '../cli-error.ts';
import type { Command } from '../command.ts';
import { openDatabase } from '../database.ts';
import { migratePostgres, printMigrations } from '../../stores/postgres/postgres-migrations.ts';
import { postgresNames } from '../../stores/postgres/postgres-sql.ts';
import { ConfigError } from '../../core/errors.ts';
import { ensurePublication, walNames, walProblems } from '../../stores/postgres/postgres-wal.ts';

export const migrateCommand: Command = {
  name: 'migrate',
  summary: 'create or upgrade the txbox tables (safe when several deploys run it at once)',
  help: `Usage: txbox migrate [--print] [--wake wal]

Applies the numbered migrations in one transaction under an advisory lock:
two deploys migrating at once apply each migration exactly once.

Options:
  --print   write the SQL to stdout instead, for your own migration tool
            (needs no database)
  --wake wal  also prepare the WAL wake mode (txbox relay --wake wal): create
            the outbox's publication (inserts only), then check wal_level, the
            REPLICATION attribute and free slots, and say what is missing
            (exit code 1 if anything is)`,
  options: { print: { type: 'boolean' }, wake: { type: 'string' } },
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
    const wake = flags.wake;
    if (wake !== undefined && wake !== 'wal' && wake !== 'notify') throw new CliError(`--wake ${String(wake)}: choose wal (prepare the WAL wake mode) or notify (nothing to prepare)`);
    const db = await openDatabase(config, logger, false, 'txbox migrate');
    try {
      const applied = await migratePostgres(db.connection, db.names);
      out(applied.length ? `applied ${applied.join(', ')} to ${db.names.outbox}` : `${db.names.outbox} is up to date`);
      if (wake !== 'wal') return 0;
      const created = await ensurePublication(db.connection, db.names);
      out(`publication "${walNames(db.names).publication}" ${created ? 'created' : 'exists'} (inserts into ${db.names.outbox})`);
      const problems = await walProblems(db.connection);
      for (const p of problems) out(`WAL wake mode: missing: ${p}`);
      if (problems.length === 0) out('WAL wake mode: ready (txbox relay --wake wal)');
      return problems.length === 0 ? 0 : 1;
    } finally {
      await db.connection.close();
    }
  },
};
