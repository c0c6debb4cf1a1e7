// Component coverage: GPT-2's tokenizer.json with one part swapped for each
// variant (pre-tokenizers with every behavior, normalizers, added-token
// options, post-processors, decoders), encoded and decoded by the HF oracle
// on a slice of the corpus. Writes tests/fixtures/tokenizer/variants.jsonl:
// first {"variants": [spec, ...]}, then {"v": k, "t"|"x", "ids", "ids0"?,
// "dec"} per string. A spec's keys replace those of the GPT-2 tokenizer.json
// (key "added_tokens_extra" is appended to added_tokens). Never run in CI.
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.resolve(__dirname, '../..');
const {Tokenizer} = require(path.join(root, '.deps/npm/node_modules/@anush008/tokenizers'));
const {build} = require('./corpus.js');

const BL = {type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false};
const BLR = {type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: true};
const seq = (...p) => ({type: 'Sequence', pretokenizers: p});
const V = [];
for (const behavior of ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'])
  for (const invert of [false, true]) {
    V.push({pre_tokenizer: seq({type: 'Split', pattern: {Regex: '\\d+|\\s'}, behavior, invert}, BL)});
    V.push({pre_tokenizer: seq({type: 'Split', pattern: {String: ' '}, behavior, invert}, BL)});
  }
V.push({pre_tokenizer: seq({type: 'Digits', individual_digits: true}, BLR)});
V.push({pre_tokenizer: seq({type: 'Digits', individual_digits: false}, BL)});
for (const behavior of ['Isolated', 'Removed', 'MergedWithNext', 'Contiguous'])
  V.push({pre_tokenizer: seq({type: 'Punctuation', behavior}, BL)});
V.push({pre_tokenizer: seq({type: 'Whitespace'}, BL)});
V.push({pre_tokenizer: seq({type: 'WhitespaceSplit'}, BL)});
V.push({pre_tokenizer: seq({type: 'BertPreTokenizer'}, BL)});
for (const prepend_scheme of ['always', 'first', 'never'])
  for (const split of [true, false])
    V.push({pre_tokenizer: seq({type: 'Metaspace', replacement: '▁', prepend_scheme, split}, BL),
      decoder: {type: 'Sequence', decoders: [BL, {type: 'Metaspace', replacement: '▁', prepend_scheme, split}]}});
V.push({pre_tokenizer: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true}});
for (const n of [{type: 'NFD'}, {type: 'NFKC'}, {type: 'NFKD'}, {type: 'Lowercase'},
  {type: 'Strip', strip_left: true, strip_right: true}, {type: 'Strip', strip_left: false, strip_right: true},
  {type: 'Replace', pattern: {String: 'e'}, content: 'E'}, {type: 'Replace', pattern: {Regex: '\\s+'}, content: ' '},
  {type: 'Prepend', prepend: '>'}, {type: 'Sequence', normalizers: [{type: 'NFKC'}, {type: 'Lowercase'}]}])
  V.push({normalizer: n});
V.push({added_tokens_extra: [
  {id: 50257, content: 'hello', single_word: true, lstrip: false, rstrip: false, normalized: false, special: false},
  {id: 50258, content: '<sep>', single_word: false, lstrip: true, rstrip: true, normalized: false, special: true},
  {id: 50259, content: 'world', single_word: false, lstrip: false, rstrip: false, normalized: true, special: false},
  {id: 50260, content: 'ing', single_word: false, lstrip: true, rstrip: false, normalized: false, special: false}],
  normalizer: {type: 'Lowercase'}});
V.push({post_processor: {type: 'TemplateProcessing',
  single: [{SpecialToken: {id: '<|endoftext|>', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
    {SpecialToken: {id: '<|endoftext|>', type_id: 0}}],
  pair: [{Sequence: {id: 'A', type_id: 0}}, {Sequence: {id: 'B', type_id: 1}}],
  special_tokens: {'<|endoftext|>': {id: '<|endoftext|>', ids: [50256], tokens: ['<|endoftext|>']}}}});
V.push({post_processor: {type: 'BertProcessing', sep: ['<|endoftext|>', 50256], cls: ['!', 0]}});
V.push({decoder: {type: 'Sequence', decoders: [{type: 'Replace', pattern: {String: 'Ġ'}, content: ' '},
  {type: 'Strip', content: 'a', start: 1, stop: 0}]}});
V.push({decoder: {type: 'Sequence', decoders: [{type: 'Replace', pattern: {String: 'Ġ'}, content: ' '},
  {type: 'Fuse'}, {type: 'Strip', content: ' ', start: 2, stop: 0}]}});
V.push({decoder: null});

const gpt2 = JSON.parse(fs.readFileSync(path.join(root, '.deps/tokenizers/gpt2/tokenizer.json'), 'utf8'));
(async () => {
  const corpus = build(['<|endoftext|>', '<sep>']).filter((_, i) => i % 27 === 0 || i < 12);
  const lines = [JSON.stringify({variants: V})];
  for (let k = 0; k < V.length; k++) {
    const spec = Object.assign({}, V[k]);
    const tj = Object.assign({}, gpt2, spec);
    if (spec.added_tokens_extra) {
      tj.added_tokens = gpt2.added_tokens.concat(spec.added_tokens_extra);
      delete tj.added_tokens_extra;
    }
    const tok = Tokenizer.fromString(JSON.stringify(tj));
    for (const item of corpus) {
      const text = item.t !== undefined ? item.t : Buffer.from(item.x, 'hex').toString('utf8');
      const ids = Array.from((await tok.encode(text)).getIds());
      const ids0 = Array.from((await tok.encode(text, null, {addSpecialTokens: false})).getIds());
      const o = Object.assign({v: k}, item, {ids});
      if (ids0.join() !== ids.join()) o.ids0 = ids0;
      o.dec = await tok.decode(ids, false);
      lines.push(JSON.stringify(o));
    }
  }
  const out = path.join(root, 'tests/fixtures/tokenizer/variants.jsonl');
  fs.writeFileSync(out, lines.join('\n') + '\n');
  console.log(`variants: ${V.length} x ${corpus.length} strings -> ${path.relative(root, out)}`);
})();
