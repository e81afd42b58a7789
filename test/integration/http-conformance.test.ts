/** The HTTP webhook transport through the transport conformance suite, against a real HTTP server. */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HttpTransport, createWebhookReceiver, generateWebhookSecret } from 'txbox/http';
import type { Delivered } from 'txbox/testing';
import { runTransportConformance } from 'txbox/testing/conformance';
import { DATABASE_URL } from '../helpers/databases.ts';

const secret = generateWebhookSecret();
const arrivals = new Map<string, Delivered[]>();
const receiver = createWebhookReceiver({
  secret,
  maxBodyBytes: 256 * 1024,
  onEvent: (event) => {
    const list = arrivals.get(event.destination) ?? [];
    list.push({ id: event.id, key: event.key });
    arrivals.set(event.destination, list);
  },
});
let server: Server;
let port = 0;
let counter = 0;

async function listen(): Promise<void> {
  server = createServer((req, res) => {
    if (req.url?.startsWith('/nowhere')) {
      res.writeHead(410).end('no such hook'); // 404 would be destination-down (circuit breaker), not a per-event failure
      return;
    }
    receiver(req, res);
  });
  server.keepAliveTimeout = 2000;
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
}

async function stop(): Promise<void> {
  await new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

await listen();
const url = (d: string): string => `http://127.0.0.1:${port}/${d}`;

runTransportConformance({
  name: 'http',
  databaseUrl: DATABASE_URL,
  events: 10_000,
  broker: {
    dedup: 'none',
    oversizeBytes: 300 * 1024,
    async createDestination() {
      return `hook${++counter}`;
    },
    createTransport(destinations) {
      return new HttpTransport({ endpoints: Object.fromEntries(destinations.map((d) => [d, url(d)])), secret, timeoutMs: 5000 });
    },
    async readBack(destination, expected, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline && new Set((arrivals.get(destination) ?? []).map((d) => d.id)).size < expected) {
        await new Promise((r) => setTimeout(r, 25));
      }
      return [...(arrivals.get(destination) ?? [])];
    },
    async restart() {
      await stop();
      await new Promise((r) => setTimeout(r, 1000)); // the relay meets refused connections meanwhile
      await listen();
    },
    async unroutableDestination() {
      return `nowhere${++counter}`;
    },
    misconfigured(destinations) {
      return [
        { transport: new HttpTransport({ endpoints: Object.fromEntries(destinations.map((d) => [d, `http://127.0.0.1:1/${d}`])), timeoutMs: 2000, allowUnsigned: true }), setting: /127\.0\.0\.1:1/ },
        {
          transport: new HttpTransport({ endpoints: Object.fromEntries(destinations.map((d) => [d, `http://u:hunter2@127.0.0.1:${port}/${d}`])), secret: generateWebhookSecret() }),
          setting: /401/,
        },
      ];
    },
    async close() {
      await stop();
    },
  },
});
