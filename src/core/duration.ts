import { ConfigError } from './errors.ts';

const UNITS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/gy;

/**
 * Parses a duration with units to milliseconds: "500ms", "30s", "5m", "24h",
 * "7d", or several parts from the largest unit down ("1h30m", "2d12h").
 * A bare number is refused: `7` could mean 7 ms or 7 days, and guessing
 * wrong deletes history. `field` names the setting as the user wrote it
 * (`--older-than`, `TXBOX_KEEP_PUBLISHED`); flags are shown as
 * `--flag 7`, environment variables as `NAME=7`.
 */
export function parseDuration(text: string, field: string): number {
  const value = text.trim();
  const shown = field.startsWith('-') ? `${field} ${value}` : /^[A-Z][A-Z0-9_]*$/.test(field) ? `${field}=${value}` : `${field} ${JSON.stringify(value)}`;
  if (/^\d+(\.\d+)?$/.test(value)) {
    const example = field.startsWith('-') ? `${field} ${value}d` : /^[A-Z][A-Z0-9_]*$/.test(field) ? `${field}=${value}d` : `"${value}d"`;
    throw new ConfigError(field, `give a unit, e.g. ${example} (ms, s, m, h or d); a bare number is not a duration`, { shown });
  }
  let total = 0;
  let last = Infinity;
  PART.lastIndex = 0;
  let end = 0;
  for (let m = PART.exec(value); m; m = PART.exec(value)) {
    const unit = UNITS[m[2] as keyof typeof UNITS];
    if (unit >= last) break;
    last = unit;
    total += Number(m[1]) * unit;
    end = PART.lastIndex;
  }
  if (value.length === 0 || end !== value.length) {
    throw new ConfigError(field, 'not a duration; write a number with a unit, e.g. 500ms, 30s, 15m, 24h, 7d or 1h30m', { shown });
  }
  return Math.round(total);
}

/**
 * A millisecond option of a store or connection: `fallback` when not given,
 * else a whole number of milliseconds >= `min`, or a ConfigError naming `field`.
 */
export function millisOption(field: string, value: number | undefined, fallback: number, min: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < min) throw new ConfigError(field, `must be a whole number of milliseconds >= ${min}, got ${String(value)}`);
  return value;
}
