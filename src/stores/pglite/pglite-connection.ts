import type { PGlite } from '@electric-sql/pglite';
import type { SqlExecutor } from '../../core/ports.ts';
import type { PostgresConnection } from '../postgres/postgres-connection.ts';

/**
 * A PostgresConnection over an embedded PGlite instance. PGlite runs one
 * query at a time and its transactions are exclusive, so the app and an
 * in-process relay share it safely. The caller owns the instance: `close()`
 * does not close it.
 */
export function pgliteConnection(db: PGlite): PostgresConnection {
  return {
    query: async <R>(text: string, params?: unknown[]) => (await db.query(text, params)) as unknown as { rows: R[] },
    transaction: <T>(fn: (tx: SqlExecutor) => Promise<T>) => db.transaction((tx) => fn(tx as unknown as SqlExecutor)),
    async listen(channel, onNotify) {
      // Quoted so that PGlite keeps the channel's case, as pg_notify does.
      const unlisten = await db.listen(`"${channel}"`, () => onNotify());
      onNotify();
      return async () => unlisten();
    },
    async close() {},
  };
}
