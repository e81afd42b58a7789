import { mysqlErrno } from '../../core/store-errors.ts';

/** ER_LOCK_DEADLOCK, matched on errno (mysql2's `code` text is not reliable across servers). */
export const DEADLOCK = 1213;
/** ER_DUP_ENTRY. */
export const DUPLICATE_ENTRY = 1062;

/**
 * Runs a whole transaction again when InnoDB chose it as a deadlock victim
 * (it was rolled back, so a rerun is safe). The errno is looked for in the
 * cause chain too: an inbox handler's deadlocked statement arrives wrapped.
 */
export async function deadlockRetry<T>(fn: () => Promise<T>, attempts = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      if (mysqlErrno(err) !== DEADLOCK || i >= attempts) throw err;
      await new Promise((r) => setTimeout(r, 5 * i + Math.random() * 10 * i));
    }
  }
}
