/**
 * The transport alone in a fresh process (bench/peer-graphile-worker.ts's cold
 * ceiling): a child that builds the same transport the relay's process builds,
 * publishes `n` events through it in calls of 500 over `keys` keys, no database,
 * and reports the rate and its own CPU. A relay's drain starts a process too,
 * so no one-process outbox that publishes through this transport, started
 * fresh for the drain, beats this rate. Two calls at a time, as the relay's
 * two lanes publish (the warm ceiling in the benchmark's process makes one).
 */
import { sinkTransport } from './broker-transports.ts';
import { orderPayload, timePublishCalls } from './lib.ts';
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
      const transport = await sinkTransport(config.sink);
      const cpu0 = process.cpuUsage();
      const { rate } = await timePublishCalls(transport, { events: config.n, batch: 500, keys: config.keys, payload: orderPayload(1, 1), concurrency: 2, timeStart: true });
      const cpu = process.cpuUsage(cpu0);
      process.send?.({ type: 'result', rate, cpuMs: (cpu.user + cpu.system) / 1000 } satisfies TransportAloneMessage);
    } catch (err) {
      process.send?.({ type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) } satisfies TransportAloneMessage);
    }
    process.disconnect?.();
  })();
});
