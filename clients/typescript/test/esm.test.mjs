// The ESM build, as `import` finds it through the package's `exports` map.
import assert from 'node:assert/strict';
import test from 'node:test';

import * as memlayer from 'memlayer';

import suite from './suite.cjs';

test('`import` resolves to the ESM build', () => {
  assert.match(import.meta.resolve('memlayer'), /\/dist\/esm\/index\.js$/);
});

suite(memlayer, 'esm');
