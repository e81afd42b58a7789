/**
 * The store conformance suite (txbox/testing/conformance) on the real
 * PostgreSQL with the relay stores in the WAL wake mode (docs/wal.md): woken
 * by a replication slot, claiming announced rows by seq (migration 008).
 */
import { runStoreConformance } from 'txbox/testing/conformance';
import { openPostgresNamespace } from '../helpers/postgres-conformance.ts';

runStoreConformance({ name: 'postgres-wal', open: () => openPostgresNamespace('postgres', { wake: 'wal' }) });
