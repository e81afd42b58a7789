/**
 * OpenTelemetry end to end over Kafka (the other transports:
 * tracing.test.ts): one trace from the producer's span through the relay's
 * publish span (KafkaTransport, the context in record headers) to the
 * KafkaConsumer's span in which the handler runs. Holds the Kafka test lock
 * like the other Kafka files.
 */
import { after, before, it } from 'node:test';
import { KafkaConsumer, KafkaTransport } from 'txbox/kafka';
import type { TestDb } from '../helpers/databases.ts';
import { BROKERS, FAST_GROUP, assertNoOpenHandles, newGroup, newTopic, setUpKafka } from '../fixtures/kafka-consumer-helpers.ts';
import { assertOneTrace, produce, recordingInbox, registerOtel, relayUntilHandled, tracingDb } from '../fixtures/tracing-harness.ts';

let db: TestDb;
let tearDown = async (): Promise<void> => {};

before(async () => {
  registerOtel();
  tearDown = await setUpKafka();
  db = await tracingDb();
});

after(async () => {
  await db?.close();
  await tearDown();
  await assertNoOpenHandles();
});

it('one trace from producer to handler over Kafka (KafkaTransport -> KafkaConsumer)', { timeout: 180_000 }, async () => {
  const topic = await newTopic(1);
  const { inbox, runs } = recordingInbox(db, 'kafka');
  const consumer = new KafkaConsumer({ brokers: BROKERS, groupId: newGroup(), topics: [topic], fromBeginning: true, ...FAST_GROUP, inbox });
  const transport = new KafkaTransport({ brokers: BROKERS, clientId: 'txbox-trace-test', topics: { items: topic } });
  await consumer.start();
  try {
    const { id, producer } = await produce(db);
    await relayUntilHandled(db, transport, runs, id);
    assertOneTrace(id, producer, runs, 'kafka');
  } finally {
    await transport.close();
    await consumer.stop();
    inbox.stop();
  }
});
