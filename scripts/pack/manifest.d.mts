/** Types of manifest.mjs, for test/unit/pack-dts-specifiers.test.ts. */
export declare const SOURCE_CONDITION: 'txbox-source';
export declare function stripSourceCondition<T extends { exports?: unknown }>(pkg: T): T;
