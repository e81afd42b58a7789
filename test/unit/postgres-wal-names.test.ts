import { it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from 'txbox';
import { postgresNames, PostgresRelayStore, walNames, walSlotName, type PostgresConnection } from 'txbox/postgres';

it('names the publication after the outbox, and slots with a per-outbox prefix a slot name allows', () => {
  const n = walNames(postgresNames({ schema: 'Billing', table: 'outbox' }));
  assert.equal(n.publication, 'txbox_Billing_outbox');
  assert.match(n.slotPrefix, /^txbox_[0-9a-f]{8}_$/);
  assert.notEqual(n.slotPrefix, walNames(postgresNames({ schema: 'billing', table: 'outbox' })).slotPrefix, 'one prefix per outbox table');
  const slot = walSlotName(n, 'Host-7.local:1234/ÄÖ');
  assert.match(slot, /^[a-z0-9_]{1,63}$/);
  assert.ok(slot.startsWith(`${n.slotPrefix}host_7_local_1234`));
  assert.notEqual(walSlotName(n, 'r'), walSlotName(n, 'r'), 'a restarted relay never meets its predecessor\'s slot');
  const long = walSlotName(n, 'x'.repeat(200));
  assert.ok(long.length <= 63);
  const longNames = walNames(postgresNames({ schema: 's'.repeat(40), table: 't'.repeat(40) }));
  assert.ok(longNames.publication.length <= 63);
});

it('refuses an unknown wake mode, naming the field', () => {
  const connection = {} as PostgresConnection;
  assert.throws(
    () => new PostgresRelayStore({ connection, wake: 'wall' as 'wal' }),
    (err: unknown) => err instanceof ConfigError && err.field === 'wake' && /'notify' or 'wal'/.test(err.message),
  );
});
