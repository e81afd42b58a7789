import type { HealthSource } from '../core/health.ts';
import type { Logger } from '../core/logger.ts';
import type { Metrics } from '../core/metrics.ts';
import type { HealthServer, MetricsText } from '../health/health-server.ts';
import { ConfigError } from '../core/errors.ts';
import { CliError, EXIT } from './cli-error.ts';
import { importOptional } from './optional-import.ts';

/** The flags of commands that serve /metrics, /healthz and /readyz. */
export const METRICS_OPTIONS = {
  'metrics-port': { type: 'string' },
  'metrics-host': { type: 'string' },
  'metrics-allow-remote': { type: 'boolean' },
} as const;

export const METRICS_HELP = `  --metrics-port N          serve /metrics (Prometheus text, needs prom-client), /healthz and
                            /readyz on this port (0: any free port; the address is logged)
  --metrics-host HOST       address to bind (default 127.0.0.1)
  --metrics-allow-remote    allow a --metrics-host that is not loopback: the endpoints have no
                            authentication, so put a firewall or an authenticating proxy in front`;

export interface MetricsFlags {
  readonly port: number;
  readonly host: string;
  readonly allowRemote: boolean;
}

/** The metrics flags, checked; undefined without --metrics-port. */
export function metricsFlags(flags: Record<string, unknown>): MetricsFlags | undefined {
  const port = flags['metrics-port'];
  const host = flags['metrics-host'];
  const allowRemote = flags['metrics-allow-remote'] === true;
  if (port === undefined) {
    if (host !== undefined || allowRemote) throw new CliError('--metrics-host and --metrics-allow-remote need --metrics-port N', EXIT.usage);
    return undefined;
  }
  const n = Number(port);
  if (typeof port !== 'string' || !/^\d+$/.test(port) || n > 65535) throw new CliError(`--metrics-port: must be a port number from 0 to 65535, got ${JSON.stringify(port)}`, EXIT.usage);
  return { port: n, host: typeof host === 'string' ? host : '127.0.0.1', allowRemote };
}

export interface Prepared {
  readonly metrics: Metrics;
  readonly registry: MetricsText;
}

/**
 * Serves /metrics, /healthz and /readyz for `sources` (txbox/health's
 * serveHealth) with the prom-client registry of `prepared`. Bad flags and a
 * port in use are CliErrors naming the flag.
 */
export async function startMetricsServer(flags: MetricsFlags, prepared: Prepared, sources: Record<string, HealthSource>, logger: Logger): Promise<HealthServer> {
  const { serveHealth } = await import('../health/health-server.ts');
  try {
    const server = await serveHealth({ port: flags.port, host: flags.host, allowRemote: flags.allowRemote, sources, metrics: prepared.registry });
    logger.info({ url: server.url }, 'txbox: serving /metrics, /healthz and /readyz');
    return server;
  } catch (err) {
    if (err instanceof ConfigError) {
      const flag = err.field === 'host' ? '--metrics-host' : err.field === 'port' ? '--metrics-port' : `metrics ${err.field}`;
      throw new CliError(`${flag}: ${err.message.slice(err.field.length + 2).replace('allowRemote: true (txbox: --metrics-allow-remote)', '--metrics-allow-remote')}`, EXIT.usage);
    }
    const code = (err as { code?: unknown }).code;
    if (code === 'EADDRINUSE' || code === 'EADDRNOTAVAIL' || code === 'EACCES') {
      throw new CliError(`--metrics-port ${flags.port} on ${flags.host}: cannot listen (${String(code)}): choose another port or host`, EXIT.usage);
    }
    throw err;
  }
}

/** prom-client (an optional peer) and a registry with txbox's metrics and the process's default metrics. */
export async function prepareMetrics(): Promise<Prepared> {
  const prom = await importOptional('--metrics-port', () => import('prom-client'));
  const { prometheusMetrics } = await import('../metrics/prometheus/prometheus-metrics.ts');
  const registry = new prom.Registry();
  prom.collectDefaultMetrics({ register: registry });
  return { metrics: prometheusMetrics({ registry }), registry };
}
