// Removes dist/ before a build, so no file of an earlier build is shipped.
import { rmSync } from 'node:fs';

rmSync(new URL('../dist', import.meta.url), { recursive: true, force: true });
