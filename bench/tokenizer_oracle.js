// HF tokenizers (Rust, via @anush008/tokenizers) encode throughput on a file:
// best of N encodes of the whole text as one string, add_special_tokens=false.
// usage: node tokenizer_oracle.js <model dir> <text file> <N>
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.resolve(__dirname, '..');
const {Tokenizer} = require(path.join(root, '.deps/npm/node_modules/@anush008/tokenizers'));
const [dir, file, n] = process.argv.slice(2);
const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
const text = fs.readFileSync(file, 'utf8');
const bytes = Buffer.byteLength(text);
(async () => {
  let best = Infinity, tokens = 0;
  for (let i = 0; i < Number(n || 3); i++) {
    const t0 = process.hrtime.bigint();
    const e = await tok.encode(text, null, {addSpecialTokens: false});
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    tokens = e.getLength();
    best = Math.min(best, dt);
  }
  // line by line: encodeBatch (Rust runs it on all cores with rayon)
  const lines = text.split(/(?<=\n)/);
  let lbest = Infinity, ltok = 0;
  for (let i = 0; i < Number(n || 3); i++) {
    const t0 = process.hrtime.bigint();
    const es = await tok.encodeBatch(lines, {addSpecialTokens: false});
    lbest = Math.min(lbest, Number(process.hrtime.bigint() - t0) / 1e9);
    ltok = es.reduce((a, e) => a + e.getLength(), 0);
  }
  console.log(JSON.stringify({bytes, tokens, seconds: best, mb_per_s: bytes / 1e6 / best,
    line_tokens: ltok, lines_mb_per_s: bytes / 1e6 / lbest}));
})();
