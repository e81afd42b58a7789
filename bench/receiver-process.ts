/**
 * The HTTP latency benchmark's receiver in a process of its own, as the
 * downstream service would be: answers 204 to every webhook and records when
 * each `webhook-id` arrived, on the wall clock with sub-millisecond precision
 * (`performance.timeOrigin + performance.now()`, comparable across processes
 * on one machine). Started by bench/commit-to-ack.ts with `fork`.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export type ReceiverMessage =
  | { readonly type: 'listening'; readonly url: string }
  | { readonly type: 'count'; readonly count: number }
  | { readonly type: 'acks'; readonly acks: readonly (readonly [string, number])[] }
  /** CPU time (user + system) this process has used since it started, in µs: what answering costs. */
  | { readonly type: 'cpu'; readonly us: number };

const acked = new Map<string, number>();
const server = createServer((req, res) => {
  const id = req.headers['webhook-id'];
  if (typeof id === 'string' && !acked.has(id)) acked.set(id, performance.timeOrigin + performance.now());
  req.resume();
  req.on('end', () => {
    res.statusCode = 204;
    res.end();
  });
});
server.keepAliveTimeout = 30_000;
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  process.send?.({ type: 'listening', url: `http://127.0.0.1:${port}/hooks/orders` } satisfies ReceiverMessage);
});
process.on('message', (m: { type?: string }) => {
  if (m?.type === 'count') process.send?.({ type: 'count', count: acked.size } satisfies ReceiverMessage);
  else if (m?.type === 'cpu') {
    const cpu = process.cpuUsage();
    process.send?.({ type: 'cpu', us: cpu.user + cpu.system } satisfies ReceiverMessage);
  } else if (m?.type === 'acks') process.send?.({ type: 'acks', acks: [...acked] } satisfies ReceiverMessage);
  else if (m?.type === 'close') {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  }
});
