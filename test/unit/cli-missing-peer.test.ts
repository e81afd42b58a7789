/** The `txbox` executable's report of a missing optional peer (src/cli/bin.ts); test/e2e/pack.test.ts runs it without pg installed. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { OPTIONAL_PEERS, missingPeer } from '../../src/cli/missing-peer.ts';

function notFound(message: string): Error {
  return Object.assign(new Error(message), { code: 'ERR_MODULE_NOT_FOUND' });
}

describe('cli: missing optional peer', () => {
  it('names the optional peer that could not be found', () => {
    assert.equal(missingPeer(notFound("Cannot find package 'pg' imported from /app/node_modules/txbox/dist/stores/postgres/pg-connection.js")), 'pg');
    assert.equal(missingPeer(notFound("Cannot find package '@nats-io/jetstream' imported from /x.js")), '@nats-io/jetstream');
  });

  it('leaves every other error alone', () => {
    assert.equal(missingPeer(notFound("Cannot find package 'left-pad' imported from /x.js")), undefined, 'not a peer of txbox');
    assert.equal(missingPeer(notFound("Cannot find module '/app/node_modules/txbox/dist/cli/main.js'")), undefined, 'a broken install, not a missing peer');
    assert.equal(missingPeer(new Error("Cannot find package 'pg' imported from /x.js")), undefined, 'no ERR_MODULE_NOT_FOUND code');
    assert.equal(missingPeer('pg'), undefined);
  });

  it('knows exactly the optional peers package.json declares', async () => {
    const pkg = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as { peerDependenciesMeta: Record<string, { optional?: boolean }> };
    const optional = Object.entries(pkg.peerDependenciesMeta).filter(([, m]) => m.optional).map(([name]) => name);
    assert.deepEqual([...OPTIONAL_PEERS].sort(), optional.sort());
  });
});
