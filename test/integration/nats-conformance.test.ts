/**
 * The NATS JetStream transport through the transport conformance suite,
 * against a nats-server of its own (JetStream on, file storage in a temp
 * directory, a free port), run from a copy of the binary so that
 * `start-stop-daemon --exec` never mistakes it for the machine's server. Each
 * destination gets a fresh file-backed stream with a 2-minute duplicate
 * window; `restart` kills that server (SIGKILL) and starts it again on the same
 * port and storage. The shared server on 127.0.0.1:4222 is never touched: other
 * test files use it at the same time (killing it failed their runs).
 * Wrong credentials are tried against a second, password-protected
 * nats-server on a free port.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, nanos } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, StorageType } from '@nats-io/jetstream';
import { NatsTransport, NATS_HEADERS } from 'txbox/nats';
import type { Delivered } from 'txbox/testing';
import { runTransportConformance } from 'txbox/testing/conformance';
import { DATABASE_URL } from '../helpers/databases.ts';
import { canConnect, freePort } from '../helpers/ports.ts';

const NATS_BIN = '/usr/sbin/nats-server';
const run = randomBytes(4).toString('hex');
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Dest {
  readonly subject: string;
  readonly stream: string | null;
}
const dests = new Map<string, Dest>();
let counter = 0;

const server = await startJetStreamServer();
const SERVERS = `127.0.0.1:${server.port}`;
const admin = await connect({ servers: SERVERS, name: 'txbox-conformance-admin', maxReconnectAttempts: -1, reconnectTimeWait: 250 });
const jsm = await jetstreamManager(admin, { timeout: 5000 });
const js = jetstream(admin, { timeout: 5000 });
const authServer = await startAuthServer();

/** Reads the whole stream in order with an ordered consumer. */
async function readStream(stream: string): Promise<Delivered[]> {
  const info = await jsm.streams.info(stream);
  const total = info.state.messages;
  const out: Delivered[] = [];
  if (total === 0) return out;
  const consumer = await js.consumers.get(stream);
  while (out.length < total) {
    const batch = await consumer.fetch({ max_messages: Math.min(1000, total - out.length), expires: 5000 });
    let got = 0;
    for await (const m of batch) {
      got++;
      out.push({ id: m.headers?.get(NATS_HEADERS.msgId) ?? '', key: m.headers?.get(NATS_HEADERS.key) ?? '' });
    }
    if (got === 0) break;
  }
  return out;
}

runTransportConformance({
  name: 'nats',
  databaseUrl: DATABASE_URL,
  events: 10_000,
  broker: {
    dedup: 'broker',
    // Above the server's default max_payload of 1 MiB.
    oversizeBytes: 1_100_000,
    async createDestination() {
      const n = ++counter;
      const destination = `conf${run}_${n}`;
      const subject = `txboxconf.${run}.d${n}`;
      const stream = `TXBOX_CONF_${run}_${n}`;
      // keyInSubject: the stream captures <subject>.<key token>.
      await jsm.streams.add({ name: stream, subjects: [subject, `${subject}.>`], storage: StorageType.File, duplicate_window: nanos(120_000) });
      dests.set(destination, { subject, stream });
      return destination;
    },
    createTransport(destinations) {
      return new NatsTransport({ servers: SERVERS, reconnectTimeWaitMs: 250, publishTimeoutMs: 3000, keyInSubject: true, ...routing(destinations) });
    },
    async readBack(destination, expected, timeoutMs) {
      const stream = dests.get(destination)?.stream;
      if (!stream) return [];
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        try {
          const info = await jsm.streams.info(stream);
          if (info.state.messages >= expected || Date.now() >= deadline) return await readStream(stream);
        } catch (err) {
          // The server is restarting: keep polling until the deadline.
          if (Date.now() >= deadline) throw err;
        }
        await sleep(100);
      }
    },
    async restart() {
      await server.kill();
      await server.start();
      await waitFor('JetStream to answer after the restart', () => jsm.getAccountInfo().then(() => true, () => false), 30_000);
    },
    async unroutableDestination() {
      const destination = `nowhere${run}_${++counter}`;
      dests.set(destination, { subject: `txboxconf.${run}.nowhere${counter}`, stream: null });
      return destination;
    },
    misconfigured(destinations) {
      const r = routing(destinations);
      return [
        { transport: new NatsTransport({ servers: '127.0.0.1:1', connectTimeoutMs: 2000, ...r }), setting: /servers/ },
        { transport: new NatsTransport({ servers: `127.0.0.1:${authServer.port}`, user: 'txbox', pass: 'not-the-password', ...r }), setting: /user\/pass/ },
        { transport: new NatsTransport({ servers: `nats://txbox:not-the-password@127.0.0.1:${authServer.port}`, ...r }), setting: /servers/ },
        { transport: new NatsTransport({ servers: `127.0.0.1:${authServer.port}`, ...r }), setting: /user\/pass, token or authenticator/ },
      ];
    },
    async close() {
      for (const { stream } of dests.values()) if (stream) await jsm.streams.delete(stream).catch(() => {});
      await admin.close();
      await authServer.stop();
      await server.stop();
    },
  },
});

function routing(destinations: readonly string[]): { subjects: Record<string, string>; streams: Record<string, string> } {
  const subjects: Record<string, string> = {};
  const streams: Record<string, string> = {};
  for (const d of destinations) {
    const dest = dests.get(d);
    if (!dest) continue;
    subjects[d] = dest.subject;
    if (dest.stream) streams[d] = dest.stream;
  }
  return { subjects, streams };
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await sleep(100);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

/** A nats-server that requires user `txbox` with a password, from a copied binary, stopped by `stop()`. */
async function startAuthServer(): Promise<{ port: number; stop: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'txbox-nats-auth-'));
  const bin = join(dir, 'nats-server');
  await copyFile(NATS_BIN, bin);
  const port = await freePort();
  const child: ChildProcess = spawn(bin, ['-a', '127.0.0.1', '-p', String(port), '--user', 'txbox', '--pass', randomBytes(12).toString('hex')], { stdio: 'ignore' });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await waitFor('the password-protected nats-server', () => canConnect(port), 10_000);
  return {
    port,
    async stop() {
      child.kill('SIGTERM');
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** This file's own JetStream nats-server: a copied binary on a free port with its storage in a temp directory; `kill()` is SIGKILL, `start()` runs it again alike. */
async function startJetStreamServer(): Promise<{ port: number; kill: () => Promise<void>; start: () => Promise<void>; stop: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'txbox-nats-conformance-'));
  const bin = join(dir, 'nats-server');
  await copyFile(NATS_BIN, bin);
  const port = await freePort();
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  const start = async (): Promise<void> => {
    const c = spawn(bin, ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', join(dir, 'data')], { stdio: 'ignore' });
    child = c;
    exited = new Promise<void>((resolve) => c.once('exit', () => resolve()));
    await waitFor(`the conformance nats-server on ${port}`, () => canConnect(port), 30_000);
  };
  const kill = async (): Promise<void> => {
    child?.kill('SIGKILL');
    await exited;
  };
  await start();
  return {
    port,
    kill,
    start,
    async stop() {
      await kill();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
