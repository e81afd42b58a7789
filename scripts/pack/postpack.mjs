#!/usr/bin/env node
/** Puts back the package.json that prepack.mjs stripped of the `txbox-source` condition. */
import { existsSync, renameSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const backup = join(root, 'package.json.prepack');
if (existsSync(backup)) renameSync(backup, join(root, 'package.json'));
