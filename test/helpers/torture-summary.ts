/** Reading `txbox torture`'s summary in tests: the counts on its lines, and the checks of a clean run. */
import assert from 'node:assert/strict';

/** The count on a summary line, e.g. `lost 0  ok` -> 0. */
export function count(summary: string, label: string): number {
  const m = new RegExp(`^\\s*${label}\\s+([\\d,]+)`, 'm').exec(summary);
  assert.ok(m, `the summary has a "${label}" line:\n${summary}`);
  return Number(m[1]!.replace(/,/g, ''));
}

/** No loss, phantom, reorder or bad signature, at least `events` committed and `kills` relay kills; with `inbox`, each event applied once and every projection at its last version. */
export function assertClean(stdout: string, inbox: boolean, events: string, kills: string): void {
  for (const label of ['lost', 'phantom', 'order violations', 'signature failures', 'unreadable']) assert.equal(count(stdout, label), 0, `${label}:\n${stdout}`);
  assert.ok(count(stdout, 'committed') >= Number(events), stdout);
  const done = /faults\s+(\d+) relay kills/.exec(stdout);
  assert.ok(done && Number(done[1]) >= Number(kills), `at least ${kills} kills:\n${stdout}`);
  if (inbox) {
    for (const label of ['applied twice', 'version order', 'projection']) assert.equal(count(stdout, label), 0, `${label}:\n${stdout}`);
    assert.match(stdout, /applied\s+[\d,]+ unique; missing 0 {2}ok; phantom 0 {2}ok/);
  }
  assert.match(stdout, /^ok: nothing lost/m);
}
