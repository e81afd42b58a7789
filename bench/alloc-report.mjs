/**
 * The bytes allocated per function of a profile written by bench/alloc-sample.mjs: allocated in
 * the function itself (V8 counts an inlined callee's allocations in its caller), then inclusive
 * of callees for txbox's own functions (src/, bench/).
 *
 *   node bench/alloc-report.mjs alloc.heapprofile [rows]
 */
import { readFileSync } from 'node:fs';

const [file, rowsArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: node bench/alloc-report.mjs <profile> [rows]');
  process.exit(2);
}
const rows = Number(rowsArg ?? 25);
const profile = JSON.parse(readFileSync(file, 'utf8'));
const nodes = new Map();
const parent = new Map();
const stack = [[profile.head, undefined]];
while (stack.length > 0) {
  const [node, up] = stack.pop();
  nodes.set(node.id, node);
  if (up !== undefined) parent.set(node.id, up);
  for (const child of node.children) stack.push([child, node.id]);
}
const name = (node) => {
  const f = node.callFrame;
  const url = f.url.replace(/^.*node_modules\//, 'node_modules/').replace(/^file:\/\/.*?\/(src|bench)\//, '$1/');
  // Under tsx the TypeScript sources are compiled without their lines: no line number then.
  return `${f.functionName || '(anonymous)'} ${url}${f.lineNumber > 0 ? `:${f.lineNumber + 1}` : ''}`;
};
const self = new Map();
const inclusive = new Map();
let total = 0;
for (const sample of profile.samples) {
  total += sample.size;
  const node = nodes.get(sample.nodeId);
  self.set(name(node), (self.get(name(node)) ?? 0) + sample.size);
  const seen = new Set();
  for (let id = sample.nodeId; id !== undefined; id = parent.get(id)) {
    const key = name(nodes.get(id));
    if (seen.has(key)) continue;
    seen.add(key);
    inclusive.set(key, (inclusive.get(key) ?? 0) + sample.size);
  }
}
const mb = (n) => (n / 1e6).toFixed(1).padStart(8);
console.log(`${mb(total)} MB allocated in the window`);
console.log('\nby function (self):');
for (const [k, v] of [...self].sort((a, b) => b[1] - a[1]).slice(0, rows)) console.log(`${mb(v)} MB  ${k}`);
console.log("\ntxbox's functions (inclusive):");
for (const [k, v] of [...inclusive].filter(([k]) => / (src|bench)\//.test(k)).sort((a, b) => b[1] - a[1]).slice(0, rows)) console.log(`${mb(v)} MB  ${k}`);
