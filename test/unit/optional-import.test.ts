import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { importOptional } from '../../src/cli/optional-import.ts';
import { CliError, EXIT } from '../../src/cli/cli-error.ts';

describe('importOptional', () => {
  it('names the package to install when a module it loads imports a package that is not installed', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'txbox-optional-'));
    try {
      // Like src/transports/redis/index.ts importing ioredis, with a package that is surely absent.
      const file = join(dir, 'transport.mjs');
      await writeFile(file, "import { Redis } from 'txbox-absent-client-package';\nexport const T = Redis;\n");
      await assert.rejects(
        importOptional('the redis transport', () => import(pathToFileURL(file).href)),
        (e: unknown) =>
          e instanceof CliError &&
          e.exitCode === EXIT.usage &&
          e.message === 'the redis transport needs the package txbox-absent-client-package, which is not installed: npm install txbox-absent-client-package',
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('names a scoped package by its full name', async () => {
    const specifier: string = '@txbox-absent-scope/transport-node/sub/path.js';
    await assert.rejects(
      importOptional('the nats transport', () => import(specifier)),
      (e: unknown) => e instanceof CliError && /npm install @txbox-absent-scope\/transport-node$/.test(e.message),
    );
  });

  it('passes other errors through unchanged, and returns the module when it loads', async () => {
    const boom = new Error('boom');
    await assert.rejects(importOptional('x', () => Promise.reject(boom)), (e: unknown) => e === boom);
    const mod = await importOptional('node:path', () => import('node:path'));
    assert.equal(typeof mod.join, 'function');
  });
});
