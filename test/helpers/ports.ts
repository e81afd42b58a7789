/** TCP port helpers for tests that start servers of their own (nats-server processes). */
import { createServer, connect as tcpConnect, type AddressInfo } from 'node:net';

/** A port that was free a moment ago. Prefer letting a server listen on port 0 where it can say which port it took. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** True when something accepts TCP connections on 127.0.0.1:`port`. */
export function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect({ host: '127.0.0.1', port }, () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}
