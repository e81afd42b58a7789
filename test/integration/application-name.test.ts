/** pgConnection names its connections (application_name) so operators find them in pg_stat_activity. Real PostgreSQL. */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { pgConnection } from 'txbox/postgres';
import { DATABASE_URL } from '../helpers/databases.ts';

async function nameOf(options: Parameters<typeof pgConnection>[0]): Promise<string> {
  const db = pgConnection(options);
  try {
    const { rows } = await db.query<{ name: string }>(`SELECT current_setting('application_name') AS name`);
    return rows[0]!.name;
  } finally {
    await db.close();
  }
}

it('pgConnection sets application_name: txbox by default, the given name, cut to 63 characters; the URL wins', async () => {
  assert.equal(await nameOf({ connectionString: DATABASE_URL }), 'txbox');
  assert.equal(await nameOf({ connectionString: DATABASE_URL, applicationName: 'txbox consumer billing' }), 'txbox consumer billing');
  assert.equal(await nameOf({ connectionString: DATABASE_URL, applicationName: `txbox relay ${'r'.repeat(100)}` }), `txbox relay ${'r'.repeat(51)}`);
  assert.equal(await nameOf({ connectionString: `${DATABASE_URL}?application_name=mine`, applicationName: 'txbox relay x' }), 'mine');
});

it('pgConnection rejects an application name that is not printable ASCII, naming the field', () => {
  assert.throws(() => pgConnection({ connectionString: DATABASE_URL, applicationName: 'relais é' }), /applicationName.*printable ASCII/);
  assert.throws(() => pgConnection({ connectionString: DATABASE_URL, applicationName: '' }), /applicationName/);
});
