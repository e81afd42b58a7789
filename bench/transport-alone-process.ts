/**
 * The transport alone in a fresh process (bench/peer-graphile-worker.ts's cold
 * ceiling): a child that builds the same transport the relay's process builds,
 * publishes `n` events through it in calls of 500 over `keys` keys, no database,
 * and reports the rate and its own CPU. A relay's drain starts a process too,
 * so no one-process outbox that publishes through this transport, started
 * fresh for the drain, beats this rate. Two calls at a time, as the relay's
 * two lanes publish (the warm ceiling in the benchmark's process makes one).
 * With `repeat` above 1 it drains `n` more events `repeat - 1` times in the
 * same process and reports each drain's CPU per event: how much of the first
 * drain's cost is the process warming up (V8 tiering the transport's code up).
 */
import { sinkTransport } from './broker-transports.ts';
import { orderPayload, timePublishCalls } from './lib.ts';
import type { RelayWorkerConfig } from './relay-process.ts';

export interface TransportAloneConfig {
  readonly sink: RelayWorkerConfig['transport'];
  readonly n: number;
  readonly keys: number;
  /** Drains of `n` events back to back in this process (default 1); the first is the cold ceiling. */
  readonly repeat?: number;
}

export type TransportAloneMessage =
  /** rate and cpuMs: the first drain; cpuMsPerDrain: every drain's CPU, the first included. */
  | { readonly type: 'result'; readonly rate: number; readonly cpuMs: number; readonly cpuMsPerDrain: readonly number[] }
  | { readonly type: 'error'; readonly message: string };

process.once('message', (config: TransportAloneConfig) => {
  void (async () => {
    try {
      const transport = await sinkTransport(config.sink);
      const rates: number[] = [];
      const cpuMsPerDrain: number[] = [];
      for (let i = 0; i < Math.max(1, config.repeat ?? 1); i++) {
        const cpu0 = process.cpuUsage();
        // timePublishCalls closes the transport at the end; start() (inside it) reopens it for the next drain.
        const { rate } = await timePublishCalls(transport, { events: config.n, batch: 500, keys: config.keys, payload: orderPayload(1, 1), concurrency: 2, timeStart: true });
        const cpu = process.cpuUsage(cpu0);
        rates.push(rate);
        cpuMsPerDrain.push((cpu.user + cpu.system) / 1000);
      }
      process.send?.({ type: 'result', rate: rates[0]!, cpuMs: cpuMsPerDrain[0]!, cpuMsPerDrain } satisfies TransportAloneMessage);
    } catch (err) {
      process.send?.({ type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) } satisfies TransportAloneMessage);
    }
    process.disconnect?.();
  })();
});
