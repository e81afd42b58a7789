/**
 * SnsTransport against a server: fauxqs (an SNS/SQS emulator on npm, run in
 * this process and bound to 127.0.0.1). A FIFO topic fans out to a FIFO queue
 * with raw message delivery; what arrives decodes with decodeSqsMessage, in
 * per-key order, grouped by key and deduplicated by event id. A topic that does
 * not exist answers as the destination being down (the relay's circuit
 * breaker), not as a permanent failure that would park every key.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { CreateQueueCommand, GetQueueAttributesCommand, ReceiveMessageCommand, DeleteMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import { CreateTopicCommand, SNSClient, SubscribeCommand } from '@aws-sdk/client-sns';
import { buildApp } from 'fauxqs';
import { decodeSqsMessage, SnsTransport } from 'txbox/sqs';
import type { StoredEvent } from 'txbox';
import { uuidv7 } from 'txbox';

const credentials = { accessKeyId: 'test', secretAccessKey: 'test' };
const region = 'us-east-1';

describe('SnsTransport against fauxqs', () => {
  let app: Awaited<ReturnType<typeof buildApp>>;
  let endpoint = '';
  let sqs: SQSClient;
  let sns: SNSClient;

  before(async () => {
    app = buildApp({ logger: false, defaultRegion: region });
    await app.listen({ port: 0, host: '127.0.0.1' });
    endpoint = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    sqs = new SQSClient({ region, endpoint, credentials });
    sns = new SNSClient({ region, endpoint, credentials });
  });
  after(async () => {
    sqs?.destroy();
    sns?.destroy();
    await app?.close();
  });

  let seq = 0;
  const event = (key: string, version: number): StoredEvent => {
    const payloadText = JSON.stringify({ key, version });
    return {
      seq: ++seq,
      id: uuidv7(),
      type: 'ItemChanged',
      aggregateType: 'Item',
      aggregateId: key,
      key,
      bucket: 0,
      destination: 'items',
      version,
      headers: { 'x-tenant': 't1' },
      occurredAt: new Date(),
      attempts: 0,
      routesDone: [],
      payloadText,
      payload: JSON.parse(payloadText),
    } as unknown as StoredEvent;
  };

  it('publishes to a FIFO topic: the subscribed FIFO queue gets every event, grouped by key, deduplicated by id, in per-key order', async () => {
    const run = randomBytes(4).toString('hex');
    const { TopicArn } = await sns.send(new CreateTopicCommand({ Name: `items-${run}.fifo`, Attributes: { FifoTopic: 'true' } }));
    const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: `items-${run}.fifo`, Attributes: { FifoQueue: 'true' } }));
    const { Attributes } = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['QueueArn'] }));
    await sns.send(new SubscribeCommand({ TopicArn, Protocol: 'sqs', Endpoint: Attributes!.QueueArn, Attributes: { RawMessageDelivery: 'true' } }));

    const transport = new SnsTransport({ topics: { items: TopicArn! }, region, endpoint, credentials });
    await transport.start();
    const sent = new Map<string, string[]>();
    try {
      // As the relay calls it: at most one event per key per call, keys in parallel.
      for (let v = 1; v <= 5; v++) {
        const events = ['a', 'b', 'c'].map((k) => event(`Item:${k}`, v));
        for (const e of events) sent.set(e.key, [...(sent.get(e.key) ?? []), e.id]);
        const outcomes = await transport.publish(events, AbortSignal.timeout(10_000));
        assert.ok(outcomes.every((o) => o.ok), JSON.stringify(outcomes.find((o) => !o.ok)));
      }
    } finally {
      await transport.close();
    }

    const got = new Map<string, string[]>();
    const deadline = Date.now() + 30_000;
    let total = 0;
    while (total < 15 && Date.now() < deadline) {
      const r = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: ['All'], MessageSystemAttributeNames: ['All'] }));
      for (const m of r.Messages ?? []) {
        const decoded = decodeSqsMessage(m, 'items');
        assert.ok(decoded.ok, decoded.ok ? '' : decoded.message);
        const e = decoded.event;
        assert.equal(m.Attributes?.MessageGroupId, e.key, 'the message group is the key');
        assert.equal(m.Attributes?.MessageDeduplicationId, e.id, 'the deduplication id is the event id');
        assert.equal(e.headers['x-tenant'], 't1');
        assert.deepEqual(e.payload, { key: e.key, version: e.version });
        got.set(e.key, [...(got.get(e.key) ?? []), e.id]);
        total++;
      }
      if (r.Messages?.length) {
        await sqs.send(new DeleteMessageBatchCommand({ QueueUrl, Entries: r.Messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle! })) }));
      }
    }
    assert.deepEqual(Object.fromEntries([...got].sort()), Object.fromEntries([...sent].sort()), 'every event, once, in per-key order');
  });

  it('a topic that does not exist is the destination down (the circuit breaker pauses it; nothing parks)', async () => {
    const transport = new SnsTransport({ topics: { items: `arn:aws:sns:${region}:000000000000:missing-${randomBytes(4).toString('hex')}` }, region, endpoint, credentials });
    await transport.start();
    try {
      const [outcome] = await transport.publish([event('Item:x', 1)], AbortSignal.timeout(10_000));
      assert.equal(outcome!.ok, false);
      const error = (outcome as { error: { kind: string; message: string } }).error;
      assert.equal(error.kind, 'destination-down', `a missing topic must not park its events: ${error.kind} ${error.message}`);
    } finally {
      await transport.close();
    }
  });
});
