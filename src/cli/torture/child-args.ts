import { dirname, extname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/**
 * The node flags that make a torture child process end with its parent
 * (exit-with-parent.ts); spawn the child with its stdin a pipe (`stdio[0]:
 * 'pipe'`) and keep it open.
 */
export function exitWithParentArgs(): string[] {
  const here = fileURLToPath(import.meta.url);
  return ['--import', pathToFileURL(join(dirname(here), `exit-with-parent${extname(here)}`)).href];
}
