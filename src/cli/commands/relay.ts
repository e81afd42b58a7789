import type { Command } from '../command.ts';
import { openBackend, refusePostgresOnly } from '../backends/backend.ts';
import { createTransport } from '../transports.ts';
import { CliError, configMessage } from '../cli-error.ts';
import { ConfigError } from '../../core/errors.ts';
import { parseDuration } from '../../core/duration.ts';
import { createRelay } from '../../relay/relay.ts';
import { defaultRelayId } from '../../relay/relay-options.ts';
import { isReplicationPrivilegeProblem, walProblems } from '../../stores/postgres/postgres-wal.ts';
import { prepareMetrics, startMetricsServer, METRICS_HELP, METRICS_OPTIONS, metricsFlags } from '../metrics-server.ts';

/** `--keep-published` when not given: 24h. */
const DEFAULT_KEEP_PUBLISHED_MS = 24 * 3_600_000;

export const relayCommand: Command = {
  name: 'relay',
  stopsOnSignal: true,
  summary: 'run a relay: publish outbox events to the transport until SIGTERM',
  help: `Usage: txbox relay --transport TYPE [options]

Claims pending events, publishes them, waits for acks, marks them published.
Run as many as you like: they share the outbox by bucket leases and keep
per-key order. SIGTERM or SIGINT stops it gracefully (exit 0).

Once connected and holding its first leases it prints one line on stdout:
  txbox relay ready: relay=<id> buckets=<n> transport=<type>
Its database connections show as "txbox relay <id>" in pg_stat_activity
(unless the database URL sets application_name).

On MySQL or MariaDB (a mysql:// or mariadb:// database URL) it wakes by
polling (--poll-interval-ms; MySQL has no LISTEN/NOTIFY); --wake and
--schema are PostgreSQL's and are refused there.
On Firestore (firestore://PROJECT_ID[/DATABASE_ID]; --table names the outbox
collection, default txbox_outbox) it wakes by a snapshot listener on the
newest pending event, with polling as the fallback; --wake, --schema and
--delete-on-publish are refused there. Deploy the indexes first (txbox
migrate says which).

Options:
  --transport TYPE          http, kafka, rabbitmq, nats or redis
  --transport-url ADDRESS   broker address (or TXBOX_TRANSPORT_URL): kafka brokers or nats
                            servers, comma-separated; an amqp:// or redis:// URL. Other broker
                            options come from the config file's "transport" object
  --endpoint DEST=URL       http endpoint per destination (repeatable; or TXBOX_HTTP_ENDPOINTS)
  --secret SECRET           Standard Webhooks signing secret (or TXBOX_WEBHOOK_SECRET); required
                            for http: generate one with \`npx txbox secret\`
  --unsigned                http without a secret: send unsigned requests on purpose (tests,
                            trusted networks; logs a warning)
  --batch-size N            events per claim (default 500)
  --lanes N                 concurrent claim loops (default 2)
  --lease-ttl-ms MS         bucket lease length (default 30000)
  --poll-interval-ms MS     idle poll interval; LISTEN/NOTIFY wakes sooner (default 1000)
  --wake MODE               notify (LISTEN/NOTIFY and polling, the default) or wal: follow the
                            outbox's inserts through a temporary logical replication slot
                            (needs wal_level=logical and REPLICATION; producers need no NOTIFY;
                            falls back to notify with a warning; docs/wal.md)
  --max-attempts N          attempts before an event is parked (default 12)
  --skip-parked D1,D2       destinations whose parked events do not hold their key
  --keep-published DUR      retention of published rows, e.g. 24h, 7d, or off (default 24h)
  --delete-on-publish       delete rows when published (no replay; no retention needed)
  --synchronous-marks       PostgreSQL: wait for the WAL flush of every mark. By default marks
                            commit asynchronously: a database crash can undo its last moments of
                            marks, and those events are published again (duplicates, never loss)
  --breaker-base-delay DUR  destination circuit breaker: pause after a destination is first seen
                            down, before one probe event goes out; doubles after each failed
                            probe, e.g. 500ms, 2s (default 1s; or TXBOX_BREAKER_BASE_DELAY)
  --breaker-max-delay DUR   longest pause between probes, e.g. 30s, 5m (default 1m, at least the
                            base delay; or TXBOX_BREAKER_MAX_DELAY)
  --relay-id ID             name in leases and status (default host-pid-random)
  --log-summary-interval DUR  how often the info summary line is logged (published, rate,
                            backlog, parked, leases held), e.g. 30s, 5m, or off (default 1m).
                            --log-level debug also logs one line per batch
${METRICS_HELP}`,
  options: {
    transport: { type: 'string' },
    'transport-url': { type: 'string' },
    endpoint: { type: 'string', multiple: true },
    secret: { type: 'string' },
    unsigned: { type: 'boolean' },
    'batch-size': { type: 'string' },
    lanes: { type: 'string' },
    'lease-ttl-ms': { type: 'string' },
    'poll-interval-ms': { type: 'string' },
    wake: { type: 'string' },
    'max-attempts': { type: 'string' },
    'skip-parked': { type: 'string' },
    'keep-published': { type: 'string' },
    'delete-on-publish': { type: 'boolean' },
    'synchronous-marks': { type: 'boolean' },
    'breaker-base-delay': { type: 'string' },
    'breaker-max-delay': { type: 'string' },
    'relay-id': { type: 'string' },
    'log-summary-interval': { type: 'string' },
    ...METRICS_OPTIONS,
  },
  async run({ flags, config, logger, signal, out }) {
    refusePostgresOnly(config, ['schema', 'wake', 'deleteOnPublish']);
    const served = metricsFlags(flags);
    const metrics = served ? await prepareMetrics() : undefined;
    const transport = await createTransport(config.transport, logger);
    // Named before the database opens: its connections carry `txbox relay <relay id>` in pg_stat_activity.
    const relayId = typeof flags['relay-id'] === 'string' ? flags['relay-id'] : defaultRelayId();
    // A bad id is reported by createRelay below, naming --relay-id; the connections then just say `txbox relay`.
    const backend = await openBackend(config, logger, true, /^[\w.:@-]{1,120}$/.test(relayId) ? `txbox relay ${relayId}` : 'txbox relay');
    const db = backend.postgres;
    const r = config.relay;
    // MySQL has no LISTEN/NOTIFY: said once at start, so that nobody waits for a wake-up that never comes.
    if (backend.store === 'mysql') logger.info({ store: backend.store, pollIntervalMs: r.pollIntervalMs ?? 1000 }, 'txbox relay: MySQL store: idle relays wake by polling (no LISTEN/NOTIFY on MySQL)');
    if (backend.store === 'firestore') {
      logger.info({ store: backend.store, pollIntervalMs: r.pollIntervalMs ?? 1000 }, 'txbox relay: Firestore store: idle relays wake by a snapshot listener on the newest pending event, and by polling');
    }
    if (r.wake === 'wal' && db !== undefined) {
      // Said once at start, in the operator's terms; the store then falls back to notify and polling.
      const problems = await walProblems(db.connection).catch((err: Error) => [`could not check: ${err.message}`]);
      for (const p of problems) {
        if (isReplicationPrivilegeProblem(p)) {
          // A service may grant replication in a way of its own: the store tries, and the server decides.
          logger.warn({ problem: p }, 'txbox relay: --wake wal may not be available (the server decides as the stream opens; if it refuses, waking by LISTEN/NOTIFY and polling)');
        } else logger.warn({ problem: p }, 'txbox relay: --wake wal is not available; waking by LISTEN/NOTIFY and polling instead');
      }
    }
    let relay;
    try {
      relay = createRelay({
        store: backend.relayStore({ deleteOnPublish: r.deleteOnPublish ?? false, synchronousMarks: r.synchronousMarks ?? false, wake: r.wake ?? 'notify', logger }),
        transport,
        logger,
        relayId,
        ...logSummary(flags['log-summary-interval']),
        ...(r.batchSize !== undefined ? { batchSize: r.batchSize } : {}),
        ...(r.lanes !== undefined ? { lanes: r.lanes } : {}),
        ...(r.leaseTtlMs !== undefined ? { leaseTtlMs: r.leaseTtlMs } : {}),
        ...(r.pollIntervalMs !== undefined ? { pollIntervalMs: r.pollIntervalMs } : {}),
        ...(r.maxAttempts !== undefined ? { retry: { maxAttempts: r.maxAttempts } } : {}),
        ...(r.skipParkedDestinations ? { skipParkedDestinations: r.skipParkedDestinations } : {}),
        ...circuitBreaker(r.breakerBaseDelayMs, r.breakerMaxDelayMs),
        retention: r.deleteOnPublish || r.keepPublishedMs === false ? false : { keepPublishedMs: r.keepPublishedMs ?? DEFAULT_KEEP_PUBLISHED_MS },
        ...(metrics ? { metrics: metrics.metrics } : {}),
      });
    } catch (err) {
      await backend.close();
      if (err instanceof ConfigError) throw new CliError(configMessage(err, config.sources));
      throw err;
    }
    try {
      await relay.start();
    } catch (err) {
      await relay.stop().catch(() => {});
      await backend.close();
      if (err instanceof ConfigError) throw new CliError(`transport.${err.field}: ${err.message.slice(err.field.length + 2)}`);
      throw err;
    }
    let server;
    try {
      server = served && metrics ? await startMetricsServer(served, metrics, { relay }, logger) : undefined;
    } catch (err) {
      await relay.stop().catch(() => {});
      await backend.close();
      throw err;
    }
    // One line on stdout when ready (leases taken, transport connected): scripts wait for it instead of sleeping.
    out(`txbox relay ready: relay=${relay.relayId} buckets=${relay.heldBuckets} transport=${config.transport?.type ?? 'none'}`);
    if (signal.aborted) logger.info({}, 'txbox relay: signal received during start');
    if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
    logger.info({ relayId: relay.relayId }, 'txbox relay: stopping (signal received)');
    await relay.stop();
    await server?.close();
    await backend.close();
    return 0;
  },
};

/** The destination circuit breaker's settings given; the library fills the rest (and checks max >= base, naming the field). */
function circuitBreaker(baseDelayMs: number | undefined, maxDelayMs: number | undefined): { circuitBreaker?: { baseDelayMs?: number; maxDelayMs?: number } } {
  if (baseDelayMs === undefined && maxDelayMs === undefined) return {};
  return { circuitBreaker: { ...(baseDelayMs !== undefined ? { baseDelayMs } : {}), ...(maxDelayMs !== undefined ? { maxDelayMs } : {}) } };
}

/** `--log-summary-interval`: a duration, or off. */
function logSummary(flag: unknown): { logSummaryIntervalMs?: number } {
  if (typeof flag !== 'string') return {};
  if (flag === 'off') return { logSummaryIntervalMs: 0 };
  const ms = parseDuration(flag, '--log-summary-interval');
  if (ms < 1000) throw new CliError('--log-summary-interval: must be at least 1s, or off');
  return { logSummaryIntervalMs: ms };
}
