/** A TCP proxy to a service, that a test closes (connections cut, new ones refused) and opens again on the same port. */
import { createServer, connect, type Server, type Socket, type AddressInfo } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  /** Cuts every connection and stops accepting new ones. */
  close(): Promise<void>;
  /** Accepts connections again on the same port. */
  open(): Promise<void>;
  /** From now on, new connections are accepted but not forwarded (a server slow to answer) until `release()`. */
  hold(): void;
  /** Forwards the held connections, and new ones again. */
  release(): void;
  /** Connections accepted and held. */
  readonly held: number;
  /** Cuts every connection, keeps accepting new ones. */
  cut(): void;
  /**
   * Every connection open now stops forwarding, both ways and for good, without
   * being closed: a NAT or firewall that lost their state, a host gone with
   * the network still up. Bytes sent on them are swallowed. New connections
   * are forwarded (or held, after `hold()`).
   */
  silence(): void;
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let server: Server;
  let port = 0;
  let holding = false;
  const held: Socket[] = [];
  const listen = async (): Promise<void> => {
    server = createServer((client) => {
      if (holding) {
        held.push(client);
        sockets.add(client);
        return;
      }
      forward(client);
    });
    await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  };
  /** Forwarding stops for the connections of these sockets. */
  const silent = new Set<Socket>();
  const forward = (client: Socket): void => {
    const upstream = connect(targetPort, targetHost);
    sockets.add(client).add(upstream);
    const drop = (): void => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
      silent.delete(client);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    // Not pipe(): silence() must stop a connection without pausing its sender (bytes are swallowed, as by a black hole).
    client.on('data', (chunk: Buffer) => {
      if (!silent.has(client)) upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (!silent.has(client)) client.write(chunk);
    });
  };
  await listen();
  return {
    get port() {
      return port;
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      sockets.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
    open: listen,
    hold: () => {
      holding = true;
    },
    release: () => {
      holding = false;
      for (const c of held.splice(0)) if (!c.destroyed) forward(c);
    },
    get held() {
      return held.length;
    },
    cut: () => {
      for (const s of sockets) s.destroy();
      sockets.clear();
    },
    silence: () => {
      for (const s of sockets) silent.add(s);
      for (const c of held) silent.add(c);
    },
  };
}
