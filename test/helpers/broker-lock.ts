/**
 * A lock shared by the test files that stop or kill a broker (`name`: kafka,
 * rabbitmq, ...), so that they run one at a time: a directory lock with the
 * holder's pid; a dead holder's lock is taken over.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export async function holdBrokerLock(name: string): Promise<() => void> {
  const dir = join(tmpdir(), `txbox-${name}-tests.lock`);
  for (;;) {
    try {
      mkdirSync(dir);
      writeFileSync(join(dir, 'pid'), String(process.pid));
      return () => rmSync(dir, { recursive: true, force: true });
    } catch {
      let holder = NaN;
      try {
        holder = Number(readFileSync(join(dir, 'pid'), 'utf8'));
      } catch {
        // being created or removed right now
      }
      if (Number.isInteger(holder) && !alive(holder)) rmSync(dir, { recursive: true, force: true });
      await sleep(500);
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
