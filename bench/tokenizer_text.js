// The benchmark text: the tokenizer test corpus (English, code, CJK, emoji,
// whitespace, digits...) joined by newlines, repeated to about N MB.
'use strict';
const {build} = require('../tools/tokref/corpus.js');
const mb = Number(process.argv[2] || 4);
const items = build(['<|im_start|>']).filter((x) => x.t !== undefined).map((x) => x.t);
let s = '';
for (let i = 0; s.length < mb * 1e6; i++) s += items[i % items.length] + '\n';
process.stdout.write(s);
