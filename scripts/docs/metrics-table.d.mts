/** Types of metrics-table.mjs, for test/unit/ops-docs.test.ts. */
import type { MetricSpec } from '../../src/core/metric-catalogue.ts';
export declare const START: string;
export declare const END: string;
export declare function renderMetricsTable(metrics: Readonly<Record<string, MetricSpec>>): string;
export declare function replaceMetricsTable(doc: string, table: string): string;
