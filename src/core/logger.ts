/**
 * The logging seam: a pino logger fits as is (`logger: pino()`), and so does
 * anything with these four methods. txbox logs ids, types, key hashes and
 * sizes, never payloads or credentials.
 */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

const noop = (): void => {};

export const silentLogger: Logger = { debug: noop, info: noop, warn: noop, error: noop };
