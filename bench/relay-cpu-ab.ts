/**
 * A/B of the relay's own CPU per event between checkouts of txbox: the same
 * backlog drained by the relay worker (bench/relay-worker.ts) of each checkout
 * in turn, the order reversed every round, to a no-op sink, an HTTP receiver
 * in a child process (answering 204) and/or NATS JetStream (ack awaited, a
 * fresh file stream per drain). Each drain is a fresh relay process, as in
 * bench/peer-graphile-worker.ts. Prints, per arm, events/s and the CPU the
 * relay process used per event (and the receiver's): on a shared machine the
 * rates swing with the load, the CPU per event much less.
 *
 *   git worktree add --detach ../txbox-before <commit>
 *   node --conditions=txbox-source --import tsx bench/relay-cpu-ab.ts ../txbox-before .
 *
 * Settings: BENCH_AB_ROUNDS (4), BENCH_AB_SINKS (noop,http,nats), BENCH_AB_EVENTS (20000),
 * BENCH_KEYS (1000), BENCH_AB_CONFIGS (2:500: lanes:batch[:HTTP maxSockets], comma-separated,
 * each one arm per checkout), BENCH_AB_NODE_FLAGS (`|`-separated node flag sets for the relay process,
 * each one more arm; an empty set is the default: `|--maglev`).
 */
import { fork } from 'node:child_process';
import { resolve } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { Backlog, envInt, fmtInt, log, median, summary, withBench } from './lib.ts';
import { NATS_SERVERS } from './broker-transports.ts';
import type { ReceiverMessage } from './receiver-process.ts';
import type { RelayWorkerConfig, startRelayWorker as StartRelayWorker } from './relay-process.ts';

const checkouts = process.argv.slice(2).map((p) => resolve(p));
if (checkouts.length === 0) throw new Error('give the checkouts to compare, e.g. bench/relay-cpu-ab.ts ../txbox-before .');
const ROUNDS = envInt('BENCH_AB_ROUNDS', 4);
const EVENTS = envInt('BENCH_AB_EVENTS', 20_000);
const KEYS = envInt('BENCH_KEYS', 1000);
const SINKS = (process.env.BENCH_AB_SINKS ?? 'noop,http,nats').split(',').map((s) => s.trim());
const CONFIGS = (process.env.BENCH_AB_CONFIGS ?? '2:500').split(',').map((c) => {
  const [lanes, batch, sockets] = c.split(':').map(Number);
  if (!Number.isInteger(lanes) || !Number.isInteger(batch)) throw new Error(`BENCH_AB_CONFIGS: "${c}" is not lanes:batch[:maxSockets]`);
  return { lanes: lanes!, batch: batch!, sockets: sockets === undefined || Number.isNaN(sockets) ? undefined : sockets };
});
const workers = await Promise.all(
  checkouts.map(async (c) => ((await import(`${c}/bench/relay-process.ts`)) as { startRelayWorker: typeof StartRelayWorker }).startRelayWorker),
);
const FLAG_SETS = (process.env.BENCH_AB_NODE_FLAGS ?? '').split('|').map((f) => f.split(' ').filter(Boolean));
const arms = checkouts.flatMap((checkout, i) => CONFIGS.flatMap((config) => FLAG_SETS.map((nodeFlags) => ({ checkout, start: workers[i]!, nodeFlags, ...config }))));
const TSX = ['--conditions=txbox-source', '--import', 'tsx'];

await withBench('relaycpuab', async (bench) => {
  const receiver = fork(new URL('./receiver-process.ts', import.meta.url), [], { execArgv: TSX, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const nc = SINKS.includes('nats') ? await connect({ servers: NATS_SERVERS }) : null;
  const jsm = nc ? await jetstreamManager(nc) : null;
  const streams: string[] = [];
  try {
    const url = await new Promise<string>((ok, fail) => {
      receiver.once('message', (m: ReceiverMessage) => (m.type === 'listening' ? ok(m.url) : fail(new Error(`receiver said ${m.type}`))));
      receiver.once('exit', (code) => fail(new Error(`receiver exited with ${String(code)}`)));
    });
    const receiverCpuUs = (): Promise<number> =>
      new Promise((ok) => {
        const on = (m: ReceiverMessage): void => {
          if (m.type !== 'cpu') return;
          receiver.off('message', on);
          ok(m.us);
        };
        receiver.on('message', on);
        receiver.send({ type: 'cpu' });
      });
    const sinkOf = async (sink: string): Promise<RelayWorkerConfig['transport']> => {
      if (sink === 'noop') return { kind: 'noop' };
      if (sink === 'http') return { kind: 'http', url };
      if (sink !== 'nats') throw new Error(`BENCH_AB_SINKS: unknown sink "${sink}" (noop, http, nats)`);
      const stream = `BENCH_AB_${process.pid}_${streams.length}`;
      const subject = `benchab.${process.pid}.${streams.length}.orders`;
      await jsm!.streams.add({ name: stream, subjects: [subject], storage: StorageType.File });
      streams.push(stream);
      return { kind: 'broker', spec: { kind: 'nats', subject, stream } };
    };
    log(`relay CPU A/B: ${fmtInt(EVENTS)} events over ${KEYS} keys, ${ROUNDS} rounds, sinks ${SINKS.join(', ')}, arms: ${arms.length}`);
    const backlog = await Backlog.create(bench, EVENTS, KEYS);
    const results = new Map<string, { rate: number[]; own: number[]; receiver: number[] }>();
    for (let round = 0; round < ROUNDS; round++) {
      const order = arms.map((_, i) => i);
      if (round % 2 === 1) order.reverse();
      for (const sink of SINKS) {
        for (const i of order) {
          const arm = arms[i]!;
          const transport = await sinkOf(sink);
          if (arm.sockets === undefined) delete process.env.BENCH_HTTP_MAX_SOCKETS;
          else process.env.BENCH_HTTP_MAX_SOCKETS = String(arm.sockets); // read by the relay worker
          await backlog.restore(EVENTS);
          const before = sink === 'http' ? await receiverCpuUs() : 0;
          const r = await arm.start({ schema: bench.schema, batchSize: arm.batch, lanes: arm.lanes, deleteOnPublish: false, expect: EVENTS, transport, ...(arm.nodeFlags.length > 0 ? { nodeFlags: arm.nodeFlags } : {}) }).result;
          const receiverUs = sink === 'http' ? ((await receiverCpuUs()) - before) / r.published : 0;
          const own = ((r.cpuMs ?? Number.NaN) * 1000) / r.published;
          const rate = (r.published * 1000) / r.ms;
          const name = `${sink} ${arm.checkout} lanes ${arm.lanes} batch ${arm.batch}${arm.sockets === undefined ? '' : ` maxSockets ${arm.sockets}`}${arm.nodeFlags.length > 0 ? ` ${arm.nodeFlags.join(' ')}` : ''}`;
          const entry = results.get(name) ?? { rate: [], own: [], receiver: [] };
          results.set(name, entry);
          entry.rate.push(rate);
          entry.own.push(own);
          entry.receiver.push(receiverUs);
          log(`round ${round + 1} ${name}: ${fmtInt(rate)} events/s, relay CPU ${own.toFixed(1)} µs/event, receiver ${receiverUs.toFixed(1)} µs/event${r.errors.length ? `; errors ${r.errors.join(' | ')}` : ''}`);
        }
      }
    }
    for (const [name, v] of results) {
      summary(
        'relay-cpu-ab',
        `${name}: relay CPU ${median(v.own).toFixed(1)} µs/event (per round ${v.own.map((x) => x.toFixed(0)).join(' / ')}), ` +
          `${fmtInt(median(v.rate))} events/s (${v.rate.map((x) => fmtInt(x)).join(' / ')})${name.startsWith('http') ? `, receiver ${median(v.receiver).toFixed(1)} µs/event` : ''}`,
      );
    }
  } finally {
    delete process.env.BENCH_HTTP_MAX_SOCKETS;
    receiver.kill();
    for (const s of streams) await jsm!.streams.delete(s).catch(() => {});
    await nc?.close();
  }
});
