// The ```ts snippet of the repository README's "Use it from your stack: TypeScript client"
// section, type-checked as a reader's strict TypeScript would check it and run, against the
// real server that `cargo xtask clients` starts (MEMLAYER_URL, MEMLAYER_ADMIN_KEY).
//
// What a reader would fill in is filled in, and nothing else is changed: the README's
// address of the server (http://127.0.0.1:7700) becomes the test server's, its key
// placeholder (`mlk_…`) the admin key, and `myModel`, the reader's own model call, answers a
// fixed text. The snippet is written under dist/readme/ (inside the package, so `'memlayer'`
// resolves to the built package through its `exports`, types included), compiled there by
// tsc with `--strict` and run with node.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import test from 'node:test';

const README = new URL('../../../README.md', import.meta.url);
const TITLE = 'Use it from your stack: TypeScript client';
const FENCE = /^( *)```ts\n([\s\S]*?)^\1```$/gm;
const MY_MODEL =
  "const myModel = async (messages: unknown[]): Promise<string> =>\n" +
  "  messages.length > 0 ? 'Your order ships tomorrow.' : 'Hello.';\n";

function snippets() {
  const text = readFileSync(README, 'utf8');
  const start = text.indexOf(`\n## ${TITLE}\n`);
  assert.ok(start >= 0, `README.md has no '## ${TITLE}' section`);
  const end = text.indexOf('\n## ', start + 1);
  const section = text.slice(start, end > 0 ? end : text.length);
  return [...section.matchAll(FENCE)].map((match) => match[2]);
}

function run(command, args, cwd) {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8', env: process.env });
  assert.equal(
    result.status,
    0,
    `${command} ${args.join(' ')} failed:\n${result.stdout}\n${result.stderr}`,
  );
  return result.stdout;
}

test(`README.md: ${TITLE}`, () => {
  const found = snippets();
  assert.ok(found.length > 0, 'no ```ts snippet in the section');
  const dir = new URL('../dist/readme/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  const tsc = fileURLToPath(new URL('../node_modules/typescript/bin/tsc', import.meta.url));
  found.forEach((snippet, index) => {
    const code = snippet
      .replaceAll('http://127.0.0.1:7700', process.env.MEMLAYER_URL)
      .replaceAll('mlk_…', process.env.MEMLAYER_ADMIN_KEY);
    const source = new URL(`snippet${index + 1}.mts`, dir);
    // The reader's model call goes after the imports, which must come first.
    const imports = code.match(/^(?:import [^;]+;\n)*/)[0];
    writeFileSync(source, imports + MY_MODEL + code.slice(imports.length));
    run(process.execPath, [
      tsc,
      '--strict',
      '--target', 'es2022',
      '--module', 'nodenext',
      '--moduleResolution', 'nodenext',
      '--lib', 'es2022,dom',
      fileURLToPath(source),
    ]);
    const output = run(process.execPath, [fileURLToPath(new URL(`snippet${index + 1}.mjs`, dir))]);
    process.stdout.write(output);
    assert.match(output, /404 session_not_found/);
  });
});
