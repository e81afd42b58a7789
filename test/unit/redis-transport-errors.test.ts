/**
 * How RedisTransport classifies what Redis answers, with a stand-in ioredis
 * client (no server): per-event outcomes in input order, retriable or
 * permanent, no arguments (payloads, passwords) in messages or causes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { inspect } from 'node:util';
import { ReplyError, type Redis } from 'ioredis';
import { ConfigError, TransportError, uuidv7, type OutboxEvent, type PublishOutcome } from 'txbox';
import { RedisTransport, type RedisTransportOptions } from 'txbox/redis';

type Reply = Error | string | null;
interface Sent {
  readonly stream: string;
  readonly args: readonly (string | number)[];
}

/** A client that answers each XADD with `answer(sent)`, or lets exec() reject or hang. */
function stubClient(answer: (sent: Sent) => Reply, exec?: () => Promise<never>, ping: () => Promise<string> = async () => 'PONG') {
  const sent: Sent[] = [];
  const client = {
    status: 'ready',
    isCluster: false,
    options: { host: 'stub', port: 6379 },
    ping,
    on() {},
    off() {},
    once() {},
    pipeline() {
      const batch: Sent[] = [];
      const p = {
        xadd(stream: string, ...args: (string | number)[]) {
          batch.push({ stream, args });
          sent.push({ stream, args });
          return p;
        },
        exec: exec ?? (async () => batch.map((s) => answerOf(answer(s)))),
      };
      return p;
    },
  };
  return { client: client as unknown as Redis, sent };
}

function answerOf(reply: Reply): [Error | null, unknown] {
  return reply instanceof Error ? [reply, null] : [null, reply];
}

function replyError(message: string): Error {
  // ioredis attaches the command and its arguments to reply errors.
  return Object.assign(new ReplyError(message) as Error, { command: { name: 'xadd', args: ['k', '*', 'payload', '{"card":"4111-SECRET"}'] } });
}

function event(n: number, destination = 'orders', payload: unknown = { n, card: '4111-SECRET' }): OutboxEvent {
  return { id: uuidv7(), type: 'T', aggregateType: 'A', aggregateId: String(n), key: `A:${n}`, destination, payload, headers: {}, occurredAt: new Date(), version: n };
}

async function publish(answer: (sent: Sent) => Reply, events: OutboxEvent[], options: Partial<RedisTransportOptions> = {}): Promise<{ outcomes: PublishOutcome[]; sent: Sent[] }> {
  const { client, sent } = stubClient(answer);
  const transport = new RedisTransport({ client, ...options });
  await transport.start(new AbortController().signal);
  const outcomes = await transport.publish(events, new AbortController().signal);
  await transport.close();
  return { outcomes, sent };
}

function failure(outcome: PublishOutcome | undefined): TransportError {
  assert.ok(outcome && !outcome.ok, 'expected a failed outcome');
  assert.ok(outcome.error instanceof TransportError);
  assert.doesNotMatch(inspect(outcome.error, { depth: 5 }), /SECRET/, 'no command arguments in the error or its cause');
  return outcome.error;
}

describe('RedisTransport error classification', () => {
  it('sends one XADD per event to the mapped stream, with MAXLEN ~ when set', async () => {
    const { outcomes, sent } = await publish(() => '1-0', [event(1), event(2, 'payments')], { streams: { payments: 'pay:stream' }, maxLen: 500 });
    assert.deepEqual(outcomes, [{ ok: true }, { ok: true }]);
    assert.deepEqual(
      sent.map((s) => [s.stream, ...s.args.slice(0, 5)]),
      [
        ['txbox:orders', 'MAXLEN', '~', '500', '*', 'id'],
        ['pay:stream', 'MAXLEN', '~', '500', '*', 'id'],
      ],
    );
  });

  it('WRONGTYPE is permanent and names the stream and destination; other events of the call are unaffected', async () => {
    const { outcomes } = await publish((s) => (s.stream === 'txbox:plain' ? replyError('WRONGTYPE Operation against a key holding the wrong kind of value') : '1-0'), [
      event(1),
      event(2, 'plain'),
      event(3),
    ]);
    assert.equal(outcomes[0]!.ok, true);
    const error = failure(outcomes[1]);
    assert.equal(error.kind, 'permanent');
    assert.match(error.message, /"txbox:plain".*destination "plain".*WRONGTYPE.*not a stream/);
    assert.equal(outcomes[2]!.ok, true);
  });

  const retriable: [string, RegExp, number | undefined][] = [
    ["OOM command not allowed when used memory > 'maxmemory'.", /OOM.*maxmemory/, 5000],
    ['MISCONF Redis is configured to save RDB snapshots, but it is currently not able to persist on disk.', /MISCONF/, 5000],
    ['LOADING Redis is loading the dataset in memory', /LOADING.*loading/, 1000],
    ['BUSY Redis is busy running a script.', /BUSY/, 1000],
    ['TRYAGAIN Multiple keys request during rehashing of slot', /TRYAGAIN/, undefined],
    ['CLUSTERDOWN The cluster is down', /CLUSTERDOWN/, 1000],
    ["READONLY You can't write against a read only replica.", /READONLY.*replica/, undefined],
    ['MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to no.', /MASTERDOWN/, undefined],
    ['NOREPLICAS Not enough good replicas to write.', /NOREPLICAS/, undefined],
    ['MOVED 3999 127.0.0.1:6381', /MOVED.*Cluster is not supported/, undefined],
    ['ERR max number of clients reached', /max number of clients/, undefined],
  ];
  const destinationDown: [string, RegExp][] = [
    ['NOAUTH Authentication required.', /NOAUTH.*password/],
    ['WRONGPASS invalid username-password pair or user is disabled.', /WRONGPASS.*url, username or password/],
    ["NOPERM this user has no permissions to run the 'xadd' command", /NOPERM.*\+xadd/],
  ];
  for (const [reply, text] of destinationDown) {
    it(`${reply.split(' ')[0]} is destination-down (the relay pauses the destination instead of parking)`, async () => {
      const { outcomes } = await publish(() => replyError(reply), [event(1)]);
      const error = failure(outcomes[0]);
      assert.equal(error.kind, 'destination-down');
      assert.match(error.message, text);
    });
  }

  it('an unreachable Redis is destination-down: refused, unknown host, offline and reconnecting', async () => {
    const errors: Error[] = [
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6390'), { code: 'ECONNREFUSED' }),
      Object.assign(new Error('getaddrinfo ENOTFOUND redis.invalid'), { code: 'ENOTFOUND' }),
      Object.assign(new Error('getaddrinfo EAI_AGAIN redis.internal'), { code: 'EAI_AGAIN' }),
      new Error("Stream isn't writeable and enableOfflineQueue options is false"),
    ];
    for (const err of errors) {
      const { outcomes } = await publish(() => err, [event(1)]);
      assert.equal(failure(outcomes[0]).kind, 'destination-down', err.message);
    }
  });
  for (const [reply, text, retryAfterMs] of retriable) {
    it(`${reply.split(' ')[0]} is retriable${retryAfterMs ? ` after ${retryAfterMs} ms` : ''}`, async () => {
      const { outcomes } = await publish(() => replyError(reply), [event(1)]);
      const error = failure(outcomes[0]);
      assert.equal(error.kind, 'retriable');
      assert.match(error.message, text);
      assert.equal(error.retryAfterMs, retryAfterMs);
    });
  }

  it('a command cut off in flight is destination-down (about the connection, not the event): reset, closed, max retries, timeouts', async () => {
    const errors: Error[] = [
      Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
      new Error('Connection is closed.'),
      Object.assign(new Error('Reached the max retries per request limit (which is 0). Refer to "maxRetriesPerRequest" option for details.'), { name: 'MaxRetriesPerRequestError' }),
      new Error('Command timed out'),
    ];
    for (const err of errors) {
      const { outcomes } = await publish(() => err, [event(1)]);
      const error = failure(outcomes[0]);
      assert.equal(error.kind, 'destination-down', err.message);
      assert.match(error.message, /XADD to stream "txbox:orders" \(destination "orders"\) at redis:\/\/stub:6379 (failed|got no reply)/);
    }
  });

  it('an entry over maxMessageBytes and an unserializable payload fail permanently before sending', async () => {
    const { outcomes, sent } = await publish(() => '1-0', [event(1, 'orders', { blob: 'x'.repeat(5000) }), event(2, 'orders', { n: 1n }), event(3)], { maxMessageBytes: 4096 });
    const big = failure(outcomes[0]);
    assert.equal(big.kind, 'permanent');
    assert.match(big.message, /is \d+ bytes, over maxMessageBytes \(4096\)/);
    const bigint = failure(outcomes[1]);
    assert.equal(bigint.kind, 'permanent');
    assert.match(bigint.message, /cannot be serialized to JSON/);
    assert.equal(outcomes[2]!.ok, true);
    assert.equal(sent.length, 1, 'only the valid event was sent');
  });

  it('a pipeline rejected as the connection closed makes every event of the call destination-down', async () => {
    const { client } = stubClient(
      () => '1-0',
      async () => {
        throw new Error('Connection is closed.');
      },
    );
    const transport = new RedisTransport({ client });
    const outcomes = await transport.publish([event(1), event(2)], new AbortController().signal);
    assert.equal(outcomes.length, 2);
    for (const o of outcomes) assert.equal(failure(o).kind, 'destination-down');
    await transport.close();
  });

  it('no reply within commandTimeoutMs is destination-down; an aborted signal is retriable', async () => {
    const { client } = stubClient(() => '1-0', () => new Promise<never>(() => {}));
    const transport = new RedisTransport({ client, commandTimeoutMs: 50 });
    const started = performance.now();
    const timedOut = failure((await transport.publish([event(1)], new AbortController().signal))[0]);
    assert.equal(timedOut.kind, 'destination-down');
    assert.match(timedOut.message, /no reply within 50 ms \(commandTimeoutMs\)/);
    assert.ok(performance.now() - started < 1000);
    const controller = new AbortController();
    controller.abort();
    const aborted = failure((await transport.publish([event(2)], controller.signal))[0]);
    assert.equal(aborted.kind, 'retriable');
    assert.match(aborted.message, /cancelled/);
    await transport.close();
  });

  it("start() names the setting when the caller's client is refused", async () => {
    const { client } = stubClient(
      () => '1-0',
      undefined,
      async () => {
        throw replyError("NOPERM this user has no permissions to run the 'ping' command");
      },
    );
    const transport = new RedisTransport({ client });
    await assert.rejects(transport.start(), (e: unknown) => e instanceof ConfigError && e.field === 'client' && /\+ping/.test(e.message));
    const outcome = (await transport.publish([event(1)], new AbortController().signal))[0];
    assert.match(failure(outcome).message, /could not start: client: /);
    await transport.close();
  });
});
