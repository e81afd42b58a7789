import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { hostName, isLoopback } from '../core/loopback.ts';
import { isIP } from 'node:net';
import { ConfigError } from '../core/errors.ts';
import { scrubErrorText, thrownText } from '../core/error-text.ts';
import type { HealthReport, HealthSource } from '../core/health.ts';

/** What `/metrics` serves: a prom-client `Registry` fits as it is. */
export interface MetricsText {
  readonly contentType: string;
  metrics(): Promise<string>;
}

export interface ServeHealthOptions {
  /** The port; 0 picks a free one (read it from the result). Required. */
  readonly port: number;
  /** The address to bind. Default: `127.0.0.1`. Another than loopback needs `allowRemote: true`. */
  readonly host?: string;
  /** Bind a non-loopback address although the endpoints have no authentication. Default: false. */
  readonly allowRemote?: boolean;
  /** The components `/healthz` and `/readyz` report, by name, e.g. `{ relay }`. Required (at least one). */
  readonly sources: Readonly<Record<string, HealthSource>>;
  /** Served on `/metrics`, e.g. a prom-client Registry. Default: none (`/metrics` answers 404). */
  readonly metrics?: MetricsText;
  /** Longest wait for one source's `health()`, in ms; a source slower than that counts as failed. Default: 2000. */
  readonly timeoutMs?: number;
}

export interface HealthServer {
  /** `http://host:port`. */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

/**
 * Serves `/metrics` (the registry's text), `/healthz` (200 while every
 * source is live) and `/readyz` (200 while every source is ready; JSON with
 * each check, 503 otherwise) with node:http. Binds 127.0.0.1 by default:
 * these endpoints have no authentication.
 *
 * @example
 * const registry = new Registry();
 * const relay = createRelay({ store, transport, metrics: prometheusMetrics({ registry }) });
 * await relay.start();
 * const server = await serveHealth({ port: 9464, sources: { relay }, metrics: registry });
 */
export async function serveHealth(options: ServeHealthOptions): Promise<HealthServer> {
  const { port, host, sources, timeoutMs } = resolve(options);
  const metrics = options.metrics;
  const guardHost = options.allowRemote !== true;
  const server = createServer((req, res) => {
    // Bound to loopback: a page whose name an attacker rebinds to 127.0.0.1 sends its own name as Host; refuse it.
    if (guardHost && !isLoopback(hostName(req.headers.host))) {
      res.writeHead(421, { 'content-type': 'text/plain' }).end('misdirected request: this server answers only to a loopback Host (127.0.0.1, localhost, [::1])\n');
      return;
    }
    handle(req, res, sources, metrics, timeoutMs).catch(() => {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('internal error\n');
    });
  });
  await listen(server, port, host);
  const address = server.address();
  const bound = typeof address === 'object' && address ? address.port : port;
  const shown = host.includes(':') ? `[${host}]` : host;
  return {
    url: `http://${shown}:${bound}`,
    port: bound,
    close: () =>
      new Promise<void>((done) => {
        server.close(() => done());
        server.closeAllConnections();
      }),
  };
}

function resolve(o: ServeHealthOptions): { port: number; host: string; sources: [string, HealthSource][]; timeoutMs: number } {
  if (!o || typeof o !== 'object') throw new ConfigError('options', 'must be an object such as { port: 9464, sources: { relay } }');
  if (!Number.isSafeInteger(o.port) || o.port < 0 || o.port > 65535) throw new ConfigError('port', `must be an integer from 0 to 65535, got ${String(o.port)}`);
  const host = o.host ?? '127.0.0.1';
  if (typeof host !== 'string' || host.length === 0) throw new ConfigError('host', 'must be an address such as 127.0.0.1');
  if (!LOOPBACK.has(host) && !/^127\./.test(host) && o.allowRemote !== true) {
    throw new ConfigError(
      'host',
      `${JSON.stringify(host)} is not a loopback address and the health and metrics endpoints have no authentication: ` +
        'pass allowRemote: true (txbox: --metrics-allow-remote) to serve them there anyway, behind a firewall or a proxy that authenticates',
    );
  }
  if (host !== 'localhost' && isIP(host) === 0 && o.allowRemote !== true) throw new ConfigError('host', `${JSON.stringify(host)} is not an IP address`);
  const sources = Object.entries(o.sources ?? {});
  if (sources.length === 0 || sources.some(([, s]) => typeof s?.health !== 'function')) {
    throw new ConfigError('sources', 'must name at least one component with a health() method, e.g. { relay }');
  }
  const timeoutMs = o.timeoutMs ?? 2000;
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) throw new ConfigError('timeoutMs', 'must be a positive integer (ms)');
  return { port: o.port, host, sources, timeoutMs };
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((done, fail) => {
    server.once('error', fail);
    server.listen(port, host, () => {
      server.off('error', fail);
      done();
    });
  });
}

async function handle(req: IncomingMessage, res: ServerResponse, sources: [string, HealthSource][], metrics: MetricsText | undefined, timeoutMs: number): Promise<void> {
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
    return;
  }
  const path = (req.url ?? '/').split('?')[0];
  if (path === '/metrics') {
    if (!metrics) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('no metrics registry: pass metrics (e.g. a prom-client Registry) to serveHealth\n');
      return;
    }
    const text = await metrics.metrics();
    res.writeHead(200, { 'content-type': metrics.contentType }).end(req.method === 'HEAD' ? undefined : text);
    return;
  }
  if (path !== '/healthz' && path !== '/readyz') {
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: /metrics, /healthz, /readyz\n');
    return;
  }
  const reports = await Promise.all(sources.map(async ([name, source]) => ({ name, ...(await report(source, timeoutMs)) })));
  const ok = path === '/healthz' ? reports.every((r) => r.live) : reports.every((r) => r.live && r.ready);
  const body = path === '/healthz' ? { live: ok, components: reports.map((r) => ({ name: r.name, live: r.live })) } : { ready: ok, components: reports };
  res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(req.method === 'HEAD' ? undefined : `${JSON.stringify(body)}\n`);
}

/** A source's report; one that throws or does not answer in time is neither live nor ready. */
async function report(source: HealthSource, timeoutMs: number): Promise<HealthReport> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      source.health(),
      new Promise<never>((_, fail) => {
        timer = setTimeout(() => fail(new Error(`health() did not answer within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
  } catch (err) {
    const detail = scrubErrorText(thrownText(err), 200);
    return { live: false, ready: false, checks: [{ name: 'health', ok: false, detail }] };
  } finally {
    clearTimeout(timer);
  }
}
