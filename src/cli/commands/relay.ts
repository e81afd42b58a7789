import type { Command } from '../command.ts';
import { openDatabase } from '../database.ts';
import { createTransport } from '../transports.ts';
import { CliError, configMessage } from '../cli-error.ts';
import { ConfigError } from '../../core/errors.ts';
import { createRelay } from '../../relay/relay.ts';
import { PostgresRelayStore } from '../../stores/postgres/postgres-relay-store.ts';

/** `--keep-published` when not given: 24h. */
const DEFAULT_KEEP_PUBLISHED_MS = 24 * 3_600_000;

export const relayCommand: Command = {
  name: 'relay',
  summary: 'run a relay: publish outbox events to the transport until SIGTERM',
  help: `Usage: txbox relay --transport TYPE [options]

Claims pending events, publishes them, waits for acks, marks them published.
Run as many as you like: they share the outbox by bucket leases and keep
per-key order. SIGTERM or SIGINT stops it gracefully (exit 0).

Options:
  --transport TYPE          http, kafka, rabbitmq, nats or redis
  --transport-url ADDRESS   broker address (or TXBOX_TRANSPORT_URL): kafka brokers or nats
                            servers, comma-separated; an amqp:// or redis:// URL. Other broker
                            options come from the config file's "transport" object
  --endpoint DEST=URL       http endpoint per destination (repeatable; or TXBOX_HTTP_ENDPOINTS)
  --secret SECRET           Standard Webhooks signing secret (or TXBOX_WEBHOOK_SECRET)
  --batch-size N            events per claim (default 500)
  --lanes N                 concurrent claim loops (default 2)
  --lease-ttl-ms MS         bucket lease length (default 30000)
  --poll-interval-ms MS     idle poll interval; LISTEN/NOTIFY wakes sooner (default 1000)
  --max-attempts N          attempts before an event is parked (default 12)
  --skip-parked D1,D2       destinations whose parked events do not hold their key
  --keep-published DUR      retention of published rows, e.g. 24h, 7d, or off (default 24h)
  --delete-on-publish       delete rows when published (no replay; no retention needed)
  --relay-id ID             name in leases and status (default host-pid-random)`,
  options: {
    transport: { type: 'string' },
    'transport-url': { type: 'string' },
    endpoint: { type: 'string', multiple: true },
    secret: { type: 'string' },
    'batch-size': { type: 'string' },
    lanes: { type: 'string' },
    'lease-ttl-ms': { type: 'string' },
    'poll-interval-ms': { type: 'string' },
    'max-attempts': { type: 'string' },
    'skip-parked': { type: 'string' },
    'keep-published': { type: 'string' },
    'delete-on-publish': { type: 'boolean' },
    'relay-id': { type: 'string' },
  },
  async run({ flags, config, logger, signal }) {
    const transport = await createTransport(config.transport, logger);
    const db = await openDatabase(config, logger);
    const r = config.relay;
    let relay;
    try {
      relay = createRelay({
        store: new PostgresRelayStore({ schema: config.schema, table: config.table, connection: db.connection, deleteOnPublish: r.deleteOnPublish ?? false }),
        transport,
        logger,
        ...(typeof flags['relay-id'] === 'string' ? { relayId: flags['relay-id'] } : {}),
        ...(r.batchSize !== undefined ? { batchSize: r.batchSize } : {}),
        ...(r.lanes !== undefined ? { lanes: r.lanes } : {}),
        ...(r.leaseTtlMs !== undefined ? { leaseTtlMs: r.leaseTtlMs } : {}),
        ...(r.pollIntervalMs !== undefined ? { pollIntervalMs: r.pollIntervalMs } : {}),
        ...(r.maxAttempts !== undefined ? { retry: { maxAttempts: r.maxAttempts } } : {}),
        ...(r.skipParkedDestinations ? { skipParkedDestinations: r.skipParkedDestinations } : {}),
        retention: r.deleteOnPublish || r.keepPublishedMs === false ? false : { keepPublishedMs: r.keepPublishedMs ?? DEFAULT_KEEP_PUBLISHED_MS },
      });
    } catch (err) {
      await db.connection.close();
      if (err instanceof ConfigError) throw new CliError(configMessage(err, config.sources));
      throw err;
    }
    try {
      await relay.start();
    } catch (err) {
      await relay.stop().catch(() => {});
      await db.connection.close();
      if (err instanceof ConfigError) throw new CliError(`transport.${err.field}: ${err.message.slice(err.field.length + 2)}`);
      throw err;
    }
    if (signal.aborted) logger.info({}, 'txbox relay: signal received during start');
    if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
    logger.info({ relayId: relay.relayId }, 'txbox relay: stopping (signal received)');
    await relay.stop();
    await db.connection.close();
    return 0;
  },
};
