/**
 * The demo's and torture's Kafka reader (src/cli/demo/kafka-sink.ts) across a
 * broker killed with kill -9: close() ends within its bound and leaves no
 * socket or timer open, whether the broker is still down or came back. A
 * torture run over Kafka once printed its report and then hung, its process
 * held open by a kafkajs socket of this reader ("closing the observer took
 * over 15 s").
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, it } from 'node:test';
import { KafkaDemoSink } from '../../src/cli/demo/kafka-sink.ts';
import { assertNoOpenHandles, setUpKafka } from '../fixtures/kafka-consumer-helpers.ts';

const SCRIPTS = new URL('../../scripts/kafka/', import.meta.url).pathname;
const script = (name: string): void => void execFileSync('bash', [join(SCRIPTS, name)], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 240_000 });
let tearDown = async (): Promise<void> => {};

before(async () => {
  tearDown = await setUpKafka();
});

after(async () => {
  script('up.sh');
  await tearDown();
});

async function closeWithin(sink: KafkaDemoSink, ms: number): Promise<number> {
  const started = Date.now();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), ms)));
  const r = await Promise.race([sink.close().then(() => 'closed' as const), late]);
  clearTimeout(timer);
  assert.equal(r, 'closed', `close() did not end within ${ms / 1000} s`);
  return Date.now() - started;
}

it('close() while the broker is down ends, and leaves nothing open', { timeout: 240_000 }, async () => {
  const sink = new KafkaDemoSink();
  await sink.start(async () => {});
  script('kill.sh');
  await sleep(3000); // the reader notices and starts reconnecting
  await closeWithin(sink, 20_000);
  await assertNoOpenHandles();
});

it('close() after the broker was killed and restarted under a running reader ends, and leaves nothing open', { timeout: 300_000 }, async () => {
  script('up.sh');
  const sink = new KafkaDemoSink();
  await sink.start(async () => {});
  script('kill.sh');
  await sleep(3000);
  script('up.sh');
  await sleep(10_000); // the reader reconnects and rejoins its group
  await closeWithin(sink, 20_000);
  await assertNoOpenHandles();
});
