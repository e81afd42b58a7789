/**
 * Preloaded (`--import`) into the relay and consumer processes `txbox torture`
 * starts, with their stdin a pipe the torture process holds and never writes:
 * when that process ends in any way, kill -9 included, the pipe closes and
 * the child kills itself at once. Without it, a torture run killed from
 * outside (a test's timeout, a CI step's limit) left its relays and consumers
 * running, publishing and consuming beside whatever ran next. The pipe is
 * unref'd: it never keeps a child alive that would end by itself. A relay
 * that torture paused (SIGSTOP) when its parent died cannot run until it
 * gets a SIGCONT; it ends then.
 */
const stdin = process.stdin;
stdin.on('end', () => process.kill(process.pid, 'SIGKILL'));
stdin.on('error', () => process.kill(process.pid, 'SIGKILL'));
stdin.resume();
(stdin as unknown as { unref?: () => void }).unref?.();
