#!/usr/bin/env node
/**
 * `npm pack` and `npm publish` run this before they pack (package.json
 * "prepack"); `npm install git+...` runs it as "prepare" (`--build-only`),
 * because npm runs only `prepare` when it packs a git dependency. It makes
 * the tarball hold code:
 *
 * 1. builds src/ into dist/ (tsc -p tsconfig.build.json) from a clean dist/;
 * 2. rewrites the relative `.ts` specifiers that tsc leaves in the emitted
 *    declarations (rewriteRelativeImportExtensions rewrites .js output only)
 *    to `.js`, so the types resolve for consumers under node16/nodenext and
 *    bundler resolution, then checks no `.ts` specifier is left;
 * 3. removes the repository-private `txbox-source` condition (which maps the
 *    package to src/*.ts for this repository's tests) from the packed
 *    package.json, so no condition a user can set reaches src/. The original
 *    is kept in package.json.prepack and put back by postpack.mjs. Not with
 *    `--build-only`: npm has no hook after `prepare` to put it back, so a
 *    git install keeps the repository's package.json, whose `txbox-source`
 *    targets (src/*.ts) are not installed.
 *
 * During `npm pack`, npm runs `prepare` after `prepack`: with
 * package.json.prepack present, `--build-only` knows dist/ was just built
 * and does nothing.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { rewriteDeclarationSpecifiers } from './dts-specifiers.mjs';
import { stripSourceCondition } from './manifest.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const manifest = join(root, 'package.json');
const backup = join(root, 'package.json.prepack');

const buildOnly = process.argv.includes('--build-only');
if (buildOnly && existsSync(backup)) process.exit(0);
// An interrupted earlier pack left its stripped manifest: start from the original.
if (existsSync(backup)) renameSync(backup, manifest);

rmSync(join(root, 'dist'), { recursive: true, force: true });
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
if (!existsSync(tsc)) {
  console.error('prepack: TypeScript is not installed; run `npm ci` in the repository before packing.');
  process.exit(1);
}
execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { cwd: root, stdio: 'inherit' });

const { files, specifiers } = rewriteDeclarationSpecifiers(join(root, 'dist'));
console.error(`prepack: built dist/, rewrote ${specifiers} declaration specifiers in ${files} files`);

if (buildOnly) process.exit(0);
const original = readFileSync(manifest, 'utf8');
writeFileSync(backup, original);
writeFileSync(manifest, JSON.stringify(stripSourceCondition(JSON.parse(original)), null, 2) + '\n');
