import type { Command } from '../command.ts';
import { EXIT } from '../cli-error.ts';
import { Progress, fmt } from '../progress.ts';
import { resolveTortureOptions } from '../torture/torture-options.ts';
import { runTorture, type TortureReport } from '../torture/torture-run.ts';

export const tortureCommand: Command = {
  name: 'torture',
  stopsOnSignal: true,
  summary: 'a Jepsen-style check: producers, relays killed and paused at random, an independent observer; exit 1 on any loss, phantom or reorder',
  help: `Usage: txbox torture [--database-url URL] [--transport TYPE] [--events N] [--kills N] [--inbox] [options]

Producers commit events (about 10% of transactions roll back, one keeps a
transaction open 0.5-3 s, keys are skewed: a few hot, a long tail) while 3
\`txbox relay\` processes publish them and are killed with SIGKILL at random,
paused with SIGSTOP past their lease and resumed, and have their database
sessions terminated (pg_terminate_backend). An independent observer reads
what arrived (HTTP: a receiver verifying every signature; brokers: a reader
of this run's topic, stream, subject, exchange, subscription or queue). The summary counts
committed, delivered, lost, phantom, duplicates, per-key order violations
(first deliveries) and the recovery time after each kill. Exit code 1 on any
loss, phantom, reorder or signature failure. See docs/torture.md.

Options:
  --database-url URL     PostgreSQL (or TXBOX_DATABASE_URL); without it, embedded PGlite with
                         relays in this process, killed with relay.abort() (no pauses, no
                         terminated sessions, no long transactions)
  --transport TYPE       http (default), nats, redis, kafka, rabbitmq, pubsub (Google's Pub/Sub
                         emulator) or sqs (an SQS emulator such as ElasticMQ)
  --transport-url ADDR   the broker's address (default: its usual port on 127.0.0.1); pubsub: the
                         emulator's host:port (default PUBSUB_EMULATOR_HOST, else 127.0.0.1:8085);
                         sqs: the endpoint URL (default http://127.0.0.1:9324)
  --events N             events to commit (default 20000)
  --keys N               distinct keys, Zipf-skewed (default 500)
  --kills N              relay kills, at least (default 20); pauses are kills/10, terminated
                         sessions kills/5 (at least 1 each on PostgreSQL)
  --duration DUR         stop producing after this long, e.g. 90s or 5m (default: at --events)
  --minutes N            the same in minutes (--minutes 2 is --duration 2m)
  --relays N             relays at once (default 3)
  --writers N            concurrent producer transactions (default 8)
  --rollback-rate R      share of transactions rolled back (default 0.1)
  --inbox                the receiving side is consumer processes (txbox's consumer, an inbox and
                         a version-guarded projection) killed at random mid-handler; checks every
                         committed event applied exactly once and every key's projection at its
                         last committed version (every transport; PostgreSQL only)
  --consumers N          consumer processes with --inbox (default 2)
  --lease-ttl DUR        the relays' lease (default 2s)
  --wake MODE            notify (default) or wal: the relays follow the outbox through a
                         replication slot and producers send no NOTIFY (PostgreSQL with
                         wal_level=logical; docs/wal.md)
  --drain-timeout DUR    how long to wait for the last deliveries (default 2m)
  --seed N               seed of the run's random choices (printed; replays the choices)
  --keep                 keep the run's schema (printed) instead of dropping it`,
  options: {
    transport: { type: 'string' },
    'transport-url': { type: 'string' },
    events: { type: 'string' },
    keys: { type: 'string' },
    kills: { type: 'string' },
    duration: { type: 'string' },
    minutes: { type: 'string' },
    relays: { type: 'string' },
    writers: { type: 'string' },
    'rollback-rate': { type: 'string' },
    inbox: { type: 'boolean' },
    consumers: { type: 'string' },
    'lease-ttl': { type: 'string' },
    wake: { type: 'string' },
    'drain-timeout': { type: 'string' },
    seed: { type: 'string' },
    keep: { type: 'boolean' },
  },
  async run({ flags, config, out, signal }) {
    const options = resolveTortureOptions(flags, config.databaseUrl, config.relay.wake);
    const progress = new Progress(process.stderr, 2000);
    const report = await runTorture(options, { onProgress: (line) => progress.update(line), onStart: (line) => progress.update(line, true), signal });
    progress.done();
    out(renderTortureReport(report));
    if (report.interrupted) {
      out('interrupted: the figures above cover what committed before the signal');
      return EXIT.interrupted;
    }
    const failures = tortureFailures(report);
    if (failures.length > 0) {
      out(`FAILED: ${failures.join('; ')}`);
      if (report.violations.length > 0) out(`first order violations:\n${report.violations.map((l) => `  ${l}`).join('\n')}`);
      if (report.database === 'PostgreSQL') out(`the run's schema ${report.schema} is kept for inspection (drop it with DROP SCHEMA ${report.schema} CASCADE)`);
      if (report.logTail.length > 0) out(`last relay log lines:\n${report.logTail.map((l) => `  ${l}`).join('\n')}`);
      return EXIT.failure;
    }
    // Not a failure (each was replaced), but the reason should not need another run to find.
    if (report.unexpectedRelayExits > 0 && report.logTail.length > 0) out(`last relay log lines (${report.unexpectedRelayExits} relay(s) exited by themselves):\n${report.logTail.map((l) => `  ${l}`).join('\n')}`);
    out('ok: nothing lost, nothing phantom, every key in order');
    return EXIT.ok;
  },
};

/** The reasons a run fails; empty when it passed. */
export function tortureFailures(r: TortureReport): string[] {
  const f: string[] = [];
  if (r.faultError !== null) f.push(`the fault loop failed, so the run stopped early: ${r.faultError}`);
  if (r.lost > 0) f.push(`${r.lost} committed events never arrived`);
  if (r.phantom > 0) f.push(`${r.phantom} deliveries of events that never committed`);
  if (r.orderViolations > 0) f.push(`${r.orderViolations} per-key order violations`);
  if (r.signatureFailures > 0) f.push(`${r.signatureFailures} signature failures`);
  if (r.unreadable > 0) f.push(`${r.unreadable} unreadable deliveries`);
  if (r.failedTransactions > 0) f.push(`${r.failedTransactions} producer transactions failed unexpectedly`);
  if (r.relaysNotStopping.length > 0) f.push(`relays did not stop on SIGTERM within 15 s: ${r.relaysNotStopping.join(', ')}`);
  const i = r.inbox;
  if (i) {
    if (i.missing > 0) f.push(`${i.missing} committed events never applied by the consumers`);
    if (i.phantom > 0) f.push(`${i.phantom} applied events that never committed`);
    if (i.duplicateApplies > 0) f.push(`${i.duplicateApplies} events applied more than once`);
    if (i.orderViolations > 0) f.push(`${i.orderViolations} first applications out of version order`);
    if (i.projectionMismatches > 0) f.push(`${i.projectionMismatches} keys whose projection is not at their last committed version`);
  }
  return f;
}

export function renderTortureReport(r: TortureReport): string {
  const mark = (n: number): string => (n === 0 ? `${fmt(n)}  ok` : `${fmt(n)}  FAILED`);
  const ms = (n: number): string => `${(n / 1000).toFixed(2)} s`;
  const states = Object.entries(r.outboxStates).map(([s, n]) => `${s} ${fmt(n)}`).join(', ') || 'empty';
  const lines = [
    `txbox torture: ${r.database} -> ${r.relays} -> ${r.transport}   (seed ${r.seed}${r.schema ? `, schema ${r.schema}` : ''})`,
    `  transactions        ${fmt(r.transactions)} (${fmt(r.rolledBackTransactions)} rolled back on purpose, ${fmt(r.longTransactions)} held open 0.5-3 s, ${fmt(r.failedTransactions)} failed otherwise)`,
    `  committed           ${fmt(r.committed)}`,
    `  delivered           ${fmt(r.delivered)} unique`,
    `  lost                ${mark(r.lost)}`,
    `  phantom             ${mark(r.phantom)}   (${fmt(r.rolledBackDelivered)} of them rolled back)`,
    `  duplicates          ${fmt(r.duplicates)}   (at-least-once: allowed)`,
    `  order violations    ${mark(r.orderViolations)}   (per key, first deliveries)`,
    `  signature failures  ${mark(r.signatureFailures)}`,
    `  unreadable          ${mark(r.unreadable)}`,
    ...(r.observerReconnects > 0 ? [`  observer            reconnected ${r.observerReconnects} times (what it had not acked was read again)`] : []),
    `  faults              ${r.kills} relay kills (SIGKILL${r.relays.includes('PGlite') ? ' = abort()' : ''}), ${r.pauses} pauses past the lease (SIGSTOP/SIGCONT), ${r.terminations} session terminations (${r.terminatedSessions} sessions)`,
    `  recovery after kill p50 ${ms(r.recovery.p50)}, max ${ms(r.recovery.max)} (${r.recovery.measured} of ${r.kills} kills measured: until live relays leased all the killed relay's buckets)`,
    `  relays              ${r.unexpectedRelayExits} exited by themselves; ${r.relaysNotStopping.length} did not stop on SIGTERM`,
    ...(r.faultError === null ? [] : [`  fault loop          FAILED: ${r.faultError}`]),
    `  outbox at the end   ${states}`,
  ];
  if (r.inbox) {
    const i = r.inbox;
    lines.push(
      `  inbox consumers     ${i.consumerKills} killed (mid-handler or between commit and ack), ${i.consumerRestarts} restarts, ${i.consumerCrashes} exited by themselves`,
      `    applied           ${fmt(i.appliedUnique)} unique; missing ${mark(i.missing)}; phantom ${mark(i.phantom)}`,
      `    applied twice     ${mark(i.duplicateApplies)}`,
      `    version order     ${mark(i.orderViolations)}`,
      `    projection        ${mark(i.projectionMismatches)} keys not at their last committed version`,
      `    inbox unsettled   ${fmt(i.inboxUnsettled)} rows not processed`,
    );
    if (i.stats) {
      const b = i.stats.broker;
      const broker = ['received', 'dead', 'rejected', 'released', 'redelivered', 'reclaimed', 'extended'].filter((k) => (b[k] ?? 0) > 0).map((k) => `${k} ${fmt(b[k]!)}`);
      const n = (k: string): string => fmt(i.stats!.inbox[k] ?? 0);
      lines.push(`    consumers saw     processed ${n('processed')}, duplicates ${n('duplicate')}, held ${n('held')}, retried ${n('retried')}, dead ${n('dead')}${broker.length > 0 ? `; broker consumer: ${broker.join(', ')}` : ''}`);
    }
    // How the consumers caught up: a stall (flat) tells apart from a slow drain (rising) when the drain times out.
    if (r.timedOut) lines.push(`    applied in drain  ${r.drainTimeline.map(([s, n]) => `${s} s ${fmt(n)}`).join(' · ')}`);
  }
  lines.push(
    `  elapsed ${ms(r.elapsedMs)}: producing ${ms(r.produceMs)} (${fmt(Math.round(r.committed / Math.max(0.001, r.produceMs / 1000)))} events/s), drain ${ms(r.drainMs)}${r.timedOut ? ' (drain timed out)' : ''}`,
  );
  return lines.join('\n');
}
