'use strict';
// The CommonJS build, as `require` finds it through the package's `exports` map.
const assert = require('node:assert/strict');
const test = require('node:test');

const memlayer = require('memlayer');

const suite = require('./suite.cjs');

test('`require` resolves to the CommonJS build', () => {
  assert.match(require.resolve('memlayer'), /\/dist\/cjs\/index\.js$/);
});

suite(memlayer, 'cjs');
