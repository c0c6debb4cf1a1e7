// BERT WordPiece parity over the whole tokenizer corpus, with the
// tokenizer.json files BertTokenizerFast writes for bert-base-uncased and
// bert-base-cased style vocabularies (small, built here from the corpus, laid
// out as the real ones are: [PAD] 0, [unused0..98] 1..99, [UNK] 100,
// [CLS] 101, [SEP] 102, [MASK] 103, more [unusedN], single characters and
// their ##-continuations, whole words, then ##-subwords and word-initial
// pieces), encoded and decoded by the Hugging Face tokenizers oracle (the
// Rust library through its node bindings). Committed output; never run in CI.
//
// Writes
//   tests/fixtures/tokenizer/bert-uncased/{tokenizer.json,tokenizer_config.json}
//   tests/fixtures/tokenizer/bert-cased/{tokenizer.json,tokenizer_config.json}
//   tests/fixtures/tokenizer/bert.jsonl: first {"variants": [{"name", "dir",
//     "normalizer"}]} (a variant is dir's tokenizer.json with its normalizer
//     replaced by "normalizer"), then one line per corpus string
//     {"t"|"x", "r": [per variant {"ids"?, "ids0"?, "dec"?, "dec1"?}]}:
//     ids = encode(text) (add_special_tokens=true), ids0 = encode(text,
//     add_special_tokens=false) where it is not ids less [CLS] and [SEP],
//     dec = decode(ids, skip_special=false), dec1 = decode(ids,
//     skip_special=true) where it is not dec less the leading "[CLS] " and
//     trailing " [SEP]"; "ids" / "dec" left out are the previous variant's.
//
// The oracle: the npm package `tokenizers` (HF's own node bindings of the
// Rust library) with its prebuilt native module:
//   npm install --prefix /tmp/tk tokenizers@0.13.3 tokenizers-linux-x64-gnu@0.13.4-rc2
//   NODE_PATH=/tmp/tk/node_modules node tools/tokref/bert.js
// With --check, it also encodes everything with the project's other oracle,
// .deps/npm/node_modules/@anush008/tokenizers (Rust tokenizers 0.22, `make
// deps` installs it), and fails if the two libraries disagree anywhere.
'use strict';
const fs = require('fs');
const path = require('path');
const root = path.resolve(__dirname, '../..');
const {build} = require('./corpus.js');

const SPECIAL = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'];

// ---- a BERT-like normalization + pre-tokenization, only to pick the vocab --

const isPunct = (c) => /[\p{P}\p{S}]/u.test(c) && (c.codePointAt(0) < 0x80 || /\p{P}/u.test(c));
const isCjk = (c) => {
  const u = c.codePointAt(0);
  return (u >= 0x4e00 && u <= 0x9fff) || (u >= 0x3400 && u <= 0x4dbf) ||
    (u >= 0x20000 && u <= 0x2a6df) || (u >= 0xf900 && u <= 0xfaff);
};
function words(text, lower) {
  let s = text;
  if (lower)
    s = s.toLowerCase().normalize('NFD').replace(/\p{Mn}/gu, '');
  const out = [];
  let cur = '';
  for (const c of s) {
    if (/\s/u.test(c) || /\p{Cc}|\p{Cf}/u.test(c) || isPunct(c) || isCjk(c)) {
      if (cur)
        out.push(cur);
      cur = '';
      if (isPunct(c) || isCjk(c))
        out.push(c);
    } else {
      cur += c;
    }
  }
  if (cur)
    out.push(cur);
  return out;
}

// Deterministic: counts over the corpus, ties broken by the string.
function top(map, n, min) {
  return [...map.entries()].filter(([, c]) => c >= min)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .slice(0, n).map(([k]) => k);
}

function makeVocab(corpus, lower) {
  const v = [];
  const seen = new Set();
  const add = (t) => { if (!seen.has(t)) { seen.add(t); v.push(t); } };
  add('[PAD]');
  for (let i = 0; i < 99; i++) add(`[unused${i}]`);
  ['[UNK]', '[CLS]', '[SEP]', '[MASK]'].forEach(add);
  for (let i = 99; i < 120; i++) add(`[unused${i}]`);
  const wc = new Map(), first = new Map(), cont = new Map();
  const bump = (m, k) => m.set(k, (m.get(k) || 0) + 1);
  for (const item of corpus) {
    if (item.t === undefined)
      continue;
    for (const w of words(item.t, lower)) {
      bump(wc, w);
      const cs = [...w];
      bump(first, cs[0]);
      cs.slice(1).forEach((c) => bump(cont, c));
    }
  }
  // single characters: printable ASCII (lower case only when uncased, as
  // bert-base-uncased), then the corpus' characters seen at least twice
  for (let c = 33; c < 127; c++) {
    const ch = String.fromCharCode(c);
    if (!lower || ch === ch.toLowerCase())
      add(ch);
  }
  top(first, 700, 2).forEach(add);
  for (let c = 33; c < 127; c++) {
    const ch = String.fromCharCode(c);
    if (/[A-Za-z0-9]/.test(ch) && (!lower || ch === ch.toLowerCase()))
      add('##' + ch);
  }
  top(cont, 500, 2).forEach((c) => add('##' + c));
  // whole words, then pieces of the words that did not make it
  const whole = top(new Map([...wc].filter(([w]) => [...w].length > 1)), 900, 2);
  whole.forEach(add);
  const kept = new Set(whole);
  const pre = new Map(), suf = new Map();
  for (const [w, c] of wc) {
    const cs = [...w];
    if (kept.has(w) || cs.length < 3)
      continue;
    for (let n = 2; n <= 6 && n < cs.length; n++) {
      pre.set(cs.slice(0, n).join(''), (pre.get(cs.slice(0, n).join('')) || 0) + c);
      suf.set(cs.slice(-n).join(''), (suf.get(cs.slice(-n).join('')) || 0) + c);
    }
  }
  top(pre, 300, 2).forEach(add);
  top(suf, 500, 2).forEach((s) => add('##' + s));
  const vocab = {};
  v.forEach((t, i) => { vocab[t] = i; });
  return vocab;
}

// ---- the files BertTokenizerFast writes -------------------------------------

function tokenizerJson(vocab, lower) {
  const added = SPECIAL.map((t) => ({id: vocab[t], content: t, single_word: false, lstrip: false,
    rstrip: false, normalized: false, special: true}));
  const cls = vocab['[CLS]'], sep = vocab['[SEP]'];
  return {
    version: '1.0', truncation: null, padding: null, added_tokens: added,
    normalizer: {type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true,
      strip_accents: null, lowercase: lower},
    pre_tokenizer: {type: 'BertPreTokenizer'},
    post_processor: {type: 'TemplateProcessing',
      single: [{SpecialToken: {id: '[CLS]', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
        {SpecialToken: {id: '[SEP]', type_id: 0}}],
      pair: [{SpecialToken: {id: '[CLS]', type_id: 0}}, {Sequence: {id: 'A', type_id: 0}},
        {SpecialToken: {id: '[SEP]', type_id: 0}}, {Sequence: {id: 'B', type_id: 1}},
        {SpecialToken: {id: '[SEP]', type_id: 1}}],
      special_tokens: {'[CLS]': {id: '[CLS]', ids: [cls], tokens: ['[CLS]']},
        '[SEP]': {id: '[SEP]', ids: [sep], tokens: ['[SEP]']}}},
    decoder: {type: 'WordPiece', prefix: '##', cleanup: true},
    model: {type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##',
      max_input_chars_per_word: 100, vocab},
  };
}

function tokenizerConfig(vocab, lower) {
  const dec = {};
  for (const t of SPECIAL)
    dec[String(vocab[t])] = {content: t, lstrip: false, normalized: false, rstrip: false,
      single_word: false, special: true};
  return {added_tokens_decoder: dec, clean_up_tokenization_spaces: true, cls_token: '[CLS]',
    do_lower_case: lower, mask_token: '[MASK]', model_max_length: 512, pad_token: '[PAD]',
    sep_token: '[SEP]', strip_accents: null, tokenize_chinese_chars: true,
    tokenizer_class: 'BertTokenizer', unk_token: '[UNK]'};
}

const BN = (o) => Object.assign({type: 'BertNormalizer', clean_text: true,
  handle_chinese_chars: true, strip_accents: null, lowercase: true}, o);
const VARIANTS = [
  {name: 'uncased', dir: 'bert-uncased', normalizer: BN({})},
  {name: 'cased', dir: 'bert-cased', normalizer: BN({lowercase: false})},
  {name: 'uncased, accents kept', dir: 'bert-uncased', normalizer: BN({strip_accents: false})},
  {name: 'cased, accents stripped', dir: 'bert-cased',
    normalizer: BN({lowercase: false, strip_accents: true})},
  {name: 'cased, no Chinese-character split, no clean_text', dir: 'bert-cased',
    normalizer: BN({lowercase: false, handle_chinese_chars: false, clean_text: false})},
];

// One entry per corpus string: {"t"|"x", "r": [per variant results]}.
async function run(Tokenizer, corpus, tjs) {
  const toks = VARIANTS.map((v) => Tokenizer.fromString(JSON.stringify(
    Object.assign({}, tjs[v.dir], {normalizer: v.normalizer}))));
  const lines = [];
  for (const item of corpus) {
    const text = item.t !== undefined ? item.t : Buffer.from(item.x, 'hex').toString('utf8');
    const r = [];
    let prev = {};
    for (const tok of toks) {
      const ids = Array.from((await tok.encode(text)).getIds());
      const ids0 = Array.from((await tok.encode(text, null, {addSpecialTokens: false})).getIds());
      const dec = await tok.decode(ids, false);
      const dec1 = await tok.decode(ids, true);
      const o = {};
      if (!prev.ids || ids.join() !== prev.ids.join())
        o.ids = ids;
      if (ids0.join() !== ids.slice(1, -1).join())
        o.ids0 = ids0;
      if (dec !== prev.dec)
        o.dec = dec;
      if (dec1 !== dec.replace(/^\[CLS\] ?/, '').replace(/ ?\[SEP\]$/, ''))
        o.dec1 = dec1;
      r.push(o);
      prev = {ids, dec};
    }
    lines.push(JSON.stringify(Object.assign({}, item, {r})));
  }
  return lines;
}

(async () => {
  const {Tokenizer} = require('tokenizers');
  const corpus = build(SPECIAL);
  const out = path.join(root, 'tests/fixtures/tokenizer');
  const tjs = {};
  for (const [dir, lower] of [['bert-uncased', true], ['bert-cased', false]]) {
    const vocab = makeVocab(corpus, lower);
    tjs[dir] = tokenizerJson(vocab, lower);
    fs.mkdirSync(path.join(out, dir), {recursive: true});
    fs.writeFileSync(path.join(out, dir, 'tokenizer.json'), JSON.stringify(tjs[dir], null, 1) + '\n');
    fs.writeFileSync(path.join(out, dir, 'tokenizer_config.json'),
      JSON.stringify(tokenizerConfig(vocab, lower), null, 2) + '\n');
    console.log(`${dir}: ${Object.keys(vocab).length} vocabulary entries`);
  }
  const lines = await run(Tokenizer, corpus, tjs);
  if (process.argv.includes('--check')) {
    const other = require(path.join(root, '.deps/npm/node_modules/@anush008/tokenizers'));
    const lines2 = await run(other.Tokenizer, corpus, tjs);
    let bad = 0;
    lines.forEach((l, i) => {
      if (l !== lines2[i] && bad++ < 5)
        console.log(`oracles differ:\n  ${l.slice(0, 300)}\n  ${lines2[i].slice(0, 300)}`);
    });
    if (bad) {
      console.log(`${bad} lines differ between the two libraries`);
      process.exit(1);
    }
    console.log('@anush008/tokenizers (Rust tokenizers 0.22) agrees on every line');
  }
  const head = JSON.stringify({variants: VARIANTS});
  fs.writeFileSync(path.join(out, 'bert.jsonl'), [head, ...lines].join('\n') + '\n');
  console.log(`bert: ${VARIANTS.length} variants x ${corpus.length} strings -> ` +
    path.relative(root, path.join(out, 'bert.jsonl')));
})();
