import { it } from 'node:test';
import assert from 'node:assert/strict';
import { KeyedDispatcher } from 'txbox';

it('runs one key in order and different keys concurrently, within the bound', async () => {
  const d = new KeyedDispatcher(3);
  const log: string[] = [];
  let running = 0;
  let peak = 0;
  const task = (key: string, n: number, ms: number) => async () => {
    running++;
    peak = Math.max(peak, running);
    await new Promise((r) => setTimeout(r, ms));
    log.push(`${key}${n}`);
    running--;
  };
  const all = [];
  for (let n = 0; n < 5; n++) for (const key of ['a', 'b', 'c', 'd']) all.push(d.push(key, task(key, n, key === 'a' ? 6 : 1)));
  await d.onIdle();
  await Promise.all(all);
  for (const key of ['a', 'b', 'c', 'd']) {
    assert.deepEqual(log.filter((x) => x.startsWith(key)), [0, 1, 2, 3, 4].map((n) => `${key}${n}`));
  }
  assert.ok(peak <= 3, `at most 3 at once (peak ${peak})`);
  assert.ok(peak >= 2, 'keys ran in parallel');
});

it('a failing task rejects its own promise and does not stop its key', async () => {
  const d = new KeyedDispatcher(1);
  const ran: number[] = [];
  const first = d.push('k', async () => {
    throw new Error('boom');
  });
  const second = d.push('k', async () => {
    ran.push(2);
  });
  await assert.rejects(first, /boom/);
  await second;
  await d.onIdle();
  assert.deepEqual(ran, [2]);
  assert.equal(d.size, 0);
});
