/**
 * A consumer service process for the crash tests (a fixture under
 * test/fixtures that prints `consuming` once started, then one JSON line per
 * settled message): its exit, the moment it started consuming, and the
 * settled lines it printed.
 */
import { spawn, type ChildProcess } from 'node:child_process';

export interface ConsumerProcess<S> {
  readonly child: ChildProcess;
  /** Resolves on `consuming`; rejects if the process exits first. */
  readonly ready: Promise<void>;
  /** Resolves once the process exited and its output was read. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The JSON lines printed so far. */
  readonly settled: S[];
  /** The event at which the process killed itself (its `killed <id>` line), if it did. */
  killedAt(): string | null;
}

export function startConsumerProcess<S>(fixture: string, env: Record<string, string>): ConsumerProcess<S> {
  const child = spawn(process.execPath, ['--conditions=txbox-source', '--import', 'tsx', fixture], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  const settled: S[] = [];
  let buffer = '';
  let killed: string | null = null;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      buffer += d.toString();
      const lines = buffer.split('\n');
      buffer = lines.pop()!;
      for (const line of lines) {
        if (line === 'consuming') resolve();
        else if (line.startsWith('{')) settled.push(JSON.parse(line) as S);
        else if (line.startsWith('killed ')) killed = line.slice('killed '.length);
      }
    });
    void exited.then(({ code, signal }) => reject(new Error(`the consumer process exited before consuming (${code ?? signal})`)));
  });
  ready.catch(() => {});
  return { child, ready, exited, settled, killedAt: () => killed };
}
