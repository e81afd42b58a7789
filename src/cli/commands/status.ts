import type { Command } from '../command.ts';
import { openDatabase } from '../database.ts';
import { fmt } from '../progress.ts';
import { PostgresAdmin, type DestinationCircuit, type OutboxStatus } from '../../stores/postgres/postgres-admin.ts';

export const statusCommand: Command = {
  name: 'status',
  summary: 'backlog per destination, oldest pending age, in flight, parked, rate, relays, destinations down, table health',
  help: `Usage: txbox status [--json]

Options:
  --json   print the status as JSON

Exit code 0 when the database answered, whatever the backlog.`,
  options: { json: { type: 'boolean' } },
  async run({ flags, config, logger, out }) {
    const db = await openDatabase(config, logger);
    try {
      const admin = new PostgresAdmin(db.connection, { schema: config.schema, table: config.table });
      const status = await admin.status();
      const circuits = await admin.circuits();
      out(flags.json ? JSON.stringify({ ...status, circuits }, null, 2) : `${renderStatus(db.names.outbox, status)}\n${renderCircuits(circuits)}`);
      return 0;
    } finally {
      await db.connection.close();
    }
  },
};

function age(seconds: number | null): string {
  if (seconds === null) return '-';
  if (seconds < 120) return `${seconds.toFixed(1)}s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)}m`;
  return `${(seconds / 3600).toFixed(1)}h`;
}

export function renderStatus(table: string, s: OutboxStatus): string {
  const lines = [`outbox ${table}`, ''];
  const pending = s.destinations.reduce((a, d) => a + d.pending, 0);
  const parked = s.destinations.reduce((a, d) => a + d.parked, 0);
  lines.push(`pending ${fmt(pending)}   in flight ${fmt(s.inFlight)}   parked ${fmt(parked)}   published last minute ${fmt(s.publishedLastMinute)}`);
  lines.push('');
  lines.push(pad(['DESTINATION', 'PENDING', 'BACKING OFF', 'PARKED', 'OLDEST PENDING']));
  for (const d of s.destinations) lines.push(pad([d.destination, fmt(d.pending), fmt(d.backingOff), fmt(d.parked), age(d.oldestPendingSeconds)]));
  if (s.destinations.length === 0) lines.push('(no pending or parked events)');
  lines.push('');
  lines.push(pad(['RELAY', 'ALIVE', 'BUCKETS', 'IN FLIGHT', 'PER MINUTE', 'HEARTBEAT']));
  for (const r of s.relays) lines.push(pad([r.relayId, r.alive ? 'yes' : 'no', String(r.buckets), fmt(r.inFlight), fmt(r.ratePerMinute), `${age(r.heartbeatAgeSeconds)} ago`]));
  if (s.relays.length === 0) lines.push('(no relay has run)');
  lines.push('');
  const t = s.table;
  const deadShare = t.liveRows + t.deadRows > 0 ? (100 * t.deadRows) / (t.liveRows + t.deadRows) : 0;
  lines.push(
    `table: ${(t.totalBytes / 1048576).toFixed(1)} MiB with indexes, ~${fmt(t.liveRows)} live rows, ~${fmt(t.deadRows)} dead (${deadShare.toFixed(0)}%), last autovacuum ${t.lastAutovacuum ? t.lastAutovacuum.toISOString() : 'never'}`,
  );
  return lines.join('\n');
}

/** Destinations down: one line per (destination, relay) circuit open, from the relays' heartbeats. */
export function renderCircuits(circuits: readonly DestinationCircuit[]): string {
  if (circuits.length === 0) return 'destinations down: none (no circuit open)';
  const lines = ['destinations down (circuit open: events wait pending, in order, attempts not counted):'];
  for (const c of circuits) {
    lines.push(
      `  ${c.destination}: circuit open since ${c.openSince.toISOString()} (relay ${c.relayId}), reason ${c.reason}, next probe ${c.nextProbeAt.toISOString()}${c.failedProbes > 0 ? `, ${c.failedProbes} failed probes` : ''}`,
    );
  }
  return lines.join('\n');
}

function pad(cols: string[]): string {
  const widths = [34, 10, 12, 10, 16, 12];
  return cols.map((c, i) => c.padEnd(widths[i] ?? 12)).join(' ').trimEnd();
}
