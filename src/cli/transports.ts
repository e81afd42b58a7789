import type { Transport } from '../core/ports.ts';
import type { Logger } from '../core/logger.ts';
import { ConfigError } from '../core/errors.ts';
import { CliError } from './cli-error.ts';
import type { TransportConfig } from './config.ts';
import { importOptional } from './optional-import.ts';

type Factory = (config: TransportConfig, logger: Logger) => Promise<Transport>;

/** Transports the CLI can build from configuration; each loads its client library only when chosen. */
const FACTORIES: Record<string, Factory> = {
  async http(config, logger) {
    const { HttpTransport } = await importOptional('the http transport', () => import('../transports/http/index.ts'));
    let transport;
    try {
      transport = new HttpTransport(options(config) as unknown as ConstructorParameters<typeof HttpTransport>[0]);
    } catch (err) {
      if (err instanceof ConfigError && err.field === 'secret' && config.secret === undefined) {
        throw new CliError(
          'no webhook secret: set TXBOX_WEBHOOK_SECRET (or --secret, or transport.secret in the config file) to the secret your receivers verify; generate one with `npx txbox secret`. To send unsigned requests on purpose (tests, trusted networks), pass --unsigned',
        );
      }
      throw err;
    }
    if (config.secret === undefined) {
      logger.warn({ transport: 'http' }, 'txbox relay: sending UNSIGNED webhooks (--unsigned): receivers cannot tell them from forged ones; set TXBOX_WEBHOOK_SECRET to sign them');
    }
    return transport;
  },
  async kafka(config, logger) {
    const { KafkaTransport } = await importOptional('the kafka transport', () => import('../transports/kafka/index.ts'));
    const o: Record<string, unknown> = { ...options(config, 'brokers'), logger };
    if (typeof o.brokers === 'string') o.brokers = o.brokers.split(',');
    return new KafkaTransport(o as unknown as ConstructorParameters<typeof KafkaTransport>[0]);
  },
  async rabbitmq(config, logger) {
    const { RabbitMqTransport } = await importOptional('the rabbitmq transport', () => import('../transports/rabbitmq/index.ts'));
    return new RabbitMqTransport({ ...options(config, 'url'), logger } as unknown as ConstructorParameters<typeof RabbitMqTransport>[0]);
  },
  async nats(config, logger) {
    const { NatsTransport } = await importOptional('the nats transport', () => import('../transports/nats/index.ts'));
    const o: Record<string, unknown> = { ...options(config, 'servers'), logger };
    if (typeof o.servers === 'string') o.servers = o.servers.split(',');
    return new NatsTransport(o as unknown as ConstructorParameters<typeof NatsTransport>[0]);
  },
  async pubsub(config, logger) {
    // No address: the client finds Google Cloud through its default credentials,
    // and the emulator through PUBSUB_EMULATOR_HOST; the project comes from
    // transport.projectId in the config file or GOOGLE_CLOUD_PROJECT.
    if (config.url !== undefined) throw new CliError('transport.url: the pubsub transport takes no address; set PUBSUB_EMULATOR_HOST for the emulator, and the project with GOOGLE_CLOUD_PROJECT or transport.projectId in the config file');
    const { PubSubTransport } = await importOptional('the pubsub transport', () => import('../transports/pubsub/index.ts'));
    const o: Record<string, unknown> = { ...options(config), logger };
    if (o.projectId === undefined && process.env.GOOGLE_CLOUD_PROJECT) o.projectId = process.env.GOOGLE_CLOUD_PROJECT;
    return new PubSubTransport(o as unknown as ConstructorParameters<typeof PubSubTransport>[0]);
  },
  async sqs(config, logger) {
    // Queues come from the config file (transport.queues); the AWS SDK finds the
    // region and credentials through its default chain (AWS_REGION, AWS_PROFILE, ...).
    const { SqsTransport } = await importOptional('the sqs transport', () => import('../transports/sqs/index.ts'));
    return new SqsTransport({ ...options(config, 'endpoint'), logger } as unknown as ConstructorParameters<typeof SqsTransport>[0]);
  },
  async sns(config, logger) {
    const { SnsTransport } = await importOptional('the sns transport', () => import('../transports/sqs/index.ts'));
    return new SnsTransport({ ...options(config, 'endpoint'), logger } as unknown as ConstructorParameters<typeof SnsTransport>[0]);
  },
  async redis(config, logger) {
    const { RedisTransport } = await importOptional('the redis transport', () => import('../transports/redis/index.ts'));
    return new RedisTransport({ ...options(config, 'url'), logger } as unknown as ConstructorParameters<typeof RedisTransport>[0]);
  },
};

/** The transport's options from the config file, with `--transport-url` / TXBOX_TRANSPORT_URL as its address setting. */
function options(config: TransportConfig, addressField?: string): Record<string, unknown> {
  const { type: _type, url, ...rest } = config;
  const out: Record<string, unknown> = { ...rest };
  if (url !== undefined && addressField) out[addressField] = url;
  return out;
}

export const TRANSPORT_TYPES = Object.keys(FACTORIES);

export async function createTransport(config: TransportConfig | undefined, logger: Logger): Promise<Transport> {
  if (!config) throw new CliError(`no transport: pass --transport (${TRANSPORT_TYPES.join(', ')}) or set TXBOX_TRANSPORT or transport.type in the config file`);
  const factory = FACTORIES[config.type];
  if (!factory) throw new CliError(`transport: unknown type ${JSON.stringify(config.type)}; choose one of ${TRANSPORT_TYPES.join(', ')}`);
  try {
    return await factory(config, logger);
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(`transport.${err.field}: ${err.message.slice(err.field.length + 2)}`);
    throw err;
  }
}
