import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CliError } from '../cli-error.ts';
import type { Command } from '../command.ts';
import { openBackend, refusePostgresOnly } from '../backends/backend.ts';
import { parseDuration } from '../../core/duration.ts';
import { ConfigError } from '../../core/errors.ts';
import { createDashboardHandler, isLoopback, type DashboardInboxSource } from '../../dashboard/index.ts';

export const dashboardCommand: Command = {
  name: 'dashboard',
  stopsOnSignal: true,
  summary: 'a web dashboard: backlog and publish rate charts, relays, parked events and inbox dead/held events with retry, live',
  help: `Usage: txbox dashboard [--port 8090] [--host 127.0.0.1] (--token T | --no-auth)
                       [--show-payloads] [--inbox-table NAME] [--sample-every 5s]

Serves the dashboard until SIGINT/SIGTERM: backlog and publish rate per
destination over time, oldest pending age, relays and their bucket leases,
parked events (retry, skip, discard), the inbox's dead events (retry,
discard) and held events (retry), updated live. Every action is written to
the audit table with the actor dashboard:<token name>@<address>.

On MySQL or MariaDB (a mysql:// or mariadb:// database URL) it shows the same
sections; the parked events' "parked at" is empty (the table records no park
time).

Options:
  --port N             port to listen on (default 8090; 0 picks a free one)
  --host ADDR          address to bind (default 127.0.0.1)
  --token T            the access token, 16+ characters (or TXBOX_DASHBOARD_TOKEN;
                       generate one with openssl rand -hex 32); prefer the
                       environment variable, which other users cannot read in ps
  --no-auth            serve without a token: only with a loopback --host, and
                       only to loopback clients
  --show-payloads      show the payloads of parked events (default: hidden)
  --inbox-table NAME   inbox table in --schema, or the MySQL URL's database
                       (default inbox; shown when it exists)
  --sample-every D     how often the status is sampled (default 5s)`,
  options: {
    port: { type: 'string' },
    host: { type: 'string' },
    token: { type: 'string' },
    'no-auth': { type: 'boolean' },
    'show-payloads': { type: 'boolean' },
    'inbox-table': { type: 'string' },
    'sample-every': { type: 'string' },
  },
  async run({ flags, config, logger, out, signal }) {
    const host = typeof flags.host === 'string' ? flags.host : '127.0.0.1';
    const port = flags.port === undefined ? 8090 : Number(flags.port);
    if (!Number.isSafeInteger(port) || port < 0 || port > 65535) throw new CliError(`--port ${String(flags.port)}: give a port number from 0 to 65535, e.g. --port 8090`);
    const token = config.dashboardToken;
    const noAuth = flags['no-auth'] === true;
    const tokenSource = config.sources.dashboardToken ?? '--token';
    if (token !== undefined && noAuth) throw new CliError(`${tokenSource} and --no-auth: choose one`);
    if (token === undefined && !noAuth) {
      throw new CliError(`the dashboard refuses to start without an access token: set TXBOX_DASHBOARD_TOKEN (e.g. $(openssl rand -hex 32)) or pass --token${isLoopback(host) ? ', or --no-auth to serve loopback clients only' : ''}`);
    }
    if (noAuth && !isLoopback(host)) throw new CliError(`--no-auth with --host ${host}: without a token the dashboard binds loopback only (127.0.0.1, ::1, localhost); give a token to serve ${host}`);
    const sampleIntervalMs = typeof flags['sample-every'] === 'string' ? parseDuration(flags['sample-every'], '--sample-every') : 5000;
    const inboxTable = typeof flags['inbox-table'] === 'string' ? flags['inbox-table'] : 'inbox';

    refusePostgresOnly(config, ['schema']);
    const backend = await openBackend(config, logger, true, 'txbox dashboard');
    let inboxAdmin: DashboardInboxSource | undefined;
    let admin;
    try {
      if (backend.dashboard === undefined || backend.inbox === undefined) throw new CliError(`txbox dashboard: not available on ${backend.store}`);
      admin = backend.dashboard();
      const inbox = backend.inbox(inboxTable);
      try {
        await inbox.assertMigrated();
        inboxAdmin = inbox.admin();
      } catch (err) {
        if (flags['inbox-table'] !== undefined) throw new CliError(`--inbox-table ${inboxTable}: ${(err as Error).message}`, 3);
        logger.info({ table: inboxTable }, 'txbox dashboard: no migrated inbox table, the inbox section is hidden');
      }
    } catch (err) {
      await backend.close();
      throw err;
    }
    let handler;
    try {
      handler = createDashboardHandler({
        admin,
        inboxAdmin,
        ...(noAuth ? { allowNoAuth: true } : { token: token! }),
        showPayloads: flags['show-payloads'] === true,
        sampleIntervalMs,
        logger,
      });
    } catch (err) {
      await backend.close();
      if (err instanceof ConfigError) throw new CliError(err.field === 'token' ? err.message.replace(/^token/, tokenSource) : err.message);
      throw err;
    }
    const server = createServer(handler);
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => resolve());
      });
    } catch (err) {
      await handler.close();
      await backend.close();
      throw new CliError(`cannot listen on ${host}:${port}: ${(err as Error).message}`, 1);
    }
    const address = server.address() as AddressInfo;
    const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    out(`txbox dashboard on http://${shown}:${address.port}/ (${noAuth ? 'no auth: loopback clients only' : 'access token required'})`);
    if (!signal.aborted) await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
    logger.info({}, 'txbox dashboard: stopping (signal received)');
    await handler.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await backend.close();
    return 0;
  },
};
