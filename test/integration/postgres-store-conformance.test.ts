/** The store conformance suite (txbox/testing/conformance) on the real PostgreSQL. */
import { runStoreConformance } from 'txbox/testing/conformance';
import { openPostgresNamespace } from '../helpers/postgres-conformance.ts';

runStoreConformance({ name: 'postgres', open: () => openPostgresNamespace('postgres') });
