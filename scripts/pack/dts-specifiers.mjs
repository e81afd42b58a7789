/**
 * tsc's rewriteRelativeImportExtensions rewrites `./x.ts` to `./x.js` in the
 * emitted JavaScript but not in the emitted declarations, which keep `./x.ts`
 * (a specifier TypeScript consumers without allowImportingTsExtensions
 * reject, and which names a file the package does not ship). This rewrites
 * every relative module specifier ending in .ts/.mts/.cts in dist/**\/*.d.ts
 * to .js/.mjs/.cjs, found with TypeScript's own parser (import and export
 * declarations, `import("...")` types, `declare module` names), and fails if
 * any is left.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

const TS_EXTENSION = /^(\.{1,2}\/.*)\.(ts|mts|cts)$/;
const JS_FOR = { ts: 'js', mts: 'mjs', cts: 'cjs' };

export function declarationFiles(dir) {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && /\.d\.(ts|mts|cts)$/.test(e.name))
    .map((e) => join(e.parentPath ?? e.path, e.name));
}

/** Relative specifiers with a .ts extension in one declaration file: [{ start, end, text }] (positions of the string literal's text). */
export function tsSpecifiers(fileName, text) {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found = [];
  const consider = (node) => {
    if (node && ts.isStringLiteral(node) && TS_EXTENSION.test(node.text)) {
      found.push({ start: node.getStart(source) + 1, end: node.getEnd() - 1, text: node.text });
    }
  };
  const visit = (node) => {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) consider(node.moduleSpecifier);
    else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) consider(node.argument.literal);
    else if (ts.isModuleDeclaration(node)) consider(node.name);
    else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) consider(node.moduleReference.expression);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

export function rewriteText(fileName, text) {
  const found = tsSpecifiers(fileName, text).sort((a, b) => b.start - a.start);
  let out = text;
  for (const { start, end, text: spec } of found) {
    const [, base, ext] = TS_EXTENSION.exec(spec);
    out = out.slice(0, start) + `${base}.${JS_FOR[ext]}` + out.slice(end);
  }
  return { text: out, count: found.length };
}

export function rewriteDeclarationSpecifiers(dir) {
  let files = 0;
  let specifiers = 0;
  const left = [];
  for (const file of declarationFiles(dir)) {
    const before = readFileSync(file, 'utf8');
    const { text, count } = rewriteText(file, before);
    if (count > 0) {
      writeFileSync(file, text);
      files++;
      specifiers += count;
    }
    for (const s of tsSpecifiers(file, text)) left.push(`${file}: ${s.text}`);
  }
  if (left.length > 0) throw new Error(`declaration specifiers still end in .ts after the rewrite:\n${left.join('\n')}`);
  return { files, specifiers };
}
