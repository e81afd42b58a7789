import type { Command } from '../command.ts';
import { openBackend, refusePostgresOnly } from '../backends/backend.ts';
import { parseDuration } from '../../core/duration.ts';
import { Progress, fmt } from '../progress.ts';
import { CliError } from '../cli-error.ts';

export const pruneCommand: Command = {
  name: 'prune',
  summary: 'delete published and skipped rows older than a given age, in bounded batches',
  help: `Usage: txbox prune --older-than DURATION [--batch-size N]

Deletes published and skipped rows finished more than DURATION ago (e.g. 24h,
7d), N rows per statement (default 5000). Never touches pending or parked
rows. Relays do this by themselves (--keep-published); use this for a one-off.
Each statement is its own short transaction: a large prune never holds one
long transaction. The inbox's processed rows: txbox inbox prune.

On MySQL or MariaDB (a mysql:// or mariadb:// database URL) each batch reads
its rows' seqs from the (state, done_at) index, then deletes them by primary
key.`,
  options: { 'older-than': { type: 'string' }, 'batch-size': { type: 'string' } },
  async run({ flags, config, logger, out }) {
    if (typeof flags['older-than'] !== 'string') throw new CliError('prune: --older-than is required (e.g. --older-than 7d)');
    const age = parseDuration(flags['older-than'], '--older-than');
    const batch = flags['batch-size'] === undefined ? 5000 : Number(flags['batch-size']);
    if (!Number.isSafeInteger(batch) || batch <= 0) throw new CliError(`--batch-size ${String(flags['batch-size'])}: must be a positive whole number, e.g. --batch-size 5000`);
    refusePostgresOnly(config, ['schema']);
    const backend = await openBackend(config, logger, true, 'txbox prune');
    const progress = new Progress();
    try {
      if (backend.prune === undefined) throw new CliError(`txbox prune: not available on ${backend.store}`);
      const deleted = await backend.prune(age, batch, (n) => progress.update(`prune: ${fmt(n)} rows deleted`));
      progress.done();
      out(`deleted ${fmt(deleted)} row(s)`);
      return 0;
    } finally {
      await backend.close();
    }
  },
};
