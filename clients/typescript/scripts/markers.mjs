// Marks each output directory with the module format of its .js files. The package's own
// package.json says "type": "module", so without dist/cjs/package.json Node would read the
// CommonJS build as ESM; dist/esm's marker says the same as the root's, so neither build
// depends on the other's.
import { writeFileSync } from 'node:fs';

for (const [dir, type] of [['esm', 'module'], ['cjs', 'commonjs']]) {
  const marker = new URL(`../dist/${dir}/package.json`, import.meta.url);
  writeFileSync(marker, `${JSON.stringify({ type }, null, 2)}\n`);
}
