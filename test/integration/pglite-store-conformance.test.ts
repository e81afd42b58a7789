/** The store conformance suite (txbox/testing/conformance) on embedded PGlite: one transaction at a time, so the commit-order gap case is skipped. */
import { runStoreConformance } from 'txbox/testing/conformance';
import { openPostgresNamespace } from '../helpers/postgres-conformance.ts';

runStoreConformance({ name: 'pglite', open: () => openPostgresNamespace('pglite') });
