// WordPiece (BERT) tokenizer parity: the tokenizer.json BertTokenizerFast
// writes for the small vocabulary of tools/refgen/embed.py (variant 0) and
// variants of its normalizer / post-processor / WordPiece options, encoded and
// decoded by the HF oracle (@anush008/tokenizers, Rust tokenizers 0.22).
// Variant 0 runs over a third of the corpus, the others over a tenth.
// Writes tests/fixtures/tokenizer/wordpiece.jsonl: first {"variants": [full
// tokenizer.json, ...]}, then {"v": k, "t"|"x", "ids", "ids0"?, "dec"} per
// string; "ids0" (no special tokens) only where it is not ids without its first
// and last id. Never run in CI.
//   python3 tools/refgen/embed.py --vocab-only /tmp/wp && node tools/tokref/wordpiece.js /tmp/wp/vocab.txt
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.resolve(__dirname, '../..');
const {Tokenizer} = require(path.join(root, '.deps/npm/node_modules/@anush008/tokenizers'));
const {build} = require('./corpus.js');

const words = fs.readFileSync(process.argv[2], 'utf8').split('\n').filter((w) => w.length);
const vocab = {};
words.forEach((w, i) => { vocab[w] = i; });
const SPECIAL = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];
const added = SPECIAL.map((t) => ({id: vocab[t], content: t, single_word: false, lstrip: false,
  rstrip: false, normalized: false, special: true}));
const cls = vocab['[CLS]'], sep = vocab['[SEP]'];
const tmpl = {type: 'TemplateProcessing',
  single: [{SpecialToken: {id: '[CLS]', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
    {SpecialToken: {id: '[SEP]', type_id: 0}}],
  pair: [{SpecialToken: {id: '[CLS]', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
    {SpecialToken: {id: '[SEP]', type_id: 0}}, {Sequence: {id: 'B', type_id: 1}},
    {SpecialToken: {id: '[SEP]', type_id: 1}}],
  special_tokens: {'[CLS]': {id: '[CLS]', ids: [cls], tokens: ['[CLS]']},
    '[SEP]': {id: '[SEP]', ids: [sep], tokens: ['[SEP]']}}};
function tj(o) {
  const n = Object.assign({type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true,
    strip_accents: null, lowercase: true}, o.normalizer || {});
  return {version: '1.0', truncation: null, padding: null, added_tokens: added,
    normalizer: n, pre_tokenizer: {type: 'BertPreTokenizer'},
    post_processor: o.post_processor || tmpl,
    decoder: {type: 'WordPiece', prefix: '##', cleanup: o.cleanup === undefined ? true : o.cleanup},
    model: {type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##',
      max_input_chars_per_word: o.max_chars || 100, vocab}};
}
const V = [
  tj({}),                                                   // BertTokenizerFast(do_lower_case)
  tj({normalizer: {lowercase: false}, post_processor: {type: 'BertProcessing',
    sep: ['[SEP]', sep], cls: ['[CLS]', cls]}}),              // cased, BertProcessing
  tj({normalizer: {lowercase: false, strip_accents: true}}),   // cased, accents stripped
  tj({normalizer: {lowercase: true, strip_accents: false, handle_chinese_chars: false,
    clean_text: false}, max_chars: 6, cleanup: false}),        // max chars per word 6
];
(async () => {
  const corpus = build(SPECIAL);
  const lines = [JSON.stringify({variants: V})];
  let n = 0;
  for (let k = 0; k < V.length; k++) {
    const tok = Tokenizer.fromString(JSON.stringify(V[k]));
    for (let i = 0; i < corpus.length; i++) {
      if (i >= 40 && i % (k === 0 ? 3 : 10) !== 0)
        continue;
      const item = corpus[i];
      const text = item.t !== undefined ? item.t : Buffer.from(item.x, 'hex').toString('utf8');
      const ids = Array.from((await tok.encode(text)).getIds());
      const ids0 = Array.from((await tok.encode(text, null, {addSpecialTokens: false})).getIds());
      const o = Object.assign({v: k}, item, {ids});
      if (ids0.join() !== ids.slice(1, -1).join()) o.ids0 = ids0;
      o.dec = await tok.decode(ids, false);
      lines.push(JSON.stringify(o));
      n++;
    }
  }
  const out = path.join(root, 'tests/fixtures/tokenizer/wordpiece.jsonl');
  fs.writeFileSync(out, lines.join('\n') + '\n');
  console.log(`wordpiece: ${V.length} variants, ${n} strings -> ${path.relative(root, out)}`);
})();
