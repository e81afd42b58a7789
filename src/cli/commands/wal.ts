import type { Command } from '../command.ts';
import { CliError } from '../cli-error.ts';
import { openDatabase } from '../database.ts';
import { fmt } from '../progress.ts';
import { dropWalSlots, walNames, walProblems, walSlots, type WalSlotStatus } from '../../stores/postgres/postgres-wal.ts';

export const walCommand: Command = {
  name: 'wal',
  summary: 'the WAL wake mode: check its prerequisites, list or drop txbox\'s replication slots',
  help: `Usage: txbox wal check
       txbox wal slots [--json]
       txbox wal drop-slots [--active]

check        says what the WAL wake mode (txbox relay --wake wal) lacks on this
             database: wal_level, the REPLICATION attribute, free slots,
             the publication. Exit code 1 when something is missing.
slots        lists this outbox's replication slots with their lag: the WAL
             each one keeps (pg_current_wal_lsn() - confirmed_flush_lsn) and
             when its relay last confirmed.
drop-slots   drops this outbox's inactive slots (a slot nobody reads keeps WAL
             and can fill the disk). --active also ends the relays' streams,
             which drops their temporary slots; those relays poll meanwhile
             and open new ones. Slots of other outboxes are never touched.`,
  positionals: ['ACTION'],
  options: { json: { type: 'boolean' }, active: { type: 'boolean' } },
  async run({ flags, positionals, config, logger, out }) {
    const action = positionals[0];
    if (!action || !['check', 'slots', 'drop-slots'].includes(action)) {
      throw new CliError('wal: choose an action: check, slots or drop-slots (see txbox wal --help)');
    }
    const db = await openDatabase(config, logger, action === 'check', 'txbox wal');
    try {
      if (action === 'check') {
        const problems = await walProblems(db.connection);
        const { publication } = walNames(db.names);
        const { rows } = await db.connection.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [publication]);
        if (rows.length === 0) problems.push(`publication "${publication}" does not exist: run txbox migrate --wake wal as the table's owner (or the relay creates it if it may)`);
        out(problems.length === 0 ? `WAL wake mode available for ${db.names.outbox} (publication "${publication}")` : problems.map((p) => `missing: ${p}`).join('\n'));
        return problems.length === 0 ? 0 : 1;
      }
      if (action === 'slots') {
        const slots = await walSlots(db.connection, db.names);
        out(flags.json ? JSON.stringify(slots, null, 2) : renderSlots(slots));
        return 0;
      }
      const dropped = await dropWalSlots(db.connection, db.names, { active: flags.active === true });
      out(dropped.length === 0 ? 'no slot dropped' : `dropped ${dropped.join(', ')}`);
      return 0;
    } finally {
      await db.connection.close();
    }
  },
};

/** One line per slot; also the WAL section of `txbox status`. */
export function renderSlots(slots: readonly WalSlotStatus[]): string {
  if (slots.length === 0) return 'replication slots: none (no relay in WAL wake mode)';
  const lines = ['replication slots (WAL wake mode):'];
  for (const s of slots) {
    const reply = s.lastReplySeconds === null ? '' : `, confirmed ${s.lastReplySeconds.toFixed(1)}s ago`;
    const state = s.active ? 'active' : 'INACTIVE (retains WAL: txbox wal drop-slots)';
    lines.push(`  ${s.slot}: ${state}, lag ${fmt(s.lagBytes)} bytes${reply}${s.walStatus && s.walStatus !== 'reserved' ? `, wal_status ${s.walStatus}` : ''}`);
  }
  return lines.join('\n');
}
