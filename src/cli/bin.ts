#!/usr/bin/env node
/**
 * The `txbox` executable (package.json "bin"). It loads the command
 * (main.ts) with a dynamic import so that a missing optional peer, above all
 * `pg`, which every command needs, is reported as the package to install,
 * in one line with exit code 2, instead of a module-resolution stack trace.
 */
import { EXIT } from './cli-error.ts';
import { missingPeer } from './missing-peer.ts';

try {
  await import('./main.ts');
} catch (err) {
  const peer = missingPeer(err);
  if (peer === undefined) throw err;
  process.stderr.write(`txbox: this command needs the package "${peer}", an optional peer of txbox; install it next to txbox: npm install ${peer}\n`);
  process.exitCode = EXIT.usage;
}
