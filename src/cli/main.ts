#!/usr/bin/env node
/**
 * The `txbox` command. The only place (with config.ts) that reads argv and
 * process.env.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { CliError, EXIT } from './cli-error.ts';
import { GLOBAL_HELP, GLOBAL_OPTIONS, type Command } from './command.ts';
import { ENV_HELP, loadConfig } from './config.ts';
import { jsonLogger } from './json-logger.ts';
import { ConfigError } from '../core/errors.ts';
import { dashboardCommand } from './commands/dashboard.ts';
import { demoCommand } from './commands/demo.ts';
import { inboxCommand } from './commands/inbox.ts';
import { migrateCommand } from './commands/migrate.ts';
import { parkedCommand } from './commands/parked.ts';
import { pruneCommand } from './commands/prune.ts';
import { relayCommand } from './commands/relay.ts';
import { replayCommand } from './commands/replay.ts';
import { secretCommand } from './commands/secret.ts';
import { statusCommand } from './commands/status.ts';
import { tortureCommand } from './commands/torture.ts';
import { walCommand } from './commands/wal.ts';
import { exitWhenDone } from './exit-guard.ts';

const COMMANDS: Command[] = [migrateCommand, relayCommand, statusCommand, parkedCommand, replayCommand, pruneCommand, inboxCommand, dashboardCommand, secretCommand, walCommand, demoCommand, tortureCommand];

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

function mainHelp(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return `txbox ${version()}: the transactional outbox relay and tools

Usage: txbox <command> [options]

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`).join('\n')}

Run txbox <command> --help for a command's options.

${GLOBAL_HELP}

${ENV_HELP}

Exit codes: 0 ok, 1 failed, 2 bad usage or configuration, 3 database unreachable or not migrated, 130 interrupted.`;
}

/** Bad flags or arguments: the message, then the command's usage lines. */
class UsageError extends CliError {
  constructor(
    message: string,
    readonly command: Command,
  ) {
    super(message);
  }
}

/** The "Usage:" lines at the head of a command's help. */
function usage(command: Command): string {
  return command.help.split('\n\n')[0]!;
}

type ParsedArgs = { values: Record<string, string | boolean | string[] | undefined>; positionals: string[] };

/** parseArgs, with its errors (unknown option, missing value) turned into one plain line naming the flag. */
function parseCommandArgs(command: Command, args: string[]): ParsedArgs {
  const options = { ...GLOBAL_OPTIONS, ...command.options };
  let parsed: ParsedArgs;
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true }) as ParsedArgs;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const flag = /'(--?[^' ]+)/.exec((err as Error).message)?.[1] ?? '';
    if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') throw new UsageError(`unknown option ${flag}`, command);
    if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
      const long = flag.startsWith('--') ? flag : (Object.entries(options).find(([, o]) => 'short' in o && `-${o.short}` === flag)?.[0] ?? flag);
      const name = long.startsWith('-') ? long : `--${long}`;
      const isFlag = Object.entries(options).some(([key, o]) => `--${key}` === name && o.type === 'boolean');
      throw new UsageError(isFlag ? `${name} takes no value` : `${name} needs a value, e.g. ${name} ${EXAMPLES[name] ?? 'VALUE'}`, command);
    }
    throw new UsageError((err as Error).message, command);
  }
  // An empty value is an unset shell variable far more often than a choice: read as "no filter" it would widen
  // a destructive command to everything (parked discard --all --destination ""), or bind a listener to every interface.
  for (const [key, value] of Object.entries(parsed.values)) {
    if ([value].flat().some((v) => typeof v === 'string' && v.trim() === '')) {
      const name = `--${key}`;
      throw new UsageError(`${name} has an empty value (an unset shell variable?); give one, e.g. ${name} ${EXAMPLES[name] ?? 'VALUE'}, or leave the flag out`, command);
    }
  }
  return parsed;
}

/** Example values for the "needs a value" message. */
const EXAMPLES: Record<string, string> = {
  '--older-than': '7d',
  '--keep-published': '24h',
  '--crash-relay-every': '2s',
  '--database-url': 'postgres://user@localhost:5432/app',
  '--transport': 'http',
  '--endpoint': 'orders=https://example.com/hooks/orders',
  '--schema': 'txbox',
  '--table': 'outbox',
  '--log-level': 'info',
  '--id': '0190f1e2-7c1a-7b3e-9f00-2a1b3c4d5e6f',
};

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  const out = (text: string): void => void process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    out(mainHelp());
    return name ? EXIT.ok : EXIT.usage;
  }
  if (name === '--version' || name === '-v') {
    out(version());
    return EXIT.ok;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (!command) {
    process.stderr.write(`txbox: unknown command ${JSON.stringify(name)}; run txbox --help\n`);
    return EXIT.usage;
  }
  const controller = new AbortController();
  let signals = 0;
  const onSignal = (sig: NodeJS.Signals): void => {
    signals++;
    // A one-shot command does not watch the signal: leave now (its open transaction rolls back on the server).
    if (signals > 1 || command.stopsOnSignal !== true) {
      if (command.stopsOnSignal !== true) process.stderr.write(`txbox ${command.name}: interrupted (${sig})\n`);
      process.exit(sig === 'SIGINT' ? EXIT.interrupted : EXIT.failure);
    }
    controller.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const parsed = parseCommandArgs(command, rest);
    if (parsed.values.help) {
      out(`${command.help}\n\n${GLOBAL_HELP}`);
      return EXIT.ok;
    }
    const allowed = command.positionals ?? [];
    if (parsed.positionals.length > allowed.length) {
      const extra = parsed.positionals[allowed.length]!;
      const takes = allowed.length === 0 ? `${name} takes no positional arguments` : `${name} takes at most ${allowed.join(' ')}`;
      throw new UsageError(`unexpected argument ${JSON.stringify(extra)}: ${takes} (a value with spaces must be quoted, e.g. --endpoint "orders=https://example.com/a b")`, command);
    }
    const config = loadConfig(parsed.values, process.env);
    const logger = jsonLogger(config.logLevel);
    return await command.run({ flags: parsed.values, positionals: parsed.positionals, config, logger, out, signal: controller.signal });
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`txbox ${name}: ${err.message}; run txbox ${name} --help for all options\n\n${usage(err.command)}\n`);
      return EXIT.usage;
    }
    if (err instanceof CliError) {
      process.stderr.write(`txbox ${name}: ${err.message}\n`);
      return err.exitCode;
    }
    if (err instanceof ConfigError) {
      process.stderr.write(`txbox ${name}: ${err.message}\n`);
      return EXIT.usage;
    }
    process.stderr.write(`txbox ${name}: ${(err as Error).message ?? String(err)}\n`);
    return EXIT.failure;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/** How long a finished command's process may take to end by itself (src/cli/exit-guard.ts). */
const EXIT_GRACE_MS = 10_000;

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    exitWhenDone(code, EXIT_GRACE_MS);
  },
  (err: unknown) => {
    process.stderr.write(`txbox: ${String(err)}\n`);
    process.exitCode = EXIT.failure;
    exitWhenDone(EXIT.failure, EXIT_GRACE_MS);
  },
);
