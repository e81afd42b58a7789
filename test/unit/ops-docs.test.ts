/** docs/operations.md's "Metric reference" is the metric catalogue, as scripts/docs/metrics-table.mjs renders it. Pure. */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { METRICS } from 'txbox';
import { END, renderMetricsTable, replaceMetricsTable, START } from '../../scripts/docs/metrics-table.mjs';

const doc = readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8');

it('docs/operations.md holds the metric table of the catalogue (regenerate: node --conditions=txbox-source --import tsx scripts/docs/metrics-table.mjs --write)', () => {
  const a = doc.indexOf(START);
  const b = doc.indexOf(END);
  assert.ok(a >= 0 && b > a, 'the metrics-table markers are missing');
  assert.equal(doc.slice(a, b + END.length), renderMetricsTable(METRICS));
  assert.equal(doc.indexOf(START, a + 1), -1, 'one table only');
});

it('the table has one row per catalogue metric, with its kind and labels', () => {
  const table = renderMetricsTable(METRICS);
  const rows = table.split('\n').filter((l) => l.startsWith('| `txbox_'));
  assert.equal(rows.length, Object.keys(METRICS).length);
  for (const m of Object.values(METRICS)) {
    const row = rows.find((r) => r.startsWith(`| \`${m.name}\` |`));
    assert.ok(row, m.name);
    assert.ok(row.includes(`| ${m.kind}`), `${m.name}: ${m.kind}`);
    for (const l of m.labels) assert.ok(row.includes(`\`${l}\``), `${m.name}: label ${l}`);
  }
});

it('a new or renamed metric changes the table, so the docs check fails until they are regenerated', () => {
  const more = { ...METRICS, extra: { name: 'txbox_extra_total', kind: 'counter', help: 'a | b', labels: ['x'] } } as const;
  const table = renderMetricsTable(more);
  assert.notEqual(table, renderMetricsTable(METRICS));
  assert.ok(table.includes('| `txbox_extra_total` | counter | `x` | a \\| b |'), 'pipes in help text are escaped');
  assert.equal(replaceMetricsTable(`before\n${START}\nold\n${END}\nafter`, 'NEW'), 'before\nNEW\nafter');
  assert.throws(() => replaceMetricsTable('no markers', 'NEW'), /markers/);
});
