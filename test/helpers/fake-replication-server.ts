/**
 * A minimal server speaking PostgreSQL's wire protocol, enough for a
 * replication connection (startup, simple queries, CopyBoth): for the stream
 * faults a real server cannot be made to produce on cue (malformed pgoutput
 * data, a FATAL in the same read as a command's completion). Each query goes
 * to `onQuery`, which writes the answer with the message builders below.
 */
import net from 'node:net';

export function message(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, 'latin1');
  head.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([head, body]);
}
export const readyForQuery = (): Buffer => message('Z', Buffer.from('I'));
export const commandComplete = (tag: string): Buffer => message('C', Buffer.from(`${tag}\0`));
export const fatal = (text: string): Buffer => message('E', Buffer.from(`SFATAL\0VFATAL\0C57P01\0M${text}\0\0`));
export const copyBothResponse = (): Buffer => message('W', Buffer.from([0, 0, 0]));
export const copyData = (data: Buffer): Buffer => message('d', data);
/** An XLogData message ('w') carrying one pgoutput message. */
export function xlogData(pgoutput: Buffer, lsn = 0n): Buffer {
  const head = Buffer.alloc(25);
  head[0] = 0x77;
  head.writeBigUInt64BE(lsn, 1);
  head.writeBigUInt64BE(lsn, 9);
  return Buffer.concat([head, pgoutput]);
}

export interface FakeReplicationServer {
  readonly port: number;
  close(): Promise<void>;
}

export function fakeReplicationServer(onQuery: (query: string, socket: net.Socket) => void): Promise<FakeReplicationServer> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let buffer = Buffer.alloc(0);
    let started = false;
    socket.on('data', (data) => {
      buffer = Buffer.concat([buffer, data]);
      for (;;) {
        if (!started) {
          // The startup message: length, then anything; trust and ready at once.
          if (buffer.length < 4 || buffer.length < buffer.readInt32BE(0)) return;
          buffer = buffer.subarray(buffer.readInt32BE(0));
          started = true;
          socket.write(Buffer.concat([message('R', Buffer.from([0, 0, 0, 0])), readyForQuery()]));
          continue;
        }
        if (buffer.length < 5 || buffer.length < buffer.readInt32BE(1) + 1) return;
        const type = String.fromCharCode(buffer[0]!);
        const body = buffer.subarray(5, buffer.readInt32BE(1) + 1);
        buffer = buffer.subarray(buffer.readInt32BE(1) + 1);
        if (type === 'Q') onQuery(body.toString('utf8', 0, body.length - 1), socket);
        else if (type === 'X') socket.end();
      }
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        port: (server.address() as net.AddressInfo).port,
        close: () => {
          for (const s of sockets) s.destroy();
          return new Promise<void>((r) => server.close(() => r()));
        },
      }),
    ),
  );
}
