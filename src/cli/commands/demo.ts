import type { Command } from '../command.ts';
import { CliError, EXIT } from '../cli-error.ts';
import { Progress, fmt } from '../progress.ts';
import { parseDuration } from '../../core/duration.ts';
import { importOptional } from '../optional-import.ts';
import { runDemo, type DemoReport } from '../demo/demo-run.ts';
import { HttpDemoSink } from '../demo/http-sink.ts';
import type { DemoSink } from '../demo/demo-sink.ts';
import { storeOf } from '../backends/backend.ts';
import { parseFirestoreUrl, type FirestoreLocation } from '../backends/firestore-url.ts';

/** Where the demo publishes; broker sinks take the broker address from --transport-url or TXBOX_TRANSPORT_URL. */
const SINKS: Record<string, (url: string | undefined) => Promise<DemoSink>> = {
  http: async () => new HttpDemoSink(),
  kafka: async (url) => new (await importOptional('the kafka demo', () => import('../demo/kafka-sink.ts'))).KafkaDemoSink(url ? { brokers: url } : {}),
  nats: async (url) => new (await importOptional('the nats demo', () => import('../demo/nats-sink.ts'))).NatsDemoSink(url ? { servers: url } : {}),
  rabbitmq: async (url) => new (await importOptional('the rabbitmq demo', () => import('../demo/rabbitmq-sink.ts'))).RabbitMqDemoSink(url),
  redis: async (url) => new (await importOptional('the redis demo', () => import('../demo/redis-sink.ts'))).RedisDemoSink(url ?? 'redis://127.0.0.1:6379'),
  // The emulators: Pub/Sub's address also from PUBSUB_EMULATOR_HOST (as Google's client reads it), SQS's an endpoint URL.
  pubsub: async (url) => {
    const { PubSubDemoSink, pubsubEmulatorAddress } = await import('../demo/pubsub-sink.ts');
    return new PubSubDemoSink(pubsubEmulatorAddress(url, process.env));
  },
  sqs: async (url) => new (await import('../demo/sqs-sink.ts')).SqsDemoSink(url ? { endpoint: url } : {}),
};

export const demoCommand: Command = {
  name: 'demo',
  stopsOnSignal: true,
  summary: 'run an order service, the relay and a receiver, and verify: nothing lost, nothing phantom, per-key order kept',
  help: `Usage: txbox demo [--events N] [--writers N] [--crash-relay-every DURATION] [--database-url URL] [--store mysql|firestore]

Needs no service: an order service on embedded PGlite writes orders and
payments with concurrent writers (about 10% of transactions roll back), a
relay posts the events to an in-process HTTP receiver, where an inventory
service applies them through its inbox to a version-guarded projection.
The summary checks what arrived against what committed, and the projection
against the committed orders. Exit code 0 only when nothing was lost,
nothing rolled back arrived, every key kept its order, and the projection
matches exactly.

Options:
  --events N               events to commit (default 5000)
  --writers N              concurrent writers (default 8)
  --rollback-rate R        share of transactions rolled back (default 0.1)
  --crash-relay-every DUR  abort the relay this often (e.g. 300ms, 2s), as a crash would, and start a new one
  --database-url URL       run the same demo on PostgreSQL (a temporary schema, dropped after),
                           or on MySQL/MariaDB with a mysql:// or mariadb:// URL (tables
                           prefixed txbox_demo_<id>_ in the URL's database, dropped after),
                           or on Firestore with firestore://PROJECT_ID[/DATABASE_ID]
                           (collections prefixed txbox_demo_<id>_, deleted after)
  --store TYPE             postgres (default; PGlite without --database-url), mysql (needs a
                           mysql:// or mariadb:// --database-url; implied by one) or firestore
                           (a firestore:// --database-url, implied by one, or the emulator at
                           FIRESTORE_EMULATOR_HOST in project txbox-demo; the inventory
                           service's inbox then runs on embedded PGlite)
  --transport TYPE         where the relay publishes: http (default, in-process receiver),
                           kafka, rabbitmq, nats or redis (a real broker, read back to verify),
                           pubsub or sqs (an emulator: Google's Pub/Sub emulator, ElasticMQ)
  --transport-url ADDRESS  the broker's address (default: its usual port on 127.0.0.1); pubsub:
                           the emulator's host:port (default PUBSUB_EMULATOR_HOST, else
                           127.0.0.1:8085); sqs: the endpoint URL (default http://127.0.0.1:9324)`,
  options: {
    events: { type: 'string' },
    writers: { type: 'string' },
    'rollback-rate': { type: 'string' },
    'crash-relay-every': { type: 'string' },
    transport: { type: 'string' },
    'transport-url': { type: 'string' },
    store: { type: 'string' },
  },
  async run({ flags, config, out, signal }) {
    const int = (name: string, fallback: number, min: number): number => {
      const v = flags[name];
      if (v === undefined) return fallback;
      const n = Number(v);
      if (!Number.isSafeInteger(n) || n < min) throw new CliError(`--${name}: must be an integer >= ${min}, got ${JSON.stringify(v)}`);
      return n;
    };
    const rollbackRate = flags['rollback-rate'] === undefined ? 0.1 : Number(flags['rollback-rate']);
    if (!(rollbackRate >= 0 && rollbackRate < 1)) throw new CliError('--rollback-rate: must be a number from 0 to below 1, e.g. 0.1');
    const store = demoStore(typeof flags.store === 'string' ? flags.store : undefined, config.databaseUrl, config.sources.databaseUrl);
    const firestore = store === 'firestore' ? firestoreDemoLocation(config.databaseUrl, config.sources.databaseUrl) : undefined;
    const sinkName = typeof flags.transport === 'string' ? flags.transport : 'http';
    const makeSink = SINKS[sinkName];
    if (!makeSink) throw new CliError(`--transport: unknown ${JSON.stringify(sinkName)}; choose one of ${Object.keys(SINKS).join(', ')}`);
    const sink = await makeSink(typeof flags["transport-url"] === "string" ? flags["transport-url"] : undefined);
    const progress = new Progress(process.stderr, 2000);
    const report = await runDemo({
      events: int('events', 5000, 1),
      writers: int('writers', 8, 1),
      rollbackRate,
      crashEveryMs: typeof flags['crash-relay-every'] === 'string' ? parseDuration(flags['crash-relay-every'], '--crash-relay-every') : 0,
      databaseUrl: config.databaseUrl,
      store,
      ...(firestore ? { firestore } : {}),
      sink,
      onProgress: (line) => progress.update(line),
      signal,
    });
    progress.done();
    out(renderReport(report));
    if (report.interrupted) {
      out('interrupted: the figures above cover what committed before the signal');
      return EXIT.interrupted;
    }
    const ok =
      report.lost === 0 && report.phantom === 0 && report.orderViolations === 0 && report.projection.mismatched === 0 && report.projection.phantom === 0;
    return ok ? EXIT.ok : EXIT.failure;
  },
};

const isMysqlUrl = (url: string | undefined): boolean => url !== undefined && storeOf(url) === 'mysql';

/** The project of the demo on the emulator when no firestore:// URL names one. */
export const DEMO_EMULATOR_PROJECT = 'txbox-demo';

/** Where the Firestore demo runs: the URL's project, or the emulator's demo project; a CliError naming the fix when neither is given. */
export function firestoreDemoLocation(url: string | undefined, source: string | undefined, env: NodeJS.ProcessEnv = process.env): FirestoreLocation {
  if (url !== undefined) return parseFirestoreUrl(url, source ?? 'the database URL', env);
  if (!env.FIRESTORE_EMULATOR_HOST) {
    throw new CliError(
      '--store firestore needs Firestore: set FIRESTORE_EMULATOR_HOST=127.0.0.1:8086 to use the emulator (scripts/firestore/up.sh starts it), or pass --database-url firestore://PROJECT_ID (Application Default Credentials)',
    );
  }
  return parseFirestoreUrl(`firestore://${DEMO_EMULATOR_PROJECT}`, 'FIRESTORE_EMULATOR_HOST', env);
}

/** The demo's store: --store, or the database URL's scheme (mysql:// and mariadb:// are MySQL, firestore:// Firestore); a mismatch names both. */
export function demoStore(flag: string | undefined, url: string | undefined, urlSource: string | undefined): 'postgres' | 'mysql' | 'firestore' {
  if (flag !== undefined && flag !== 'postgres' && flag !== 'mysql' && flag !== 'firestore') throw new CliError(`--store: unknown ${JSON.stringify(flag)}; choose postgres, mysql or firestore`);
  const firestoreUrl = url !== undefined && storeOf(url) === 'firestore';
  if (flag === 'firestore') {
    // No URL: the emulator (firestoreDemoLocation says what to set when there is none).
    if (url !== undefined && !firestoreUrl) throw new CliError(`--store firestore: ${urlSource ?? 'the database URL'} is not a firestore:// URL; pass --database-url firestore://PROJECT_ID, or none to use the emulator at FIRESTORE_EMULATOR_HOST`);
    return 'firestore';
  }
  if (firestoreUrl) {
    if (flag !== undefined) throw new CliError(`--store ${flag}: ${urlSource ?? 'the database URL'} is a Firestore URL; pass --store firestore or a ${flag === 'mysql' ? 'mysql://' : 'postgres://'} URL`);
    return 'firestore';
  }
  const mysqlUrl = isMysqlUrl(url);
  if (flag === 'mysql' && !mysqlUrl) {
    throw new CliError(
      url === undefined
        ? '--store mysql needs a MySQL or MariaDB server: pass --database-url mysql://user@127.0.0.1:3306/database (or set TXBOX_DATABASE_URL)'
        : `--store mysql: ${urlSource ?? 'the database URL'} is not a mysql:// or mariadb:// URL`,
    );
  }
  if (flag === 'postgres' && mysqlUrl) throw new CliError(`--store postgres: ${urlSource ?? 'the database URL'} is a MySQL URL; pass --store mysql or a postgres:// URL`);
  return mysqlUrl ? 'mysql' : 'postgres';
}

export function renderReport(r: DemoReport): string {
  const rate = r.committed / (r.elapsedMs / 1000);
  const mark = (n: number): string => (n === 0 ? `${n}  ok` : `${n}  FAILED`);
  return [
    `txbox demo: ${r.database} -> relay -> ${r.sink}`,
    `  transactions       ${fmt(r.transactions)} (${fmt(r.rolledBack)} rolled back on purpose)`,
    `  events committed   ${fmt(r.committed)}`,
    `  delivered          ${fmt(r.delivered)} unique, ${fmt(r.duplicates)} duplicate deliveries (at-least-once)`,
    `  lost               ${mark(r.lost)}`,
    `  phantom            ${mark(r.phantom)}   (rolled back but delivered)`,
    `  order violations   ${mark(r.orderViolations)}   (per key, against commit order)`,
    `  relay restarts     ${r.relayRestarts}`,
    `  inventory service  projection of ${fmt(r.projection.orders)} orders: ${mark(r.projection.mismatched)} mismatched, ${r.projection.phantom} phantom; inbox skipped ${fmt(r.projection.duplicatesSkipped)} duplicates, held ${fmt(r.projection.gapsHeld)} out-of-order versions`,
    `  elapsed ${(r.elapsedMs / 1000).toFixed(1)} s, ${fmt(Math.round(rate))} events/s; commit -> delivery p50 ${r.latencyMs.p50.toFixed(1)} ms, p99 ${r.latencyMs.p99.toFixed(1)} ms, max ${r.latencyMs.max.toFixed(1)} ms`,
  ].join('\n');
}
