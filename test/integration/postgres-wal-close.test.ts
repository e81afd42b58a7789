/**
 * Closing a WAL-mode relay store while its stream is still opening. pg's
 * `client.connect()` never settles when `end()` is called before the socket
 * has connected, so an opening aborted at that moment left `close()` (and
 * `Relay.stop()`) waiting forever with nothing else running: the process's
 * event loop emptied under a pending stop (seen as "Promise resolution is
 * still pending but the event loop has already resolved" in the store
 * conformance suite when relays stopped right after starting).
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { openWalStream } from '../../src/stores/postgres/pg-wal-stream.ts';
import { DATABASE_URL } from '../helpers/databases.ts';

/** Resolves with the outcome of `p`, or 'pending' if it has not settled within `ms` (a ref'd timer keeps the process alive meanwhile). */
function within<T>(p: Promise<T>, ms: number): Promise<string> {
  return Promise.race([
    p.then(() => 'resolved', (err: Error) => `rejected: ${err.message}`),
    new Promise<string>((resolve) => setTimeout(() => resolve('pending'), ms)),
  ]);
}

it('an opening aborted before its connection is up rejects at once (and one aborted later too)', async () => {
  for (const delayMs of [0, 1, 5, 20]) {
    const controller = new AbortController();
    const opening = openWalStream({
      client: { connectionString: DATABASE_URL },
      slot: `txbox_close_test_${process.pid}_${delayMs}`,
      publication: 'txbox_close_test_none',
      onCommit: () => {},
      onEnd: () => {},
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), delayMs);
    const outcome = await within(opening, 5000);
    assert.notEqual(outcome, 'pending', `aborted after ${delayMs} ms: the opening never settled`);
    // A stream that did open before the abort is closed by its caller; here, whatever opened is closed.
    if (outcome === 'resolved') await (await opening).close();
  }
});
