/**
 * The store conformance suite (txbox/testing/conformance) on Google's
 * Firestore emulator (scripts/firestore/up.sh); skipped when it is not
 * installed. The commit-order gap case skips (positions are commit times);
 * the inbox and projection cases run on FirestoreInboxStore.
 */
import { describe } from 'node:test';
import { runStoreConformance } from 'txbox/testing/conformance';
import { firestoreSkip, openFirestoreNamespace } from '../helpers/firestore.ts';

const skip = await firestoreSkip();
if (skip) describe('store conformance: firestore', () => void describe.skip(skip, () => {}));
else runStoreConformance({ name: 'firestore', open: () => openFirestoreNamespace('storeconf') });
