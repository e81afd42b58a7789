/**
 * The WAL stream reader (src/stores/postgres/pg-wal-stream.ts) and its keeper
 * (postgres-wal-wake.ts) against stream faults a real server cannot be made
 * to produce on cue, from a fake server (test/helpers/fake-replication-server.ts):
 * malformed pgoutput data must end the stream (the relay falls back and
 * retries), never throw out of the socket's handler and crash the process; a
 * connection that ends while the stream opens must fail the opening once, not
 * leave a dead stream taken for a live one.
 */
import { after, it } from 'node:test';
import assert from 'node:assert/strict';
import { openWalStream } from '../../src/stores/postgres/pg-wal-stream.ts';
import { PostgresWalWake } from '../../src/stores/postgres/postgres-wal-wake.ts';
import { pgHashBytes } from '../../src/stores/postgres/postgres-bucket.ts';
import type { Logger } from '../../src/core/logger.ts';
import { commandComplete, copyBothResponse, copyData, fakeReplicationServer, fatal, readyForQuery, xlogData, type FakeReplicationServer } from '../helpers/fake-replication-server.ts';

const servers: FakeReplicationServer[] = [];
after(async () => {
  for (const s of servers) await s.close();
});

async function serve(onQuery: Parameters<typeof fakeReplicationServer>[0]): Promise<number> {
  const server = await fakeReplicationServer(onQuery);
  servers.push(server);
  return server.port;
}

const client = (port: number) => ({ host: '127.0.0.1', port, user: 'relay', database: 'db' });

it('a truncated pgoutput message ends the stream with an error instead of crashing the process', async () => {
  const port = await serve((q, socket) => {
    if (q.startsWith('CREATE_REPLICATION_SLOT')) socket.write(Buffer.concat([commandComplete('CREATE_REPLICATION_SLOT'), readyForQuery()]));
    else if (q.startsWith('START_REPLICATION')) socket.write(Buffer.concat([copyBothResponse(), copyData(xlogData(Buffer.from([0x43, 0, 1, 2, 3])))])); // a Commit cut short
  });
  const uncaught: Error[] = [];
  const onUncaught = (err: Error): void => void uncaught.push(err);
  process.prependListener('uncaughtException', onUncaught);
  try {
    const ended = new Promise<Error>((resolve) => {
      void openWalStream({ client: client(port), slot: 's', publication: 'p', onCommit: () => {}, onEnd: resolve });
    });
    const err = await Promise.race([ended, new Promise<null>((r) => setTimeout(() => r(null), 2000))]);
    assert.deepEqual(uncaught.map((e) => e.message), [], 'nothing thrown out of the socket handler');
    assert.ok(err, 'the stream ended');
    assert.match(err.message, /pgoutput|replication|range|offset/i);
  } finally {
    process.removeListener('uncaughtException', onUncaught);
  }
});

it('a connection that ends in the same read as the slot creation fails the opening, and does not call onEnd', async () => {
  const port = await serve((q, socket) => {
    if (!q.startsWith('CREATE_REPLICATION_SLOT')) return;
    socket.write(Buffer.concat([commandComplete('CREATE_REPLICATION_SLOT'), readyForQuery(), fatal('terminating connection due to administrator command')]));
    socket.destroy();
  });
  const ends: Error[] = [];
  await assert.rejects(openWalStream({ client: client(port), slot: 's', publication: 'p', onCommit: () => {}, onEnd: (e) => ends.push(e) }));
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(ends.length, 0);
});

/** A PostgresConnection answering the keeper's checks (wal_level, publication, encoding, hashtext probe); replication goes to `port`. */
function checksPassing(port: number) {
  return {
    replicationConfig: () => client(port),
    async query(sql: string, params?: unknown[]) {
      if (sql.includes('wal_level')) return { rows: [{ wal_level: 'logical', role: 'relay', replication: true, superuser: false, slots_max: 10, slots_used: 0, senders_max: 10, senders_used: 0 }] };
      if (sql.includes('pg_publication')) return { rows: [{ inserts: true, covers: true }] };
      if (sql.includes('server_encoding')) return { rows: [{ enc: 'UTF8', client: 'UTF8' }] };
      if (sql.includes('hashtext')) return { rows: [{ h: pgHashBytes(Buffer.from(params![0] as string)) | 0 }] };
      throw new Error(`unexpected statement: ${sql}`);
    },
  };
}

it('the keeper: a stream lost while it opens is one failure, retried, never taken for streaming', async () => {
  let opens = 0;
  const port = await serve((q, socket) => {
    if (!q.startsWith('CREATE_REPLICATION_SLOT')) return;
    opens++;
    socket.write(Buffer.concat([commandComplete('CREATE_REPLICATION_SLOT'), readyForQuery(), fatal('terminating connection due to administrator command')]));
    socket.destroy();
  });
  let fallbacks = 0;
  const noop = (): void => {};
  const logger: Logger = { debug: noop, info: noop, warn: noop, error: noop };
  const wake = new PostgresWalWake({
    connection: checksPassing(port) as never,
    names: { schema: 'txbox', table: 'outbox' } as never,
    logger,
    relayId: () => 'r1',
    onWake: noop,
    onFallback: () => fallbacks++,
    retryMinMs: 50,
    retryMaxMs: 50,
  });
  wake.start();
  try {
    await new Promise((r) => setTimeout(r, 600));
    assert.notEqual(wake.state, 'streaming', 'a dead stream is not streaming');
    assert.ok(opens >= 4, `retried every 50 ms: ${opens} openings in 600 ms`);
    assert.equal(fallbacks, opens, 'one fallback per failed opening');
  } finally {
    await wake.close();
  }
});
