/**
 * The packed package.json: the repository's own, without the `txbox-source`
 * condition (it maps the package to src/*.ts, which is for this repository's
 * tests and benchmarks only and which the tarball does not ship).
 */
export const SOURCE_CONDITION = 'txbox-source';

export function stripSourceCondition(pkg) {
  const out = { ...pkg };
  out.exports = strip(pkg.exports);
  return out;
}

function strip(value) {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(strip);
  const out = {};
  for (const [key, inner] of Object.entries(value)) {
    if (key === SOURCE_CONDITION) continue;
    out[key] = strip(inner);
  }
  return out;
}
