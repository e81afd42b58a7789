/**
 * The store conformance suite (txbox/testing/conformance) on Google's
 * Firestore emulator (scripts/firestore/up.sh); skipped when it is not
 * installed. The commit-order gap case skips (positions are commit times),
 * and the inbox cases skip (no Firestore inbox yet).
 */
import { describe } from 'node:test';
import { runStoreConformance } from 'txbox/testing/conformance';
import { firestoreSkip, openFirestoreNamespace } from '../helpers/firestore.ts';

const skip = await firestoreSkip();
if (skip) describe('store conformance: firestore', () => void describe.skip(skip, () => {}));
else runStoreConformance({ name: 'firestore', open: () => openFirestoreNamespace('storeconf') });
