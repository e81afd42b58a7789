/** The PromQL name extractor the ops tests use to check alert rules and dashboard queries against the metric catalogue. Pure. */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { METRICS, type MetricSpec } from 'txbox';
import { checkPromql, promqlNames, resolveMetric } from '../helpers/promql-names.ts';

const catalogue: MetricSpec[] = Object.values(METRICS);
const metricsOf = (expr: string): string[] => promqlNames(expr).selectors.map((s) => s.metric);

it('finds metric names and skips functions, aggregations and their by (...) lists', () => {
  const r = promqlNames('histogram_quantile(0.99, sum by (destination, le) (rate(txbox_relay_commit_to_ack_seconds_bucket[5m])))');
  assert.deepEqual(r.selectors, [{ metric: 'txbox_relay_commit_to_ack_seconds_bucket', matchers: [] }]);
  assert.deepEqual(r.grouping, ['destination', 'le']);
});

it('reads label matchers with their operator and value, and attaches them to the metric before the braces', () => {
  const r = promqlNames('sum(increase(txbox_inbox_events_total { outcome = "dead", consumer=~"a|b" , job!~\'x\' }[10m])) by (consumer)');
  assert.deepEqual(r.selectors, [
    {
      metric: 'txbox_inbox_events_total',
      matchers: [
        { label: 'outcome', op: '=', value: 'dead' },
        { label: 'consumer', op: '=~', value: 'a|b' },
        { label: 'job', op: '!~', value: 'x' },
      ],
    },
  ]);
  assert.deepEqual(r.grouping, ['consumer']);
});

it('skips keywords, vector-matching lists, numbers, durations, offsets, strings and comments', () => {
  const expr = `
    # a comment naming not_a_metric
    max by (destination) (deriv(txbox_relay_backlog[15m:1m] offset 5m)) > 0
    and on (destination) group_left (transport)
    max without (instance) (txbox_relay_backlog) > 1e3
    or absent(txbox_relay_relays_alive) unless bool 0x1F * Inf
    + label_replace(txbox_relay_leases_held, "dst", "$1", "src", "(.*)") @ start()`;
  assert.deepEqual(metricsOf(expr), ['txbox_relay_backlog', 'txbox_relay_backlog', 'txbox_relay_relays_alive', 'txbox_relay_leases_held']);
  assert.deepEqual(promqlNames(expr).grouping, ['destination', 'destination', 'transport', 'instance']);
});

it('skips Grafana variables in ranges, matchers and elsewhere', () => {
  const r = promqlNames('sum by (destination, outcome) (rate(txbox_relay_events_total{destination=~"$destination"}[$__rate_interval])) / ${scale} * $factor');
  assert.deepEqual(r.selectors, [{ metric: 'txbox_relay_events_total', matchers: [{ label: 'destination', op: '=~', value: '$destination' }] }]);
});

it('an aggregation written like a metric is still an aggregation when by or without follows', () => {
  assert.deepEqual(metricsOf('count without (le) (txbox_relay_batch_size_bucket)'), ['txbox_relay_batch_size_bucket']);
  assert.deepEqual(metricsOf('topk(3, txbox_relay_parked)'), ['txbox_relay_parked']);
});

it('a selector named by __name__ or without a name', () => {
  assert.deepEqual(metricsOf('{__name__="txbox_relay_parked", destination="x"}'), ['txbox_relay_parked']);
  assert.deepEqual(metricsOf('{job="relay"}'), ['']);
});

it('refuses what it cannot read instead of guessing', () => {
  assert.throws(() => promqlNames('txbox_relay_parked{destination="x}'), /unterminated string/);
  assert.throws(() => promqlNames('rate(txbox_relay_parked[5m)'), /unterminated \[/);
  assert.throws(() => promqlNames('txbox_relay_parked{destination x}'), /unreadable label matcher/);
});

it('resolveMetric maps a histogram\'s _bucket, _sum and _count to it, and counters by their _total name', () => {
  assert.equal(resolveMetric('txbox_inbox_lag_seconds_bucket', catalogue)?.spec.name, 'txbox_inbox_lag_seconds');
  assert.equal(resolveMetric('txbox_relay_batch_size_sum', catalogue)?.suffix, '_sum');
  assert.equal(resolveMetric('txbox_relay_batch_size_count', catalogue)?.suffix, '_count');
  assert.equal(resolveMetric('txbox_relay_events_total', catalogue)?.spec.kind, 'counter');
  assert.equal(resolveMetric('txbox_inbox_lag_seconds', catalogue), undefined, 'a histogram has no series under its bare name');
  assert.equal(resolveMetric('txbox_relay_events', catalogue), undefined);
  assert.equal(resolveMetric('txbox_relay_backlog_bucket', catalogue), undefined);
});

it('checkPromql accepts catalogue names and labels, and names each problem', () => {
  assert.deepEqual(checkPromql('histogram_quantile(0.99, sum by (consumer, le) (rate(txbox_inbox_lag_seconds_bucket{consumer="a"}[5m])))', catalogue), []);
  assert.deepEqual(checkPromql('max by (destination, instance) (txbox_relay_backlog{job="relay"})', catalogue), []);
  assert.deepEqual(checkPromql('rate(txbox_relay_published_total[5m])', catalogue), ['unknown metric txbox_relay_published_total']);
  assert.deepEqual(checkPromql('sum(rate(txbox_inbox_lag_seconds[5m]))', catalogue), ['unknown metric txbox_inbox_lag_seconds']);
  assert.match(checkPromql('txbox_relay_backlog{transport="http"}', catalogue).join(), /txbox_relay_backlog has no label transport/);
  assert.match(checkPromql('sum by (le) (txbox_relay_batch_size_sum)', catalogue).join(), /grouping by le, which txbox_relay_batch_size_sum does not have/);
  assert.match(checkPromql('sum by (destination) (txbox_relay_leases_held)', catalogue).join(), /grouping by destination/);
  assert.deepEqual(checkPromql('1 + 1', catalogue), ['uses no metric']);
  const values = { txbox_inbox_events_total: { outcome: ['processed', 'dead'] } };
  assert.deepEqual(checkPromql('txbox_inbox_events_total{outcome="dead"}', catalogue, values), []);
  assert.match(checkPromql('txbox_inbox_events_total{outcome="deadletter"}', catalogue, values).join(), /outcome is one of processed, dead/);
  assert.deepEqual(checkPromql('txbox_inbox_events_total{outcome=~"dead.*"}', catalogue, values), [], 'regex matchers are not checked against values');
});
