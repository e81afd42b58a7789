/**
 * Named prepared statements on node-postgres connections: a statement that
 * runs on every event (the outbox insert, the inbox claim, a projection
 * upsert) is parsed and planned once per connection instead of on every call.
 * Other executors (PGlite, query builders) get the plain text.
 */
import { createHash } from 'node:crypto';
import type { SqlExecutor } from '../../core/ports.ts';

/** A prepared-statement name derived from the statement text: two texts never share a name. */
export function statementName(text: string): string {
  return `txbox_${createHash('sha1').update(text).digest('hex').slice(0, 20)}`;
}

type NamedQueryExecutor = SqlExecutor & { query(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: unknown[] }> };

/** node-postgres `Client` and `PoolClient` take a query config with a statement name. */
export function isNodePostgresClient(executor: SqlExecutor): executor is NamedQueryExecutor {
  const x = executor as unknown as Record<string, unknown>;
  return typeof x.connection === 'object' && x.connection !== null && 'processID' in x && 'secretKey' in x;
}

/**
 * Runs `text` as a named prepared statement when `executor` is a node-postgres
 * client and `prepare` is on; otherwise as plain text. `name` defaults to one
 * derived from the text: pass a precomputed one on hot paths.
 */
export function queryPrepared(executor: SqlExecutor, text: string, params: unknown[], prepare = true, name?: string): Promise<{ rows: unknown[] }> {
  if (prepare && isNodePostgresClient(executor)) return executor.query({ name: name ?? statementName(text), text, values: params });
  return executor.query(text, params);
}
