import type { Transport } from '../core/ports.ts';
import type { Logger } from '../core/logger.ts';
import { ConfigError } from '../core/errors.ts';
import { CliError } from './cli-error.ts';
import type { TransportConfig } from './config.ts';

type Factory = (config: TransportConfig, logger: Logger) => Promise<Transport>;

/** Transports the CLI can build from configuration; each loads its client library only when chosen. */
const FACTORIES: Record<string, Factory> = {
  async http(config) {
    const { HttpTransport } = await import('../transports/http/index.ts');
    const { type: _type, ...options } = config;
    return new HttpTransport(options as ConstructorParameters<typeof HttpTransport>[0]);
  },
};

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
