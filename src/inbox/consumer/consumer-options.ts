import { ConfigError } from '../../core/errors.ts';

/**
 * An integer option: `fallback` when not given, else an integer from `min`
 * to `max`, or a ConfigError naming the field and the range.
 *
 * @example
 * const concurrency = int('concurrency', options.concurrency, 16, 1, 1000);
 */
export function int(field: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min || value > max) throw new ConfigError(field, `must be an integer from ${min} to ${max}, got ${String(value)}`);
  return value;
}

/**
 * The given (not undefined) options among `keys`: a consumer passes its
 * connection options on to its transport's resolver with it.
 *
 * @example
 * resolveRedisTransportOptions({ ...pick(options, ['url', 'client', 'logger']), streams: {} });
 */
export function pick<T extends object, K extends keyof T>(o: T, keys: readonly K[]): Pick<T, K> {
  const out = {} as Pick<T, K>;
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k];
  return out;
}
