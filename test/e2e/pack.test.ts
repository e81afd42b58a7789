/**
 * The package as users get it: packs this repository with `npm pack` (from a
 * copy, so that prepack's rebuild of dist/ and its temporary package.json do
 * not disturb tests running beside this one), installs the tarball into
 * scratch apps in a temp folder (`npm install --prefer-offline`: the npm cache
 * is warm from the repository's own install; only the registry is reached),
 * and runs the README's quick start from there: `npx txbox migrate`, an
 * enqueue with `pg` and one with Kysely, a relay posting to a receiver that
 * verifies signatures, `npx txbox status`, and `txbox dashboard` serving its
 * page and script from the installed files. The app is typechecked with
 * `tsc --strict` on the TypeScript this repository pins and on the oldest one
 * the README claims; every subpath is imported (and required) in an app that
 * has only that subpath's peers; publint and attw check the tarball.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { DATABASE_URL, uniqueSchema } from '../helpers/databases.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const FIXTURE = fileURLToPath(new URL('../fixtures/pack-app/', import.meta.url));
/** What the build and the pack need from the repository; the rest (tests, benches, .git) stays out of the copy. */
const PACK_INPUTS = ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json', 'src', 'sql', 'docs', 'scripts/pack', 'ops', 'README.md', 'CHANGELOG.md'];
/** The oldest TypeScript the README claims for consumers of the emitted types. */
const OLDEST_TYPESCRIPT = '5.0.4';

/** Each subpath and the only peers installed beside it. */
const SUBPATHS: Record<string, readonly string[]> = {
  txbox: [],
  'txbox/http': [],
  'txbox/testing': [],
  'txbox/postgres': ['pg'],
  'txbox/testing/conformance': ['pg'],
  'txbox/pglite': ['@electric-sql/pglite'],
  'txbox/mysql': ['mysql2'],
  'txbox/firestore': ['@google-cloud/firestore'],
  'txbox/kafka': ['kafkajs'],
  'txbox/rabbitmq': ['amqplib'],
  'txbox/nats': ['@nats-io/transport-node', '@nats-io/jetstream'],
  'txbox/redis': ['ioredis'],
  'txbox/dashboard': [],
  'txbox/pubsub': ['@google-cloud/pubsub'],
  // SnsTransport loads @aws-sdk/client-sns only when it starts: the subpath imports with client-sqs alone.
  'txbox/sqs': ['@aws-sdk/client-sqs'],
  'txbox/otel': ['@opentelemetry/api'],
  'txbox/prometheus': ['prom-client'],
  'txbox/health': [],
};

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

function run(cmd: string, args: readonly string[], cwd: string, env: Record<string, string> = {}): Promise<Run> {
  const cleanEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TXBOX_') && !k.startsWith('npm_') && k !== 'NODE_OPTIONS'));
  return new Promise((resolve) => {
    execFile(cmd, [...args], { cwd, env: { ...cleanEnv, ...env }, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

function ok(r: Run, what: string): Run {
  assert.equal(r.code, 0, `${what} failed (exit ${r.code}):\n${r.stdout.slice(-3000)}\n${r.stderr.slice(-3000)}`);
  return r;
}

/** The version of a package installed in this repository: the scratch apps take the same one, which the npm cache holds. */
function installedVersion(name: string): string {
  return (JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
}

const npmInstall = (cwd: string, specs: readonly string[]) =>
  run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', ...specs], cwd);

function scratchApp(dir: string): string {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'scratch-app', private: true, type: 'module' }, null, 2));
  return dir;
}

describe('npm pack: the tarball installs and the quick start runs from it', { timeout: 600_000 }, () => {
  let work: string;
  let tarball: string;
  let app: string;
  /** The scratch apps of the per-subpath test, by their space-separated peers ('' = none). */
  const peerApps = new Map<string, string>();
  const schema = uniqueSchema('pack');
  const secret = `whsec_${Buffer.from('txbox-pack-test-secret-32-bytes!').toString('base64')}`;
  const appEnv = () => ({ TXBOX_DATABASE_URL: DATABASE_URL, TXBOX_SCHEMA: schema, TXBOX_WEBHOOK_SECRET: secret });

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'txbox-pack-'));
    const copy = join(work, 'repo');
    for (const entry of PACK_INPUTS) cpSync(join(ROOT, entry), join(copy, entry), { recursive: true });
    symlinkSync(realpathSync(join(ROOT, 'node_modules')), join(copy, 'node_modules'), 'dir');
    ok(await run('npm', ['pack', '--loglevel=error', '--pack-destination', work], copy), 'npm pack');
    const tgz = readdirSync(work).find((f) => f.endsWith('.tgz'));
    assert.ok(tgz, 'npm pack wrote a tarball');
    tarball = join(work, tgz);
    assert.equal(readFileSync(join(copy, 'package.json'), 'utf8'), readFileSync(join(ROOT, 'package.json'), 'utf8'), 'postpack put package.json back');
    app = scratchApp(join(work, 'app'));
    for (const f of ['quickstart.ts', 'types.ts', 'tsconfig.json']) cpSync(join(FIXTURE, f), join(app, f));
    ok(
      await npmInstall(app, [
        tarball,
        `pg@${installedVersion('pg')}`,
        `kysely@${installedVersion('kysely')}`,
        `typescript@${installedVersion('typescript')}`,
        `@types/node@${installedVersion('@types/node')}`,
        `@types/pg@${installedVersion('@types/pg')}`,
        `typescript-oldest@npm:typescript@${OLDEST_TYPESCRIPT}`,
      ]),
      'npm install of the tarball into the scratch app',
    );
  });

  after(async () => {
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
    await pool.end();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('ships the built code, the SQL, the docs and ops/ (alert rules, dashboard), and no sources, tests or src paths', () => {
    const pkg = join(app, 'node_modules', 'txbox');
    const files = readdirSync(pkg, { recursive: true }).map(String);
    for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/cli/main.js', 'sql/postgres/001_outbox.sql', 'README.md', 'CHANGELOG.md', 'docs/guarantees.md', 'ops/prometheus/txbox-alerts.yml', 'ops/grafana/txbox-dashboard.json']) {
      assert.ok(files.includes(f), `the tarball holds ${f}`);
    }
    assert.deepEqual(files.filter((f) => /^(src|test|bench|scripts)(\/|$)/.test(f)), [], 'no sources, tests, benches or scripts');
    assert.deepEqual(files.filter((f) => f.startsWith('docs/images')), [], 'no screenshots (docs/images stays in the repository)');
    const manifest = readFileSync(join(pkg, 'package.json'), 'utf8');
    const targets = JSON.stringify((JSON.parse(manifest) as { exports: unknown }).exports);
    assert.doesNotMatch(targets, /src\/|txbox-source/, 'no export condition a user can set leads to src/');
    const declarations = files.filter((f) => f.endsWith('.d.ts'));
    const tsSpecifiers = declarations.filter((f) => /from ['"]\.{1,2}\/[^'"]*\.ts['"]|import\(['"]\.{1,2}\/[^'"]*\.ts['"]\)/.test(readFileSync(join(pkg, f), 'utf8')));
    assert.deepEqual(tsSpecifiers, [], 'declarations import .js files, not .ts ones');
    const map = JSON.parse(readFileSync(join(pkg, 'dist/index.js.map'), 'utf8')) as { sourcesContent?: unknown[] };
    assert.ok(map.sourcesContent?.length, 'source maps carry their sources (src/ is not shipped)');
  });

  it('runs the README quick start: txbox migrate, enqueue with pg and Kysely, a relay to a verifying receiver, txbox status', async () => {
    const migrate = ok(await run('npx', ['--no', 'txbox', 'migrate'], app, appEnv()), 'npx txbox migrate');
    assert.match(migrate.stdout, new RegExp(`applied 001_outbox\\.sql.* to "${schema}"\\."outbox"`));
    // The app's build is its typecheck on the TypeScript this repository pins: tsconfig.json has strict and skipLibCheck false.
    ok(await run(process.execPath, [join(app, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json', '--strict'], app), `tsc ${installedVersion('typescript')} --strict (the app's build)`);
    const quick = ok(await run(process.execPath, ['build/quickstart.js'], app, appEnv()), 'the quick start');
    const result = JSON.parse(quick.stdout.trim().split('\n').at(-1)!) as {
      enqueued: string[];
      received: { id: string; verified: boolean; payload: { orderId: string } }[];
      unsignedStatus: number;
    };
    assert.equal(result.enqueued.length, 2);
    assert.deepEqual(new Set(result.received.map((r) => r.id)), new Set(result.enqueued), 'both events (pg and Kysely) arrived');
    assert.ok(result.received.every((r) => r.verified), 'every delivery carried a valid signature');
    assert.deepEqual(result.received.map((r) => r.payload.orderId).sort(), ['order-kysely', 'order-pg']);
    assert.equal(result.unsignedStatus, 401, 'the receiver refuses an unsigned request');
    const status = ok(await run('npx', ['--no', 'txbox', 'status', '--json'], app, appEnv()), 'npx txbox status --json');
    const s = JSON.parse(status.stdout) as { destinations: { pending: number; parked: number }[]; inFlight: number };
    assert.deepEqual(
      { pending: s.destinations.reduce((a, d) => a + d.pending, 0), parked: s.destinations.reduce((a, d) => a + d.parked, 0), inFlight: s.inFlight },
      { pending: 0, parked: 0, inFlight: 0 },
      `status: ${status.stdout}`,
    );
    const text = ok(await run('npx', ['--no', 'txbox', 'status'], app, appEnv()), 'npx txbox status');
    assert.match(text.stdout, /pending 0\b/);
  });

  it('`txbox dashboard` serves its page and its script from the installed package (no build step at run time)', async () => {
    ok(await run('npx', ['--no', 'txbox', 'migrate'], app, appEnv()), 'npx txbox migrate');
    const cleanEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('TXBOX_') && !k.startsWith('npm_') && k !== 'NODE_OPTIONS'));
    const child = spawn(join(app, 'node_modules', '.bin', 'txbox'), ['dashboard', '--no-auth', '--port', '0', '--log-level', 'warn'], { cwd: app, env: { ...cleanEnv, ...appEnv() }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 60_000;
      while (!/http:\/\/\S+\//.test(out) && child.exitCode === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      const url = /(http:\/\/\S+\/)/.exec(out)?.[1] ?? assert.fail(`txbox dashboard did not start:\n${out}\n${err}`);
      const page = await fetch(url);
      assert.equal(page.status, 200);
      const html = await page.text();
      assert.match(html, /<script type="module" src="assets\/dashboard.js">/);
      const script = await fetch(new URL('assets/dashboard.js', url));
      assert.equal(script.status, 200);
      assert.match(await script.text(), /new EventSource\('api\/events'\)/);
      const css = await fetch(new URL('assets/dashboard.css', url));
      assert.equal(css.status, 200);
    } finally {
      child.kill('SIGTERM');
    }
    assert.equal(await exited, 0, `txbox dashboard exits 0 on SIGTERM:\n${err}`);
  });

  it(`typechecks the app with tsc --strict on TypeScript ${OLDEST_TYPESCRIPT}, the oldest the README claims`, async () => {
    // skipLibCheck: the types of pg and @types/node installed here need a newer TypeScript (their claim, not txbox's). txbox's
    // declarations still count: a re-export that does not resolve leaves the app's imports without their names.
    const oldest = join(app, 'node_modules', 'typescript-oldest', 'bin', 'tsc');
    ok(await run(process.execPath, [oldest, '-p', 'tsconfig.json', '--noEmit', '--strict', '--skipLibCheck'], app), `tsc ${OLDEST_TYPESCRIPT}`);
  });

  it('imports and requires every subpath with only its own peers installed', async () => {
    const groups = new Map<string, string[]>();
    for (const [subpath, peers] of Object.entries(SUBPATHS)) {
      const key = peers.join(' ');
      groups.set(key, [...(groups.get(key) ?? []), subpath]);
    }
    const failures: string[] = [];
    await Promise.all(
      [...groups].map(async ([peers, subpaths], i) => {
        const dir = scratchApp(join(work, `peers-${i}`));
        peerApps.set(peers, dir);
        const specs = peers ? peers.split(' ').map((p) => `${p}@${installedVersion(p)}`) : [];
        ok(await npmInstall(dir, [tarball, ...specs]), `npm install of the tarball with ${peers || 'no peers'}`);
        for (const subpath of subpaths) {
          const esm = await run(process.execPath, ['--input-type=module', '-e', `const m = await import('${subpath}'); if (Object.keys(m).length === 0) throw new Error('no exports');`], dir);
          if (esm.code !== 0) failures.push(`import('${subpath}') with ${peers || 'no peers'}: ${esm.stderr.trim().split('\n').slice(0, 6).join(' | ')}`);
          const cjs = await run(process.execPath, ['--no-warnings', '-e', `const m = require('${subpath}'); if (Object.keys(m).length === 0) throw new Error('no exports');`], dir);
          if (cjs.code !== 0) failures.push(`require('${subpath}') with ${peers || 'no peers'}: ${cjs.stderr.trim().split('\n').slice(0, 6).join(' | ')}`);
        }
      }),
    );
    assert.deepEqual(failures, []);
  });

  it('the txbox command without pg says which package to install, instead of a stack trace', async () => {
    let dir = peerApps.get('');
    if (dir === undefined) {
      dir = scratchApp(join(work, 'cli-without-pg'));
      ok(await npmInstall(dir, [tarball]), 'npm install of the tarball alone');
    }
    const help = await run(join(dir, 'node_modules', '.bin', 'txbox'), ['--help'], dir);
    assert.equal(help.code, 2, `exit code: ${help.stderr}`);
    assert.match(help.stderr, /needs the package "pg".*npm install pg/);
    assert.doesNotMatch(help.stderr, /ERR_MODULE_NOT_FOUND|node:internal|\n\s+at /);
  });

  it('passes publint and arethetypeswrong (ESM only: node16 from ESM, bundler)', async () => {
    ok(await run(process.execPath, [join(ROOT, 'node_modules', 'publint', 'src', 'cli.js'), 'run', tarball, '--strict'], work), 'publint');
    ok(await run(process.execPath, [join(ROOT, 'node_modules', '@arethetypeswrong', 'cli', 'dist', 'index.js'), tarball, '--profile', 'esm-only'], work), 'attw');
  });
});
