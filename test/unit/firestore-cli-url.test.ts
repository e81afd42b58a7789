/** How the CLI names a Firestore database (firestore://PROJECT_ID[/DATABASE_ID]) and the index advice `txbox migrate` prints: pure, no emulator. */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { parseFirestoreUrl } from '../../src/cli/backends/firestore-url.ts';
import { storeOf } from '../../src/cli/backends/backend.ts';
import { CliError } from '../../src/cli/cli-error.ts';
import { firestoreInboxIndexes, firestoreIndexes, gcloudIndexCommands, INBOX_INDEX_PURPOSES } from '../../src/stores/firestore/firestore-indexes.ts';

it('firestore://PROJECT_ID is the (default) database, /DATABASE_ID another; FIRESTORE_EMULATOR_HOST is said in the label', () => {
  assert.equal(storeOf('firestore://shop-prod'), 'firestore');
  assert.equal(storeOf('FIRESTORE://shop-prod'), 'firestore');
  const plain = parseFirestoreUrl('firestore://shop-prod', '--database-url', {});
  assert.deepEqual([plain.projectId, plain.databaseId, plain.emulator, plain.label], ['shop-prod', '(default)', undefined, 'project shop-prod, database (default)']);
  const named = parseFirestoreUrl('firestore://shop-prod/orders-eu/', 'TXBOX_DATABASE_URL', { FIRESTORE_EMULATOR_HOST: '127.0.0.1:8086' });
  assert.deepEqual([named.projectId, named.databaseId, named.emulator, named.source], ['shop-prod', 'orders-eu', '127.0.0.1:8086', 'TXBOX_DATABASE_URL']);
  assert.equal(named.label, 'project shop-prod, database orders-eu on the emulator at 127.0.0.1:8086');
  assert.equal(parseFirestoreUrl('firestore://shop-prod/(default)', 'x', {}).databaseId, '(default)');
});

it('a bad firestore:// URL is a usage error naming where it was set and the right form', () => {
  const cases: [string, RegExp][] = [
    ['firestore://', /^--database-url: names no project; give firestore:\/\/PROJECT_ID or firestore:\/\/PROJECT_ID\/DATABASE_ID/],
    ['firestore://Shop', /"Shop" is not a project id/],
    ['firestore://shop/a/b', /"a\/b" is not a database id/],
    ['firestore://shop?x=1', /no port, query or fragment/],
    ['firestore://u:pw@shop', /carries no credentials/],
    ['firestore://shop/%zz', /"%zz" is not a database id/],
  ];
  for (const [url, message] of cases) {
    assert.throws(() => parseFirestoreUrl(url, '--database-url', {}), (err: unknown) => err instanceof CliError && err.exitCode === 2 && message.test(err.message), url);
  }
});

it('the gcloud commands create the same composite indexes as firestore.indexes.json, for the collection and database given', () => {
  const file = firestoreIndexes({ collection: 'shop_outbox' });
  const commands = gcloudIndexCommands('shop-prod', '(default)', { collection: 'shop_outbox' });
  assert.equal(commands.length, file.indexes.length);
  assert.equal(
    commands[0],
    "gcloud firestore indexes composite create --project=shop-prod --database='(default)' --collection-group=shop_outbox --query-scope=collection --field-config=field-path=state,order=ascending --field-config=field-path=bucket,order=ascending --field-config=field-path=ts,order=ascending",
  );
  assert.match(commands[2]!, /field-path=ts,order=descending$/);
  assert.match(gcloudIndexCommands('shop-prod', 'orders-eu')[0]!, /--database=orders-eu --collection-group=txbox_outbox /);
  assert.throws(() => firestoreIndexes({ collection: 'bad name' }), /collection/);
});

it("the inbox's composite indexes: one per query shape that is not equality only, on the inbox collection, envelope exempt", () => {
  const file = firestoreInboxIndexes({ collection: 'shop_inbox' });
  assert.equal(file.indexes.length, INBOX_INDEX_PURPOSES.length);
  assert.ok(file.indexes.every((i) => i.collectionGroup === 'shop_inbox' && i.queryScope === 'COLLECTION'));
  const shapes = file.indexes.map((i) => i.fields.map((f) => `${f.fieldPath}${f.order === 'DESCENDING' ? ' desc' : ''}`).join(','));
  // redrive (with and without types), held events of keys, the held re-check, status, the admin's lists, prune
  for (const shape of ['consumer,status,receivedAt', 'consumer,status,type,receivedAt', 'consumer,status,key', 'consumer,status,key,version,receivedAt', 'consumer,status,heldAt', 'consumer,status,processedAt', 'consumer,status,processedAt desc', 'status,receivedAt', 'status,processedAt']) {
    assert.ok(shapes.includes(shape), shape);
  }
  assert.equal(new Set(shapes).size, shapes.length);
  assert.deepEqual(file.fieldOverrides, [{ collectionGroup: 'shop_inbox', fieldPath: 'envelope', indexes: [] }]);
  assert.equal(firestoreInboxIndexes().indexes[0]!.collectionGroup, 'txbox_inbox');
  const commands = gcloudIndexCommands('shop-prod', '(default)', {}, file);
  assert.equal(commands.length, file.indexes.length);
  assert.match(commands[0]!, /--collection-group=shop_inbox --query-scope=collection --field-config=field-path=consumer,order=ascending --field-config=field-path=status,order=ascending --field-config=field-path=receivedAt,order=ascending$/);
  assert.throws(() => firestoreInboxIndexes({ collection: '__inbox__' }), /reserved/);
});
