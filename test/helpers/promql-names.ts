/**
 * The metric and label names a PromQL expression uses, for checking alert
 * rules and dashboard queries against the metric catalogue. Not a PromQL
 * parser: a tokenizer that knows enough to tell metric names from functions,
 * keywords, label names, strings, numbers, durations and Grafana variables.
 */
import type { MetricSpec } from '../../src/core/metric-catalogue.ts';

export interface LabelMatcher {
  readonly label: string;
  readonly op: '=' | '!=' | '=~' | '!~';
  readonly value: string;
}

/** A vector selector: a metric name and the label matchers in its braces. */
export interface SelectorUse {
  /** '' for a selector without a name (`{job="x"}`), unless a `__name__` matcher names it. */
  readonly metric: string;
  readonly matchers: readonly LabelMatcher[];
}

export interface PromqlNames {
  readonly selectors: readonly SelectorUse[];
  /** Label names in by / without / on / ignoring / group_left / group_right lists. */
  readonly grouping: readonly string[];
}

const AGGREGATIONS = new Set(['sum', 'avg', 'min', 'max', 'count', 'group', 'stddev', 'stdvar', 'topk', 'bottomk', 'quantile', 'count_values', 'limitk', 'limit_ratio']);
const LABEL_LISTS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'atan2', 'inf', 'nan']);
const IDENT_START = /[A-Za-z_:]/;
const IDENT = /[A-Za-z0-9_:]/;
const LABEL_IDENT = /[A-Za-z0-9_]/;

/**
 * @example
 * promqlNames('sum by (destination) (rate(txbox_relay_events_total{outcome="parked"}[5m]))')
 * // { selectors: [{ metric: 'txbox_relay_events_total', matchers: [{ label: 'outcome', op: '=', value: 'parked' }] }], grouping: ['destination'] }
 */
export function promqlNames(expr: string): PromqlNames {
  const selectors: SelectorUse[] = [];
  const grouping: string[] = [];
  let i = 0;
  const n = expr.length;
  const skipSpace = (): void => {
    for (;;) {
      while (i < n && /\s/.test(expr[i]!)) i++;
      if (expr[i] !== '#') return;
      while (i < n && expr[i] !== '\n') i++;
    }
  };
  const readWhile = (re: RegExp): string => {
    const start = i;
    while (i < n && re.test(expr[i]!)) i++;
    return expr.slice(start, i);
  };
  const readString = (): string => {
    const quote = expr[i]!;
    i++;
    let out = '';
    while (i < n && expr[i] !== quote) {
      if (expr[i] === '\\' && quote !== '`') {
        out += expr[i + 1] ?? '';
        i += 2;
      } else out += expr[i++];
    }
    if (i >= n) throw new Error(`unterminated string in PromQL: ${expr}`);
    i++;
    return out;
  };
  const readMatchers = (): LabelMatcher[] => {
    i++; // {
    const matchers: LabelMatcher[] = [];
    for (;;) {
      skipSpace();
      if (expr[i] === ',') {
        i++;
        continue;
      }
      if (expr[i] === '}') {
        i++;
        return matchers;
      }
      if (i >= n) throw new Error(`unterminated {...} in PromQL: ${expr}`);
      const label = expr[i] === '"' ? readString() : readWhile(LABEL_IDENT);
      skipSpace();
      const op = expr.slice(i, i + 2) === '=~' || expr.slice(i, i + 2) === '!~' || expr.slice(i, i + 2) === '!=' ? expr.slice(i, i + 2) : expr[i];
      if (!label || (op !== '=' && op !== '!=' && op !== '=~' && op !== '!~')) {
        // A quoted metric name alone in the braces (`{"name"}`, PromQL 3).
        if (label && (expr[i] === ',' || expr[i] === '}')) {
          matchers.push({ label: '__name__', op: '=', value: label });
          continue;
        }
        throw new Error(`unreadable label matcher at ${i} in PromQL: ${expr}`);
      }
      i += op.length;
      skipSpace();
      if (expr[i] !== '"' && expr[i] !== "'" && expr[i] !== '`') throw new Error(`label ${label}: expected a string at ${i} in PromQL: ${expr}`);
      matchers.push({ label, op, value: readString() });
    }
  };
  let pending: { metric: string; matchers: LabelMatcher[] } | undefined;
  const flush = (): void => {
    if (pending) selectors.push(pending);
    pending = undefined;
  };
  while (i < n) {
    skipSpace();
    if (i >= n) break;
    const c = expr[i]!;
    if (c === '{') {
      const matchers = readMatchers();
      if (pending && pending.matchers.length === 0) {
        pending.matchers = matchers;
        flush();
      } else {
        flush();
        const name = matchers.find((m) => m.label === '__name__' && m.op === '=');
        selectors.push({ metric: name?.value ?? '', matchers: matchers.filter((m) => m !== name) });
      }
      continue;
    }
    flush();
    if (c === '"' || c === "'" || c === '`') {
      readString();
    } else if (c === '[') {
      // A range or subquery: durations, maybe Grafana variables; no names.
      const end = expr.indexOf(']', i);
      if (end < 0) throw new Error(`unterminated [...] in PromQL: ${expr}`);
      i = end + 1;
    } else if (c === '$') {
      // A Grafana variable: $name, ${name}, ${name:format}.
      i++;
      if (expr[i] === '{') {
        const end = expr.indexOf('}', i);
        i = end < 0 ? n : end + 1;
      } else readWhile(LABEL_IDENT);
    } else if (/[0-9.]/.test(c)) {
      readWhile(/[0-9A-Za-z_.]/); // numbers, 0x1f, 1e3, durations (5m, 1h30m)
    } else if (IDENT_START.test(c)) {
      const word = readWhile(IDENT);
      const lower = word.toLowerCase();
      skipSpace();
      if (LABEL_LISTS.has(lower)) {
        if (expr[i] === '(') {
          i++;
          for (;;) {
            skipSpace();
            if (expr[i] === ')') {
              i++;
              break;
            }
            if (expr[i] === ',') {
              i++;
              continue;
            }
            const label = expr[i] === '"' ? readString() : readWhile(LABEL_IDENT);
            if (!label) throw new Error(`unreadable label list after ${word} in PromQL: ${expr}`);
            grouping.push(label);
          }
        }
      } else if (KEYWORDS.has(lower)) {
        // operators and literals: no name
      } else if (expr[i] === '(' || (AGGREGATIONS.has(lower) && /^(by|without)\b/i.test(expr.slice(i)))) {
        // a function or an aggregation: its arguments are read as the loop goes on
      } else {
        pending = { metric: word, matchers: [] };
      }
    } else {
      i++; // operators, parentheses, commas, @
    }
  }
  flush();
  return { selectors, grouping };
}

/** Labels every scraped series carries besides its own (target labels). */
export const TARGET_LABELS = ['job', 'instance'] as const;

/** The catalogue entry a series name belongs to: a histogram's `_bucket`, `_sum` and `_count` map to it. */
export function resolveMetric(name: string, catalogue: readonly MetricSpec[]): { spec: MetricSpec; suffix: '' | '_bucket' | '_sum' | '_count' } | undefined {
  for (const spec of catalogue) {
    if (spec.kind !== 'histogram' && spec.name === name) return { spec, suffix: '' };
    if (spec.kind === 'histogram') {
      for (const suffix of ['_bucket', '_sum', '_count'] as const) if (name === spec.name + suffix) return { spec, suffix };
    }
  }
  return undefined;
}

/**
 * What is wrong with an expression against the catalogue: unknown metrics
 * (a histogram's bare name included: only its `_bucket`, `_sum`, `_count`
 * series exist), matcher labels the metric does not have, grouping labels
 * missing on a metric the expression uses, matchers on label values outside
 * `values` (e.g. the outcomes). Empty when all is well.
 */
export function checkPromql(expr: string, catalogue: readonly MetricSpec[], values: Readonly<Record<string, Readonly<Record<string, readonly string[]>>>> = {}): string[] {
  const problems: string[] = [];
  const { selectors, grouping } = promqlNames(expr);
  if (selectors.length === 0) problems.push('uses no metric');
  for (const s of selectors) {
    const found = resolveMetric(s.metric, catalogue);
    if (!found) {
      problems.push(`unknown metric ${s.metric || '(unnamed selector)'}`);
      continue;
    }
    const allowed = new Set<string>([...found.spec.labels, ...TARGET_LABELS, ...(found.suffix === '_bucket' ? ['le'] : [])]);
    for (const m of s.matchers) {
      if (!allowed.has(m.label)) problems.push(`${s.metric} has no label ${m.label} (it has ${[...allowed].join(', ')})`);
      const known = values[found.spec.name]?.[m.label];
      if (known && (m.op === '=' || m.op === '!=') && !known.includes(m.value)) problems.push(`${s.metric}{${m.label}="${m.value}"}: ${m.label} is one of ${known.join(', ')}`);
    }
    for (const label of grouping) {
      if (!allowed.has(label)) problems.push(`grouping by ${label}, which ${s.metric} does not have`);
    }
  }
  return problems;
}
