import type { Command } from '../command.ts';
import { openBackend, refusePostgresOnly, type StatusReport } from '../backends/backend.ts';
import { fmt } from '../progress.ts';
import { renderSlots } from './wal.ts';
import type { DestinationCircuit, DestinationStatus, OutboxStatus, RelayStatus } from '../../stores/postgres/postgres-admin.ts';
import type { MysqlDestinationCircuit, MysqlOutboxStatus } from '../../stores/mysql/mysql-admin.ts';
import type { FirestoreOutboxStatus } from '../../stores/firestore/firestore-status.ts';

export const statusCommand: Command = {
  name: 'status',
  summary: 'backlog per destination, oldest pending age, in flight, parked, rate, relays (alive, expired, left), destinations down, table health',
  help: `Usage: txbox status [--json]

Options:
  --json   print the status as JSON

BEHIND PARKED counts pending events that wait behind a parked event of their
key (txbox parked retry/skip/discard frees them). A relay is alive while its
heartbeat is younger than its lease TTL, expired after that (killed, hung or
cut off from the database; its leases have expired too), left once it stopped
cleanly. Expired and left relays stay listed for 24 hours. "in flight" sums
alive relays only. Relays in the WAL wake mode add their replication slots
with their lag (the WAL each keeps, and when its relay last confirmed).

On MySQL or MariaDB (a mysql:// or mariadb:// database URL) it shows the
same backlog, parked and relay sections; the oldest pending age is by the
events' occurredAt, the table line has MySQL's size and row estimate, and
there are no WAL slots. Destinations down are shown as on PostgreSQL (each
relay records its open circuits at every heartbeat).

On Firestore (a firestore://PROJECT_ID[/DATABASE_ID] database URL) it shows
the same backlog, parked and relay sections, counted with aggregation
queries (the oldest pending age is by the events' commit time), and the
outbox collection's document count instead of the table line; no WAL slots
or destinations down. The queries need the composite indexes of
\`txbox migrate --print\` on Firestore itself (not on the emulator).

Exit code 0 when the database answered, whatever the backlog.`,
  options: { json: { type: 'boolean' } },
  async run({ flags, config, logger, out }) {
    refusePostgresOnly(config, ['schema']);
    const backend = await openBackend(config, logger, true, 'txbox status');
    try {
      out(renderReport(backend.outbox, await backend.status(), flags.json === true));
      return 0;
    } finally {
      await backend.close();
    }
  },
};

/** The status as text or JSON, with the destinations down (open circuits); PostgreSQL's adds WAL slots. */
export function renderReport(table: string, report: StatusReport, json: boolean): string {
  if (report.store === 'mysql') {
    const { status, circuits } = report;
    return json ? JSON.stringify({ ...status, circuits }, null, 2) : `${renderStatus(table, status)}\n${renderCircuits(circuits)}`;
  }
  if (report.store === 'firestore') return json ? JSON.stringify(report.status, null, 2) : renderFirestoreStatus(table, report.status);
  const { status, circuits, slots } = report;
  return json
    ? JSON.stringify({ ...status, circuits, slots }, null, 2)
    : `${renderStatus(table, status)}\n${renderCircuits(circuits)}${slots.length > 0 ? `\n${renderSlots(slots)}` : ''}`;
}

function age(seconds: number | null): string {
  if (seconds === null) return '-';
  if (seconds < 120) return `${seconds.toFixed(1)}s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)}m`;
  return `${(seconds / 3600).toFixed(1)}h`;
}

/** The text status: one function per section, joined by blank lines. */
export function renderStatus(table: string, s: OutboxStatus | MysqlOutboxStatus): string {
  return [`outbox ${table}`, renderTotals(s), renderDestinations(s.destinations), renderRelays(s.relays), renderTable(s.table)].join('\n\n');
}

/** Firestore's status: the same sections, and the outbox collection's size instead of the table's. */
function renderFirestoreStatus(outbox: string, s: FirestoreOutboxStatus): string {
  const collection = `collection ${s.collection.name}: ${fmt(s.collection.documents)} documents (pending, parked, and published or skipped ones kept for retention)`;
  return [`outbox ${outbox}`, renderTotals(s), renderDestinations(s.destinations), renderRelays(s.relays), collection].join('\n\n');
}

function renderTotals(s: OutboxStatus | MysqlOutboxStatus | FirestoreOutboxStatus): string {
  const pending = s.destinations.reduce((a, d) => a + d.pending, 0);
  const parked = s.destinations.reduce((a, d) => a + d.parked, 0);
  return `pending ${fmt(pending)}   in flight ${fmt(s.inFlight)}   parked ${fmt(parked)}   published last minute ${fmt(s.publishedLastMinute)}`;
}

function renderDestinations(destinations: readonly DestinationStatus[]): string {
  const widths = [34, 10, 12, 10, 16, 16];
  const lines = [pad(widths, ['DESTINATION', 'PENDING', 'BACKING OFF', 'PARKED', 'BEHIND PARKED', 'OLDEST PENDING'])];
  for (const d of destinations) lines.push(pad(widths, [d.destination, fmt(d.pending), fmt(d.backingOff), fmt(d.parked), fmt(d.blockedByParked), age(d.oldestPendingSeconds)]));
  if (destinations.length === 0) lines.push('(no pending or parked events)');
  return lines.join('\n');
}

/** "alive, heartbeat 2.0s ago", "expired 3.0m ago", "left 10.0m ago". */
export function relayState(r: RelayStatus): string {
  if (r.state === 'alive') return `alive, heartbeat ${age(r.heartbeatAgeSeconds)} ago`;
  return `${r.state} ${age(r.stateAgeSeconds)} ago`;
}

function renderRelays(relays: readonly RelayStatus[]): string {
  const widths = [34, 30, 8, 10, 12];
  const lines = [pad(widths, ['RELAY', 'STATE', 'BUCKETS', 'IN FLIGHT', 'PER MINUTE'])];
  // A dead relay's last in-flight count and rate are history, not current: shown as '-'.
  for (const r of relays) lines.push(pad(widths, [r.relayId, relayState(r), String(r.buckets), r.alive ? fmt(r.inFlight) : '-', r.alive ? fmt(r.ratePerMinute) : '-']));
  if (relays.length === 0) lines.push('(no relay in the last 24 hours)');
  else if (!relays.some((r) => r.alive)) lines.push('(no relay alive: pending events are not being published)');
  return lines.join('\n');
}

function renderTable(t: OutboxStatus['table'] | MysqlOutboxStatus['table']): string {
  if ('approxRows' in t) return `table: ${(t.totalBytes / 1048576).toFixed(1)} MiB with indexes, ~${fmt(t.approxRows)} rows (InnoDB's estimate)`;
  const deadShare = t.liveRows + t.deadRows > 0 ? (100 * t.deadRows) / (t.liveRows + t.deadRows) : 0;
  return `table: ${(t.totalBytes / 1048576).toFixed(1)} MiB with indexes, ~${fmt(t.liveRows)} live rows, ~${fmt(t.deadRows)} dead (${deadShare.toFixed(0)}%), last autovacuum ${t.lastAutovacuum ? t.lastAutovacuum.toISOString() : 'never'}`;
}

/** Destinations down: one line per (destination, relay) circuit open, from the relays' heartbeats. */
export function renderCircuits(circuits: readonly (DestinationCircuit | MysqlDestinationCircuit)[]): string {
  if (circuits.length === 0) return 'destinations down: none (no circuit open)';
  const lines = ['destinations down (circuit open: events wait pending, in order, attempts not counted):'];
  for (const c of circuits) {
    lines.push(
      `  ${c.destination}: circuit open since ${c.openSince.toISOString()} (relay ${c.relayId}), reason ${c.reason}, next probe ${c.nextProbeAt.toISOString()}${c.failedProbes > 0 ? `, ${c.failedProbes} failed probes` : ''}`,
    );
  }
  return lines.join('\n');
}

function pad(widths: readonly number[], cols: string[]): string {
  return cols.map((c, i) => c.padEnd(widths[i] ?? 12)).join(' ').trimEnd();
}
