/** Types of dts-specifiers.mjs, for test/unit/pack-dts-specifiers.test.ts. */
export declare function declarationFiles(dir: string): string[];
export declare function tsSpecifiers(fileName: string, text: string): { start: number; end: number; text: string }[];
export declare function rewriteText(fileName: string, text: string): { text: string; count: number };
export declare function rewriteDeclarationSpecifiers(dir: string): { files: number; specifiers: number };
