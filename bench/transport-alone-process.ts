/**
 * The transport alone in a fresh process (bench/peer-graphile-worker.ts's cold
 * ceiling): a child that builds the same transport the relay's process builds,
 * publishes `n` events through it in calls of 500 over `keys` keys, no database,
 * and reports the rate and its own CPU. A relay's drain starts a process too,
 * so no one-process outbox that publishes through this transport, started
 * fresh for the drain, beats this rate. Two calls at a time, as the relay's
 * two lanes publish (the warm ceiling in the benchmark's process makes one).
 */
import { HttpTransport } from 'txbox/http';
import { brokerTransport } from './broker-transports.ts';
import { uuidv7, type OutboxEvent, type Transport } from 'txbox';
import { orderPayload } from './lib.ts';
import type { RelayWorkerConfig } from './relay-process.ts';

export interface TransportAloneConfig {
  readonly sink: RelayWorkerConfig['transport'];
  readonly n: number;
  readonly keys: number;
}

export type TransportAloneMessage = { readonly type: 'result'; readonly rate: number; readonly cpuMs: number } | { readonly type: 'error'; readonly message: string };

process.once('message', (config: TransportAloneConfig) => {
  void (async () => {
    try {
      const { sink } = config;
      const transport =
        sink.kind === 'http'
          ? new HttpTransport({ endpoints: { orders: sink.url }, timeoutMs: 10_000, allowUnsigned: true })
          : sink.kind === 'broker'
            ? await brokerTransport(sink.spec)
            : null;
      if (transport === null) throw new Error(`no transport for sink ${sink.kind}`);
      const cpu0 = process.cpuUsage();
      const rate = await publishAll(transport, config.n, config.keys);
      const cpu = process.cpuUsage(cpu0);
      process.send?.({ type: 'result', rate, cpuMs: (cpu.user + cpu.system) / 1000 } satisfies TransportAloneMessage);
    } catch (err) {
      process.send?.({ type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) } satisfies TransportAloneMessage);
    }
    process.disconnect?.();
  })();
});

/** Events/s of `n` events published in calls of 500, two calls at a time, from start() to the last outcome. */
async function publishAll(transport: Transport, n: number, keys: number): Promise<number> {
  const payload = orderPayload(1, 1);
  const started = performance.now();
  await transport.start?.(AbortSignal.timeout(60_000));
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < n) {
      const from = next;
      next = Math.min(n, from + 500);
      const events: OutboxEvent[] = [];
      for (let i = from; i < next; i++) {
        const k = String(i % keys);
        events.push({ id: uuidv7(), type: 'OrderPlaced', aggregateType: 'Order', aggregateId: k, key: `Order:${k}`, destination: 'orders', payload, headers: {}, occurredAt: new Date(), version: null });
      }
      const outcomes = await transport.publish(events, AbortSignal.timeout(60_000));
      const failed = outcomes.find((o) => !o.ok);
      if (failed && !failed.ok) throw failed.error;
    }
  };
  await Promise.all([lane(), lane()]);
  const rate = (n / (performance.now() - started)) * 1000;
  await transport.close?.();
  return rate;
}
