/**
 * A redis-server of a test's own on a free port (no persistence, its files in
 * a temp directory), for tests that stop it or change its settings: the
 * machine's Redis on 127.0.0.1:6379 is shared with the test files running at
 * the same time.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { freePort } from './ports.ts';

const run = promisify(execFile);

export interface PrivateRedis {
  readonly port: number;
  readonly url: string;
  /** Starts the server (again, after stop()) and waits until it answers PING. */
  start(): Promise<void>;
  /** Shuts it down without saving and waits until it no longer answers. */
  stop(): Promise<void>;
  /** Stops it and removes its directory. */
  close(): Promise<void>;
}

export async function privateRedis(name: string): Promise<PrivateRedis> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), `txbox-${name}-`));
  const args = ['--daemonize', 'yes', '--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no', '--dir', dir, '--pidfile', join(dir, 'redis.pid'), '--logfile', join(dir, 'redis.log')];
  const answersPing = async (): Promise<boolean> => {
    try {
      return (await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'ping'], { timeout: 2000 })).stdout.trim() === 'PONG';
    } catch {
      return false;
    }
  };
  const until = async (what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await sleep(50);
    }
  };
  const server: PrivateRedis = {
    port,
    url: `redis://127.0.0.1:${port}`,
    async start() {
      await run('redis-server', args);
      await until(`the ${name} Redis to answer PING`, answersPing, 15_000);
    },
    async stop() {
      await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'shutdown', 'nosave']).catch(() => {}); // the server hangs up as it exits
      await until(`the ${name} Redis to stop`, async () => !(await answersPing()), 10_000);
    },
    async close() {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
  await server.start();
  return server;
}
