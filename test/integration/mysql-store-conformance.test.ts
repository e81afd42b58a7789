/** The store conformance suite (txbox/testing/conformance) on MariaDB 10.11 at 127.0.0.1:3306 (TXBOX_TEST_MYSQL_URL), the inbox and projection cases included. */
import { runStoreConformance } from 'txbox/testing/conformance';
import { openMysqlNamespace } from '../helpers/mysql-conformance.ts';

runStoreConformance({ name: 'mysql', open: () => openMysqlNamespace('storeconf') });
