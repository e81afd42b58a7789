/**
 * ops/: the Prometheus alert rules pass `promtool check rules` and their unit
 * tests (`promtool test rules`), and every metric and label the rules and the
 * Grafana dashboard use is one the catalogue (src/core/metric-catalogue.ts)
 * says txbox exports. promtool comes from Debian's prometheus package
 * (scripts/tools.sh installs it).
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { INBOX_EVENT_OUTCOMES, METRICS, RELAY_EVENT_OUTCOMES, type MetricSpec } from '../../src/core/metric-catalogue.ts';
import { checkPromql, promqlNames, resolveMetric } from '../helpers/promql-names.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
const RULES = 'ops/prometheus/txbox-alerts.yml';
const RULE_TESTS = 'ops/prometheus/txbox-alerts.test.yml';
const DASHBOARD = 'ops/grafana/txbox-dashboard.json';
const catalogue: MetricSpec[] = Object.values(METRICS);
const values = {
  [METRICS.relayEvents.name]: { outcome: RELAY_EVENT_OUTCOMES },
  [METRICS.inboxEvents.name]: { outcome: INBOX_EVENT_OUTCOMES },
};

function promtool(...args: string[]): { status: number | null; output: string } {
  const r = spawnSync('promtool', args, { cwd: root, encoding: 'utf8' });
  if (r.error) throw new Error(`promtool could not run (${r.error.message}): install it with bash scripts/tools.sh (Debian package prometheus)`);
  return { status: r.status, output: r.stdout + r.stderr };
}

interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

/**
 * Reads the alert rules of ops/prometheus/txbox-alerts.yml: the YAML subset
 * that file is written in (plain, quoted, `|` and `>-` scalars; a map per
 * rule). Checked against promtool's own count of rules below.
 */
function readAlertRules(text: string): AlertRule[] {
  const lines = text.split('\n');
  const rules: AlertRule[] = [];
  let rule: AlertRule | undefined;
  let section: 'labels' | 'annotations' | undefined;
  const scalar = (raw: string, at: number, indent: number): { value: string; next: number } => {
    const v = raw.trim();
    if (v === '|' || v === '>-' || v === '>') {
      const block: string[] = [];
      let j = at + 1;
      while (j < lines.length && (lines[j]!.trim() === '' || lines[j]!.search(/\S/) > indent)) block.push(lines[j++]!.trim());
      while (block.at(-1) === '') block.pop();
      return { value: v === '|' ? block.join('\n') : block.join(' '), next: j };
    }
    if (v.startsWith("'")) return { value: v.slice(1, -1).replaceAll("''", "'"), next: at + 1 };
    if (v.startsWith('"')) return { value: JSON.parse(v) as string, next: at + 1 };
    return { value: v, next: at + 1 };
  };
  for (let i = 0; i < lines.length; ) {
    const line = lines[i]!;
    const m = /^(\s*)(- )?([a-z_]+):(.*)$/.exec(line);
    if (!m || line.trimStart().startsWith('#')) {
      i++;
      continue;
    }
    const indent = m[1]!.length + (m[2] ? 2 : 0);
    const [key, rest] = [m[3]!, m[4]!];
    if (m[2] && key === 'alert') {
      rule = { alert: rest.trim(), expr: '', labels: {}, annotations: {} };
      rules.push(rule);
      section = undefined;
      i++;
      continue;
    }
    if (!rule || (m[2] && key !== 'alert')) {
      if (m[2]) rule = undefined;
      i++;
      continue;
    }
    if (key === 'labels' || key === 'annotations') {
      section = key;
      i++;
      continue;
    }
    const { value, next } = scalar(rest, i, indent);
    if (key === 'expr') rule.expr = value;
    else if (key === 'for') rule.for = value;
    else if (section) rule[section][key] = value;
    i = next;
  }
  return rules;
}

const rulesText = readFileSync(root + RULES, 'utf8');
const rules = readAlertRules(rulesText);
const dashboard = JSON.parse(readFileSync(root + DASHBOARD, 'utf8')) as {
  schemaVersion: number;
  uid: string;
  title: string;
  templating: { list: { type: string; name: string; query: unknown; definition?: string; datasource?: { uid: string } }[] };
  panels: { id: number; type: string; title: string; datasource?: { type: string; uid: string }; targets?: { expr: string; refId: string; datasource?: { uid: string } }[] }[];
};
const panels = dashboard.panels.filter((p) => p.type !== 'row');

it('promtool check rules accepts the rule file, and counts the rules this test reads', () => {
  const r = promtool('check', 'rules', RULES);
  assert.equal(r.status, 0, r.output);
  assert.match(r.output, new RegExp(`SUCCESS: ${rules.length} rules found`), r.output);
});

it('promtool test rules: every alert fires on its input series and stays silent on the others', () => {
  const r = promtool('test', 'rules', RULE_TESTS);
  assert.equal(r.status, 0, r.output);
  assert.match(r.output, /SUCCESS/);
});

it('the alerts the operations guide lists, each tested firing and silent', () => {
  const names = rules.map((r) => r.alert);
  assert.deepEqual(names.toSorted(), [
    'TxboxBacklogGrowing',
    'TxboxCommitToAckHigh',
    'TxboxDestinationDown',
    'TxboxEndToEndLagHigh',
    'TxboxInboxDeadEvents',
    'TxboxNoRelayAlive',
    'TxboxOldestPendingCritical',
    'TxboxOldestPendingOld',
    'TxboxParkedEvents',
    'TxboxRelayFenced',
    'TxboxWalSlotLagHigh',
    'TxboxWalSlotNotConfirmed',
  ]);
  const tests = readFileSync(root + RULE_TESTS, 'utf8').split(/- eval_time:/).slice(1);
  for (const name of names) {
    const mine = tests.filter((t) => new RegExp(`alertname: ${name}\\s`).test(t));
    assert.ok(mine.some((t) => /exp_alerts: \[\]/.test(t)), `${name}: no promtool test where it stays silent`);
    assert.ok(mine.some((t) => /exp_labels:/.test(t)), `${name}: no promtool test where it fires`);
  }
  const ops = readFileSync(root + 'docs/operations.md', 'utf8');
  for (const name of names) assert.match(ops, new RegExp(`\\| \`${name}\` \\|`), `docs/operations.md, Alerts: no row for ${name}`);
});

it('every alert has a severity, a summary and a description naming a txbox command', () => {
  for (const r of rules) {
    assert.ok(['info', 'warning', 'critical'].includes(r.labels.severity ?? ''), `${r.alert}: severity ${r.labels.severity}`);
    assert.ok(r.annotations.summary, `${r.alert}: no summary`);
    assert.match(r.annotations.description ?? '', /`txbox [a-z]/, `${r.alert}: the description names no txbox command to run`);
  }
});

it('every alert expression uses catalogue metrics, with their labels and outcomes', () => {
  for (const r of rules) assert.deepEqual(checkPromql(r.expr, catalogue, values), [], `${r.alert}: ${r.expr}`);
});

it('the dashboard: current schema, a Prometheus data source variable, destination and consumer variables from label_values', () => {
  assert.ok(dashboard.schemaVersion >= 39, `schemaVersion ${dashboard.schemaVersion}`);
  assert.ok(dashboard.uid && dashboard.title);
  const vars = new Map(dashboard.templating.list.map((v) => [v.name, v]));
  assert.equal(vars.get('datasource')?.type, 'datasource');
  assert.equal(vars.get('datasource')?.query, 'prometheus');
  for (const name of ['destination', 'consumer']) {
    const v = vars.get(name);
    assert.equal(v?.type, 'query', name);
    assert.equal(v?.datasource?.uid, '${datasource}', name);
    const m = /^label_values\((\w+),\s*(\w+)\)$/.exec(v?.definition ?? '');
    assert.ok(m, `${name}: ${v?.definition}`);
    const spec = resolveMetric(m[1]!, catalogue)?.spec;
    assert.ok(spec, `${name}: unknown metric ${m[1]}`);
    assert.equal(m[2], name);
    assert.ok(spec.labels.includes(name), `${name}: ${spec.name} has no label ${name}`);
  }
});

it('every dashboard panel has targets on the data source variable, each expression checked against the catalogue', () => {
  const ids = new Set<number>();
  for (const p of dashboard.panels) {
    assert.ok(!ids.has(p.id), `panel id ${p.id} twice`);
    ids.add(p.id);
  }
  assert.ok(panels.length >= 13, `${panels.length} panels`);
  for (const p of panels) {
    assert.equal(p.datasource?.uid, '${datasource}', p.title);
    assert.ok(p.targets && p.targets.length > 0, `${p.title}: no target`);
    for (const t of p.targets) {
      assert.equal(t.datasource?.uid, '${datasource}', `${p.title} ${t.refId}`);
      assert.deepEqual(checkPromql(t.expr, catalogue, values), [], `${p.title} ${t.refId}: ${t.expr}`);
    }
  }
});

it('promtool parses every dashboard query (as recording rules, Grafana\'s interval variables set to 5m)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'txbox-dashboard-'));
  try {
    const rules = panels.flatMap((p) =>
      (p.targets ?? []).map((t) => `      - record: txbox_dashboard:panel_${p.id}_${t.refId}\n        expr: ${JSON.stringify(t.expr.replace(/\$__(rate_interval|interval|range)/g, '5m'))}`),
    );
    writeFileSync(join(dir, 'dashboard-rules.yml'), `groups:\n  - name: dashboard\n    rules:\n${rules.join('\n')}\n`);
    const r = promtool('check', 'rules', join(dir, 'dashboard-rules.yml'));
    assert.equal(r.status, 0, r.output);
    assert.match(r.output, new RegExp(`SUCCESS: ${rules.length} rules found`));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('the dashboard shows every metric of the catalogue', () => {
  const used = new Set(panels.flatMap((p) => (p.targets ?? []).flatMap((t) => promqlNames(t.expr).selectors.map((s) => resolveMetric(s.metric, catalogue)?.spec.name))));
  for (const spec of catalogue) assert.ok(used.has(spec.name), `no panel shows ${spec.name}`);
});

it('the rule reader of this test found every rule of the file', () => {
  // promtool's count of rules is checked in the first test; here each rule's fields.
  for (const r of rules) assert.match(r.expr, /txbox_/, r.alert);
  assert.equal((rulesText.match(/^\s+expr:/gm) ?? []).length, rules.length);
  assert.equal((rulesText.match(/^\s+severity:/gm) ?? []).length, rules.length);
  assert.equal((rulesText.match(/^\s+description:/gm) ?? []).length, rules.length);
});
