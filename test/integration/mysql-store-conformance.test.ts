/** The store conformance suite (txbox/testing/conformance) on MariaDB 10.11 at 127.0.0.1:3306; the inbox cases skip (no MySQL inbox yet). */
import { runStoreConformance } from 'txbox/testing/conformance';
import { openMysqlNamespace } from '../helpers/mysql-conformance.ts';

runStoreConformance({ name: 'mysql', open: () => openMysqlNamespace('storeconf') });
