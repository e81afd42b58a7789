/**
 * `txbox/testing/conformance` loads without `pg`, so a store of another
 * database (MySQL, Firestore) can run `runStoreConformance` without installing
 * PostgreSQL's driver: a child process whose module resolution refuses `pg`
 * imports the subpath. (Failed before the transport suite's pg import moved
 * into its `before` hook.)
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

it('imports with pg missing, and names both suites', () => {
  const dir = mkdtempSync(join(tmpdir(), 'txbox-storeconf-'));
  try {
    const hooks = join(dir, 'no-pg-hooks.mjs');
    writeFileSync(
      hooks,
      `export async function resolve(specifier, context, next) {
        if (specifier === 'pg' || specifier.startsWith('pg/')) {
          throw Object.assign(new Error("Cannot find package 'pg' (hidden by the test)"), { code: 'ERR_MODULE_NOT_FOUND' });
        }
        return next(specifier, context);
      }\n`,
    );
    const register = join(dir, 'register.mjs');
    writeFileSync(register, `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`);
    const script = `const m = await import('txbox/testing/conformance'); console.log(typeof m.runStoreConformance, typeof m.runTransportConformance);
      await import('pg').then(() => console.log('pg loaded'), () => console.log('pg hidden'));`;
    const child = spawnSync(process.execPath, ['--conditions=txbox-source', '--import', 'tsx', '--import', pathToFileURL(register).href, '--input-type=module', '-e', script], {
      cwd: process.cwd(),
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(child.status, 0, child.stderr);
    assert.deepEqual(child.stdout.trim().split('\n'), ['function function', 'pg hidden']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
