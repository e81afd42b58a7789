/**
 * The pack step's rewrite of emitted declarations (scripts/pack/dts-specifiers.mjs)
 * and of the packed manifest (scripts/pack/manifest.mjs), as pure functions.
 * test/e2e/pack.test.ts checks the tarball they produce.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readFile } from 'node:fs/promises';
import { rewriteDeclarationSpecifiers, rewriteText } from '../../scripts/pack/dts-specifiers.mjs';
import { stripSourceCondition } from '../../scripts/pack/manifest.mjs';

describe('pack: declaration specifiers', () => {
  it('rewrites every relative .ts specifier a declaration can hold, and nothing else', () => {
    const input = [
      "import type { A } from './a.ts';",
      "import { B } from '../core/b.ts';",
      "export * from './c.ts';",
      "export { D, type E } from \"./d/e.ts\";",
      "export declare const f: import('../../index.ts').EventDefinition<'x', {}>;",
      "export declare const g: import(\"./g.mts\").G;",
      "import pg from 'pg';",
      "import type { H } from 'some-package/h.ts';",
      "export declare const text = './not-a-specifier.ts';",
      "declare module './augment.ts' { interface X { y: 1 } }",
    ].join('\n');
    const { text, count } = rewriteText('x.d.ts', input);
    assert.equal(count, 7);
    assert.equal(
      text,
      [
        "import type { A } from './a.js';",
        "import { B } from '../core/b.js';",
        "export * from './c.js';",
        "export { D, type E } from \"./d/e.js\";",
        "export declare const f: import('../../index.js').EventDefinition<'x', {}>;",
        "export declare const g: import(\"./g.mjs\").G;",
        "import pg from 'pg';",
        "import type { H } from 'some-package/h.ts';",
        "export declare const text = './not-a-specifier.ts';",
        "declare module './augment.js' { interface X { y: 1 } }",
      ].join('\n'),
    );
  });

  it('rewrites a dist folder in place and counts what it changed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'txbox-dts-'));
    try {
      mkdirSync(join(dir, 'core'));
      writeFileSync(join(dir, 'index.d.ts'), "export * from './core/a.ts';\n");
      writeFileSync(join(dir, 'core', 'a.d.ts'), 'export declare const a = 1;\n');
      writeFileSync(join(dir, 'index.js'), "export * from './core/a.js';\n");
      assert.deepEqual(rewriteDeclarationSpecifiers(dir), { files: 1, specifiers: 1 });
      assert.equal(readFileSync(join(dir, 'index.d.ts'), 'utf8'), "export * from './core/a.js';\n");
      assert.deepEqual(rewriteDeclarationSpecifiers(dir), { files: 0, specifiers: 0 }, 'a second run finds nothing left');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('pack: manifest', () => {
  it('drops the txbox-source condition at every depth and keeps everything else', async () => {
    const pkg = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as { exports: Record<string, unknown>; name: string };
    const packed = stripSourceCondition(pkg);
    assert.doesNotMatch(JSON.stringify(packed.exports), /txbox-source|\.\/src\//);
    assert.equal(packed.name, pkg.name);
    assert.deepEqual(Object.keys(packed.exports), Object.keys(pkg.exports), 'every subpath is still exported');
    assert.match(JSON.stringify(pkg.exports), /txbox-source/, 'the repository keeps its own');
    const nested = stripSourceCondition({ exports: { '.': { 'txbox-source': './src/x.ts', import: { 'txbox-source': './src/y.ts', types: './dist/y.d.ts', default: './dist/y.js' } } } });
    assert.deepEqual(nested.exports, { '.': { import: { types: './dist/y.d.ts', default: './dist/y.js' } } });
  });
});
