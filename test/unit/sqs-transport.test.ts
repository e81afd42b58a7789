/**
 * The SQS and SNS transports over stubbed SDK clients (pure): the request
 * mapping (batches of 10 and of maxBatchBytes, FIFO group and deduplication
 * ids, attributes), per-entry results mapped to per-event outcomes, the
 * classification of request errors (retriable, permanent, destination-down),
 * a permanent request failure retried one entry per request, oversize and
 * unroutable events, aborts, and option validation.
 *
 * SNS is tested only this way: no SNS emulator runs in this project's test
 * environment (see docs/transports/sqs.md).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, TransportError, uuidv7, type OutboxEvent, type PublishOutcome } from 'txbox';
import { classifyEntryError, classifyRequestError, SnsTransport, SqsTransport } from 'txbox/sqs';

const QUEUE = 'https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo';
const STD = 'https://sqs.eu-west-1.amazonaws.com/123456789012/audit';
const TOPIC = 'arn:aws:sns:eu-west-1:123456789012:orders.fifo';

const ev = (key: string, over: Partial<OutboxEvent> = {}): OutboxEvent => ({
  id: uuidv7(),
  type: 'OrderCreated',
  aggregateType: 'Order',
  aggregateId: key,
  key: `Order:${key}`,
  destination: 'orders',
  payload: { key },
  headers: {},
  occurredAt: new Date(),
  version: 1,
  ...over,
});

type Answer = (input: Record<string, unknown>) => unknown;

/** A stand-in SDK client: records each command's name and input, answers with `answer` (throws what it throws). */
function stubClient(answer: Answer): { client: { send(command: unknown, options?: { abortSignal?: AbortSignal }): Promise<unknown>; destroy(): void }; calls: { name: string; input: Record<string, unknown> }[] } {
  const calls: { name: string; input: Record<string, unknown> }[] = [];
  return {
    calls,
    client: {
      async send(command, options) {
        const c = command as { constructor: { name: string }; input: Record<string, unknown> };
        calls.push({ name: c.constructor.name, input: c.input });
        options?.abortSignal?.throwIfAborted();
        return answer(c.input);
      },
      destroy() {},
    },
  };
}

/** Answers a batch with every entry stored. */
const allOk: Answer = (input) => ({ Successful: ((input['Entries'] ?? input['PublishBatchRequestEntries']) as { Id: string }[]).map((e) => ({ Id: e.Id })), Failed: [] });

function awsError(name: string, status: number, fault: 'client' | 'server' = status >= 500 ? 'server' : 'client'): Error {
  return Object.assign(new Error(`${name} happened`), { name, $fault: fault, $metadata: { httpStatusCode: status } });
}

function sqsWith(answer: Answer, extra: Record<string, unknown> = {}) {
  const stub = stubClient(answer);
  const transport = new SqsTransport({ queues: { orders: QUEUE, audit: STD }, client: stub.client as never, ...extra });
  return { transport, calls: stub.calls };
}

const signal = (): AbortSignal => new AbortController().signal;
const kinds = (outcomes: PublishOutcome[]): string[] => outcomes.map((o) => (o.ok ? 'ok' : o.error.kind));

describe('SqsTransport request mapping', () => {
  it('sends 23 events of one FIFO queue in batches of 10, 10 and 3 with group = key and deduplication id = event id', async () => {
    const { transport, calls } = sqsWith(allOk);
    const events = Array.from({ length: 23 }, (_, i) => ev(`k${i}`));
    const outcomes = await transport.publish(events, signal());
    assert.deepEqual(kinds(outcomes), events.map(() => 'ok'));
    assert.deepEqual(calls.map((c) => (c.input['Entries'] as unknown[]).length), [10, 10, 3]);
    const first = (calls[0]!.input['Entries'] as Record<string, unknown>[])[0]!;
    assert.equal(calls[0]!.name, 'SendMessageBatchCommand');
    assert.equal(calls[0]!.input['QueueUrl'], QUEUE);
    assert.equal(first['MessageGroupId'], 'Order:k0');
    assert.equal(first['MessageDeduplicationId'], events[0]!.id);
    assert.equal(first['MessageBody'], '{"key":"k0"}');
    assert.ok((first['MessageAttributes'] as Record<string, unknown>)['txbox-envelope']);
  });

  it('a standard queue gets neither group nor deduplication id; each queue gets its own batches', async () => {
    const { transport, calls } = sqsWith(allOk);
    await transport.publish([ev('a'), ev('b', { destination: 'audit' })], signal());
    const byQueue = new Map(calls.map((c) => [c.input['QueueUrl'], (c.input['Entries'] as Record<string, unknown>[])[0]!]));
    assert.equal(byQueue.get(STD)!['MessageGroupId'], undefined);
    assert.equal(byQueue.get(STD)!['MessageDeduplicationId'], undefined);
    assert.equal(byQueue.get(QUEUE)!['MessageGroupId'], 'Order:a');
  });

  it('splits batches at maxBatchBytes', async () => {
    const { transport, calls } = sqsWith(allOk, { maxMessageBytes: 4096, maxBatchBytes: 4096 });
    const events = Array.from({ length: 6 }, (_, i) => ev(`k${i}`, { payload: { pad: 'x'.repeat(1500) } }));
    assert.deepEqual(kinds(await transport.publish(events, signal())), events.map(() => 'ok'));
    assert.deepEqual(calls.map((c) => (c.input['Entries'] as unknown[]).length), [2, 2, 2]);
  });

  it('maps each failed entry to its event: throttled retriable, invalid content permanent, KMS key unusable destination-down; the rest ok', async () => {
    const { transport } = sqsWith((input) => {
      const entries = input['Entries'] as { Id: string }[];
      return {
        Successful: [{ Id: entries[0]!.Id }],
        Failed: [
          { Id: entries[1]!.Id, Code: 'ThrottlingException', SenderFault: false, Message: 'slow down' },
          { Id: entries[2]!.Id, Code: 'InvalidMessageContents', SenderFault: true, Message: 'bad chars' },
          { Id: entries[3]!.Id, Code: 'KmsDisabled', SenderFault: true, Message: 'key disabled' },
          { Id: entries[4]!.Id, Code: 'Weird', SenderFault: false, Message: '?' },
        ],
      };
    });
    const outcomes = await transport.publish([ev('a'), ev('b'), ev('c'), ev('d'), ev('e'), ev('f')], signal());
    assert.deepEqual(kinds(outcomes), ['ok', 'retriable', 'permanent', 'destination-down', 'retriable', 'retriable']);
    assert.match(!outcomes[2]!.ok ? outcomes[2]!.error.message : '', /orders\.fifo.*InvalidMessageContents: bad chars.*parked/);
    assert.match(!outcomes[5]!.ok ? outcomes[5]!.error.message : '', /did not list this entry/);
  });

  it('a queue that does not exist, refused credentials and a refused connection are destination-down; throttling and 5xx retriable', async () => {
    const cases: [Error, string, RegExp][] = [
      [awsError('QueueDoesNotExist', 400), 'destination-down', /does not exist/],
      [awsError('AccessDenied', 403), 'destination-down', /credentials/],
      [awsError('InvalidClientTokenId', 403), 'destination-down', /credentials/],
      [Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' }), 'destination-down', /endpoint/],
      [awsError('RequestThrottled', 400), 'retriable', /retriable/],
      [awsError('InternalError', 500), 'retriable', /retriable/],
      [Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }), 'retriable', /retriable/],
    ];
    for (const [err, kind, message] of cases) {
      const { transport } = sqsWith(() => {
        throw err;
      });
      const [outcome] = await transport.publish([ev('a')], signal());
      assert.equal(outcome!.ok ? 'ok' : outcome!.error.kind, kind, err.name);
      assert.match(!outcome!.ok ? outcome!.error.message : '', message);
    }
  });

  it('a request refused as a whole for a permanent reason is sent again one entry per request, so only the culprit parks', async () => {
    const { transport, calls } = sqsWith((input) => {
      const entries = input['Entries'] as { Id: string; MessageBody: string }[];
      if (entries.some((e) => e.MessageBody.includes('poison'))) throw awsError('InvalidParameterValue', 400);
      return allOk(input);
    });
    const outcomes = await transport.publish([ev('a'), ev('b', { payload: 'poison' }), ev('c')], signal());
    assert.deepEqual(kinds(outcomes), ['ok', 'permanent', 'ok']);
    assert.deepEqual(calls.map((c) => (c.input['Entries'] as unknown[]).length), [3, 1, 1, 1]);
  });

  it('an oversize event parks before any request, naming maxMessageBytes; an unmapped destination parks as unroutable', async () => {
    const { transport, calls } = sqsWith(allOk);
    const [big, lost, fine] = await transport.publish([ev('a', { payload: 'x'.repeat(300_000) }), ev('b', { destination: 'nowhere' }), ev('c')], signal());
    assert.ok(!big!.ok && big!.error.kind === 'permanent');
    assert.match(!big!.ok ? big!.error.message : '', /over maxMessageBytes \(262144\)/);
    assert.ok(!lost!.ok && lost!.error.kind === 'permanent');
    assert.match(!lost!.ok ? lost!.error.message : '', /unroutable: destination "nowhere" has no queue URL in queues/);
    assert.ok(fine!.ok);
    assert.equal(calls.length, 1);
  });

  it('an aborted signal sends nothing and answers retriable', async () => {
    const { transport, calls } = sqsWith(allOk);
    const outcomes = await transport.publish([ev('a')], AbortSignal.abort());
    assert.deepEqual(kinds(outcomes), ['retriable']);
    assert.equal(calls.length, 0);
  });

  it('start() names endpoint or credentials; a missing queue is only logged', async () => {
    const warned: unknown[] = [];
    const logger = { debug() {}, info() {}, error() {}, warn: (o: unknown) => warned.push(o) };
    const missing = sqsWith(() => {
      throw awsError('QueueDoesNotExist', 400);
    }, { logger });
    await missing.transport.start(signal());
    assert.equal(warned.length, 2);
    const denied = sqsWith(() => {
      throw awsError('AccessDenied', 403);
    });
    await assert.rejects(denied.transport.start(signal()), (err: unknown) => err instanceof ConfigError && /^credentials: /.test(err.message));
  });

  it('options name the field and the fix', () => {
    const cases: [unknown, RegExp][] = [
      [{}, /^queues: is required/],
      [{ queues: {} }, /^queues: maps no destination/],
      [{ queues: { orders: 'orders' } }, /^queues\.orders: must be a queue URL/],
      [{ queues: { orders: QUEUE }, endpoint: 'nope' }, /^endpoint: is not a valid URL/],
      [{ queues: { orders: QUEUE }, credentials: { accessKeyId: '' } }, /^credentials: must be/],
      [{ queues: { orders: QUEUE }, maxMessageBytes: 5_000_000 }, /^maxMessageBytes: must be an integer from 1024 to 1048576/],
    ];
    for (const [options, expected] of cases) {
      assert.throws(() => new SqsTransport(options as never), (err: unknown) => err instanceof ConfigError && expected.test(err.message));
    }
  });
});

describe('SnsTransport request mapping (stubbed client)', () => {
  it('PublishBatch to the topic ARN with group = key and deduplication id = event id on a FIFO topic; per-entry results', async () => {
    const stub = stubClient((input) => {
      const entries = input['PublishBatchRequestEntries'] as { Id: string }[];
      return { Successful: [{ Id: entries[0]!.Id }], Failed: [{ Id: entries[1]!.Id, Code: 'InvalidParameter', SenderFault: true, Message: 'bad' }] };
    });
    const transport = new SnsTransport({ topics: { orders: TOPIC }, client: stub.client as never });
    const events = [ev('a'), ev('b')];
    const outcomes = await transport.publish(events, signal());
    assert.deepEqual(kinds(outcomes), ['ok', 'permanent']);
    assert.equal(stub.calls[0]!.name, 'PublishBatchCommand');
    assert.equal(stub.calls[0]!.input['TopicArn'], TOPIC);
    const first = (stub.calls[0]!.input['PublishBatchRequestEntries'] as Record<string, unknown>[])[0]!;
    assert.equal(first['Message'], '{"key":"a"}');
    assert.equal(first['MessageGroupId'], 'Order:a');
    assert.equal(first['MessageDeduplicationId'], events[0]!.id);
    assert.ok((first['MessageAttributes'] as Record<string, unknown>)['txbox-envelope']);
    await transport.close();
  });

  it('a missing topic (NotFound) and refused authorization are destination-down; throttling retriable', async () => {
    for (const [err, kind] of [
      [awsError('NotFound', 404), 'destination-down'],
      [awsError('AuthorizationError', 403), 'destination-down'],
      [awsError('Throttled', 429), 'retriable'],
    ] as const) {
      const stub = stubClient(() => {
        throw err;
      });
      const transport = new SnsTransport({ topics: { orders: TOPIC }, client: stub.client as never });
      const [outcome] = await transport.publish([ev('a')], signal());
      assert.equal(outcome!.ok ? 'ok' : outcome!.error.kind, kind, err.name);
    }
  });

  it('options name the field', () => {
    assert.throws(() => new SnsTransport({ topics: { orders: 'orders' } }), /topics\.orders: must be a topic ARN/);
    assert.throws(() => new SnsTransport({ topics: { orders: TOPIC }, maxMessageBytes: 300_000 }), /maxMessageBytes: must be an integer from 1024 to 262144/);
  });
});

describe('AWS error classification', () => {
  it('reads names with a protocol prefix and unknown client faults as permanent', () => {
    assert.equal(classifyRequestError(awsError('com.amazonaws.sqs#QueueDoesNotExist', 400)).kind, 'destination-down');
    assert.equal(classifyRequestError(awsError('SomethingNew', 400)).kind, 'permanent');
    assert.equal(classifyRequestError(awsError('SomethingNew', 503)).kind, 'retriable');
    assert.equal(classifyEntryError({ Code: 'Unknown', SenderFault: true }).kind, 'permanent');
    assert.equal(classifyEntryError({ Code: 'Unknown', SenderFault: false }).kind, 'retriable');
    assert.ok(new TransportError('retriable', 'x'));
  });
});
