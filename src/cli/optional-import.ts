import { CliError, EXIT } from './cli-error.ts';

/**
 * Loads a module that needs an optional client package (ioredis, kafkajs,
 * amqplib, @nats-io/*, @electric-sql/pglite). When a package is missing, the
 * error names it and the command that installs it, instead of Node's
 * "Cannot find package ... imported from <path>".
 */
export async function importOptional<T>(what: string, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (err) {
    const missing = missingPackage(err);
    if (missing === undefined) throw err;
    throw new CliError(`${what} needs the package ${missing}, which is not installed: npm install ${missing}`, EXIT.usage);
  }
}

/** The package name of an ERR_MODULE_NOT_FOUND for a bare specifier (`pkg` or `@scope/pkg`, without a subpath). */
function missingPackage(err: unknown): string | undefined {
  if ((err as { code?: unknown } | null)?.code !== 'ERR_MODULE_NOT_FOUND') return undefined;
  const specifier = /Cannot find (?:package|module) '([^']+)'/.exec((err as Error).message)?.[1];
  if (specifier === undefined || specifier.startsWith('.') || specifier.startsWith('/') || /^[a-z]+:/i.test(specifier)) return undefined;
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
}
