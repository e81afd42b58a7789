/** The optional peer dependencies of txbox (package.json peerDependenciesMeta). */
export const OPTIONAL_PEERS: readonly string[] = ['pg', '@electric-sql/pglite', 'mysql2', 'kafkajs', 'amqplib', 'ioredis', '@nats-io/transport-node', '@nats-io/jetstream', 'postgres', '@opentelemetry/api', '@google-cloud/pubsub', '@google-cloud/firestore', '@aws-sdk/client-sqs', '@aws-sdk/client-sns', 'prom-client'];

/** The optional peer whose absence made this module load fail, or undefined for any other error. */
export function missingPeer(err: unknown): string | undefined {
  if (!(err instanceof Error) || (err as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') return undefined;
  const name = /Cannot find package '([^']+)'/.exec(err.message)?.[1];
  return name !== undefined && OPTIONAL_PEERS.includes(name) ? name : undefined;
}
