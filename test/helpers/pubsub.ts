/**
 * Google's Pub/Sub emulator for tests: `scripts/pubsub/up.sh` starts it on
 * 127.0.0.1:8085 (PUBSUB_EMULATOR_HOST overrides). Tests skip with a clear
 * message when the emulator is not installed, and name everything they create
 * after a random run id (the emulator keeps state until it stops).
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer, connect, type Server, type Socket, type AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { PubSub } from '@google-cloud/pubsub';

export const EMULATOR_BIN = '/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator';
export const EMULATOR_HOST = process.env.PUBSUB_EMULATOR_HOST ?? '127.0.0.1:8085';
export const PROJECT = 'txbox-test';

/** A reason to skip, or false when the emulator answers (started by scripts/pubsub/up.sh if needed). */
export async function emulatorSkip(): Promise<string | false> {
  if (process.env.PUBSUB_EMULATOR_HOST === undefined && !existsSync(EMULATOR_BIN)) return `the Pub/Sub emulator is not installed (${EMULATOR_BIN}; package google-cloud-cli-pubsub-emulator)`;
  if (process.env.PUBSUB_EMULATOR_HOST === undefined) {
    await promisify(execFile)('bash', [new URL('../../scripts/pubsub/up.sh', import.meta.url).pathname], { timeout: 120_000 });
  }
  return false;
}

/** An admin client for creating topics and subscriptions in the emulator. */
export function adminClient(host = EMULATOR_HOST): PubSub {
  const at = host.lastIndexOf(':');
  return new PubSub({ projectId: PROJECT, apiEndpoint: host, servicePath: host.slice(0, at), port: Number(host.slice(at + 1)), emulatorMode: true, universeDomain: 'googleapis.com' } as ConstructorParameters<typeof PubSub>[0]);
}

/**
 * A TCP proxy in front of the emulator, to cut the connection: `cut(ms)`
 * destroys every open connection and refuses new ones for `ms`.
 */
export async function emulatorProxy(target = EMULATOR_HOST): Promise<{ host: string; cut(ms: number): Promise<void>; close(): Promise<void> }> {
  const at = target.lastIndexOf(':');
  const [host, port] = [target.slice(0, at), Number(target.slice(at + 1))];
  const sockets = new Set<Socket>();
  let refusing = false;
  const server: Server = createServer((client) => {
    if (refusing) return void client.destroy();
    const upstream = connect({ host, port });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    host: address,
    async cut(ms) {
      refusing = true;
      for (const s of sockets) s.destroy();
      await new Promise((r) => setTimeout(r, ms));
      refusing = false;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
