/** Runs the `txbox` CLI as a subprocess, as a user would. */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const BUILT = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
/** `npm test` builds first and sets TXBOX_TEST_CLI=dist: the CLI then runs as users run it, and starts fast. */
const ARGS = process.env.TXBOX_TEST_CLI === 'dist' ? [BUILT] : ['--conditions=txbox-source', '--import', 'tsx', MAIN];

export interface CliResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface RunningCli {
  readonly child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves when the process has exited. */
  readonly exited: Promise<CliResult>;
}

/** Starts `txbox <args>`; the environment is the test's minus TXBOX_* unless given. */
export function startCli(args: string[], env: Record<string, string> = {}): RunningCli {
  const cleanEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TXBOX_') || k === 'TXBOX_TEST_CLI'));
  const child = spawn(process.execPath, [...ARGS, ...args], {
    cwd: ROOT,
    env: { ...cleanEnv, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<CliResult>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal, stdout: out, stderr: err }));
  });
  return { child, stdout: () => out, stderr: () => err, exited };
}

export async function runCli(args: string[], env: Record<string, string> = {}, timeoutMs = 60_000): Promise<CliResult> {
  const running = startCli(args, env);
  const timer = setTimeout(() => running.child.kill('SIGKILL'), timeoutMs);
  const result = await running.exited;
  clearTimeout(timer);
  return result;
}
