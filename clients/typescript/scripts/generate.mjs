// Generates src/generated/openapi.ts, the types of the API, from a memlayer server's OpenAPI
// document: `npm run generate -- http://127.0.0.1:7700/openapi.json` (a URL or a saved
// file; a second argument writes elsewhere, as `cargo xtask clients` does to compare the
// committed file with what the current server's document gives).
//
// The options live here only, so the committed file and the drift check's agree:
// - `--empty-objects-unknown`: an object the document gives no properties (an erasure's
//   `counts`, `target`) is `Record<string, unknown>`, not `Record<string, never>`;
// - `--default-non-nullable=false`: a property with a default (`k`, the context settings)
//   is optional, as the server reads it, rather than required.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const [source, output = fileURLToPath(new URL('../src/generated/openapi.ts', import.meta.url))] =
  process.argv.slice(2);
if (!source) {
  console.error('usage: npm run generate -- <URL or file of /openapi.json> [output]');
  process.exit(2);
}
// Its package's `exports` map does not list the CLI, so it is found by path.
const cli = fileURLToPath(
  new URL('../node_modules/openapi-typescript/bin/cli.js', import.meta.url),
);
const options = ['--empty-objects-unknown', '--default-non-nullable=false', '--output', output];
const run = spawnSync(process.execPath, [cli, source, ...options], { stdio: 'inherit' });
process.exit(run.status ?? 1);
