/** MySQL / MariaDB errors in src/core/store-errors.ts: told by errno (not mysql2's code names), values quoted by the server scrubbed from the text. */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { classifyStoreError, mysqlErrno, scrubMysqlMessage, storeErrorText } from '../../src/core/store-errors.ts';

/** A server error as mysql2 makes it: errno, sqlState, sqlMessage, and a code name (not looked at). */
const mysqlError = (errno: number, message = `error ${errno}`, code = 'ER_SOMETHING'): Error => Object.assign(new Error(message), { errno, sqlState: 'HY000', sqlMessage: message, code });

describe('store errors: MySQL errno', () => {
  it('data errors are deterministic, by errno whatever the code name', () => {
    for (const errno of [1048, 1062, 1264, 1265, 1292, 1366, 1406, 1452, 1690, 3140, 3819, 4025]) assert.equal(classifyStoreError(mysqlError(errno, 'x', 'ER_RENAMED_IN_SOME_VERSION')), 'deterministic', String(errno));
    assert.equal(classifyStoreError(new Error('wrapped', { cause: mysqlError(1406) })), 'deterministic');
  });

  it('deadlocks, lock waits, lost connections, shutdowns and a missing table are outages', () => {
    for (const errno of [1213, 1205, 2006, 2013, 1040, 1053, 1927, 1146, 4031]) assert.equal(classifyStoreError(mysqlError(errno)), 'outage', String(errno));
    // A socket error carries a negative errno and no sqlMessage: not a server errno.
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:3306'), { errno: -111, code: 'ECONNREFUSED', syscall: 'connect' });
    assert.equal(mysqlErrno(refused), 0);
    assert.equal(classifyStoreError(refused), 'outage');
    // mysql2's 5-letter SQLSTATE is not read as a PostgreSQL code: the errno decides (1213 has SQLSTATE 40001, 1406 has 22001).
    assert.equal(classifyStoreError(Object.assign(mysqlError(1213), { code: '40001' })), 'outage');
  });

  it('quoted values are scrubbed from the text, which names the errno', () => {
    assert.equal(scrubMysqlMessage("Duplicate entry 'billing-it's-secret' for key 'PRIMARY'"), "Duplicate entry (value not shown) for key 'PRIMARY'");
    assert.equal(scrubMysqlMessage("Incorrect string value: '\\xF0\\x9F\\x99\\x82' for column `db`.`inbox`.`key` at row 1"), 'Incorrect string value: (value not shown) for column `db`.`inbox`.`key` at row 1');
    assert.equal(scrubMysqlMessage("Truncated incorrect DOUBLE value: 'card 4111'"), 'Truncated incorrect DOUBLE value: (value not shown)');
    assert.equal(scrubMysqlMessage("Data too long for column 'key' at row 1"), "Data too long for column 'key' at row 1", 'names, not values, stay');
    const text = storeErrorText(mysqlError(1062, "Duplicate entry 'a@example.com' for key 'email'"));
    assert.equal(text, "MySQL error 1062: Duplicate entry (value not shown) for key 'email'");
  });
});
