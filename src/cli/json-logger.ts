import type { Logger } from '../core/logger.ts';

const LEVELS = { debug: 20, info: 30, warn: 40, error: 50, silent: 100 } as const;

/** A minimal pino-style logger: one JSON line per entry on stderr. */
export function jsonLogger(level: keyof typeof LEVELS, write: (line: string) => void = (l) => process.stderr.write(l)): Logger {
  const min = LEVELS[level];
  const make =
    (name: keyof typeof LEVELS) =>
    (obj: object, msg?: string): void => {
      if (LEVELS[name] < min) return;
      write(JSON.stringify({ level: name, time: new Date().toISOString(), msg, ...obj }) + '\n');
    };
  return { debug: make('debug'), info: make('info'), warn: make('warn'), error: make('error') };
}
