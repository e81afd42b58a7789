/** Exit codes of the `txbox` command. */
export const EXIT = {
  ok: 0,
  /** The operation failed (database error, demo verification failed, ...). */
  failure: 1,
  /** Bad flags, environment or config file: nothing was done. */
  usage: 2,
  /** The database is unreachable or its txbox schema is missing or old. */
  database: 3,
  /** Interrupted by SIGINT before finishing. */
  interrupted: 130,
} as const;

/** An error the CLI reports in one line and exits with `exitCode`. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT.usage,
  ) {
    super(message);
  }
}

/** Hides the password of a database URL (for messages). */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '****';
    for (const key of [...u.searchParams.keys()]) if (/pass|secret|token|key/i.test(key)) u.searchParams.set(key, '****');
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

/**
 * A ConfigError's message with its field replaced by where the user set it
 * ("--table", "TXBOX_SCHEMA"), so that the field is not named twice.
 */
export function configMessage(err: { readonly field: string; readonly message: string }, sources: Readonly<Record<string, string>>): string {
  const source = sources[err.field];
  if (source === undefined || !err.message.startsWith(`${err.field}: `)) return err.message;
  return `${source}: ${err.message.slice(err.field.length + 2)}`;
}
