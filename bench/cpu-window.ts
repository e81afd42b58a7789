/**
 * CPU time of the whole machine and of PostgreSQL over a window, from /proc
 * (Linux): what a drain cost beyond its own process. A benchmark's child
 * process opens the window when its timed part starts and closes it when it
 * ends, so that process start, module loading and the backlog's restore stay
 * out. Other work on the machine lands in these figures too: print the load
 * average next to them.
 */
import { readdirSync, readFileSync } from 'node:fs';

export interface CpuWindow {
  /** CPU time (ms) the machine spent busy, and in all (busy + idle, summed over cores), during the window. */
  readonly machineBusyMs: number;
  readonly machineTotalMs: number;
  /** CPU time (ms) of every `postgres` process, with the backends that exited during the window. */
  readonly postgresMs: number;
}

/** Busy and total CPU time of the machine so far, in ms (/proc/stat's first line; clock ticks of 10 ms). */
function machineCpuMs(): { busy: number; total: number } {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
    const idle = fields[3]! + fields[4]!;
    const total = fields.reduce((a, b) => a + b, 0);
    return { busy: (total - idle) * 10, total: total * 10 };
  } catch {
    return { busy: Number.NaN, total: Number.NaN };
  }
}

/**
 * CPU time of every `postgres` process so far, in ms, with the time of the
 * children each reaped: the postmaster's children time holds the backends
 * that exited. NaN without /proc.
 */
function postgresCpuMs(): number {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((p) => /^\d+$/.test(p));
  } catch {
    return Number.NaN;
  }
  let ticks = 0;
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    if (!stat.includes(' (postgres) ')) continue;
    // After "(comm) ": utime, stime, cutime, cstime are the 12th to 15th fields (proc(5)).
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
  }
  return ticks * 10;
}

/** Opens a window now; the returned function closes it and gives what it saw. */
export function openCpuWindow(): () => CpuWindow {
  const m = machineCpuMs();
  const pg = postgresCpuMs();
  return () => {
    const m2 = machineCpuMs();
    return { machineBusyMs: m2.busy - m.busy, machineTotalMs: m2.total - m.total, postgresMs: postgresCpuMs() - pg };
  };
}
