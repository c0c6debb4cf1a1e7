// Deterministic tokenizer test corpus: >= 2,000 strings across English,
// code, CJK, emoji, combining marks, whitespace runs, digits, special-token
// look-alikes, mixed scripts, and invalid UTF-8 (as byte strings).
// Each item is {t: string} or {x: hex} (raw bytes, possibly invalid UTF-8).
'use strict';

function rng(seed) { // mulberry32
  return () => {
    seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ('the of and to in is was that for on with as by at from his her they ' +
  'be this have not are but had which one were all we when your can said there use an ' +
  'each how their if will up other about out many then them these so some would make ' +
  'like him into time has look two more write go see number no way could people my than ' +
  'first water been call who oil its now find long down day did get come made may part ' +
  'tokenizer transformer attention inference quantization throughput latency server ' +
  'naïve café résumé coöperate Zürich São Paulo Łódź İstanbul straße ΑΒΓ Москва').split(' ');
const CONTRACTIONS = ["I'm", "don't", "it's", "we've", "they're", "you'll", "he'd", "IT'S",
  "WE'VE", "THEY'RE", "YOU'LL", "HE'D", "I'M", "can't", "won't", "'s", "'t", "''", "o'clock"];
const CODE = [
  'int main(int argc, char **argv) {\n    printf("hello %d\\n", argc);\n    return 0;\n}\n',
  'def f(x):\n\treturn [i ** 2 for i in range(x) if i % 3 == 0]\n',
  '{"model": "qwen3", "messages": [{"role": "user", "content": "hi"}], "stream": true}',
  '<div class="a"><span id=\'x\'>&amp; &lt;tag&gt;</span></div>',
  'for (size_t i = 0; i < n; i++) { y[i] += a * x[i]; } // axpy',
  'SELECT id, name FROM users WHERE age >= 21 ORDER BY name DESC LIMIT 10;',
  'fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![1, 2, 3]; Ok(()) }',
  '    if (a && b || !c) { x <<= 2; y >>= 1; z ^= 0xFF; }\r\n',
  '#include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n',
  'const re = /^[a-z0-9_-]{3,16}$/; console.log(`template ${re}`);',
  'git commit -m "fix: handle \\t tabs"  && ./configure --prefix=/usr/local',
  '$ echo $((1 + 2)) ; ls -la ~/.config | grep -v "^d"',
];
const CJK = ['你好，世界！', '今天天气很好，我们去公园散步吧。', '日本語のテキストを分割します。',
  'カタカナとひらがなと漢字', '한국어 문장입니다. 안녕하세요!', '中文標點符號：「引號」、《書名》……',
  '机器学习模型的推理速度', '東京都渋谷区', '가나다라마바사', '𠀀𠀁𪚥 (CJK Ext B)', '全角ＡＢＣ１２３　空白'];
const EMOJI = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🇫🇷🇯🇵', '❤️', '🏳️‍🌈', '🤖 robot', '☕️ coffee', '🧑🏿‍💻',
  '✨🔥💯', '🫠', '👩🏻‍🦰', '1️⃣ #️⃣', '🐈‍⬛'];
const COMBINING = ['e\u0301', 'a\u0308o\u0308u\u0308', 'n\u0303', 'Z\u0335\u0321a\u0337l\u0336g\u0334o\u0338',
  '\u1100\u1161\u11a8', 'ﬁ ﬂ ﬀ', 'Å Å Å', '\u0915\u094d\u0937', 'x\u20dd', 'q\u0323\u0307',
  'ǅ ǈ ǋ', 'Ⅻ ⅻ ½ ²³', 'ｈｅｌｌｏ', '\u00e9\u0065\u0301', '\u212b\u00c5'];
const SPACES = [' ', '  ', '\t', '\n', '\r\n', '\n\n', '   \n  ', '\u00a0', '\u3000', '\u2003',
  '\u0085', '\u2028', '\u200b', '\u000b', '\u000c', '\t\t \n'];
const SCRIPTS = [[0x41, 0x7a], [0xc0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x5ff],
  [0x600, 0x6ff], [0x900, 0x97f], [0xe00, 0xe7f], [0x3040, 0x30ff], [0x4e00, 0x9fff],
  [0xac00, 0xd7a3], [0x1f300, 0x1f6ff], [0x2000, 0x206f], [0x20, 0x7e], [0x2190, 0x22ff]];

function build(specials) {
  const r = rng(20260301);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const int = (lo, hi) => lo + Math.floor(r() * (hi - lo + 1));
  const out = [];
  const add = (t) => out.push({t});
  const sentence = () => {
    const n = int(3, 18);
    const w = [];
    for (let i = 0; i < n; i++) {
      let x = r() < 0.1 ? pick(CONTRACTIONS) : pick(WORDS);
      if (r() < 0.15) x = x[0].toUpperCase() + x.slice(1);
      if (r() < 0.05) x = x.toUpperCase();
      w.push(x);
    }
    return w.join(' ') + pick(['.', '!', '?', ',', ';', ':', '', '...', ' -', '"']);
  };
  // fixed edge cases
  ['', ' ', '  ', 'a', 'A', '\n', ' \n ', 'Hello world', ' Hello world', 'Hello  world ',
   'hello\n\nworld', "I'm here", "'s'S'll'LL", '1234567890', '3.14159', '1,000,000', '007',
   '٣٤٥ ١٢', '一二三 123 ４５６', 'x'.repeat(300), ' '.repeat(200), '\n'.repeat(50),
   'ab'.repeat(150), '🙂'.repeat(40), '\u0000', 'a\u0000b', '\ufeffBOM', '\ud7ff\ue000\uffff',
   '\u{10ffff}', '\u{1d11e}'].forEach(add);
  for (let i = 0; i < 400; i++) add(sentence());
  for (let i = 0; i < 150; i++) add(sentence() + ' ' + sentence());
  for (let i = 0; i < 150; i++) {
    let c = pick(CODE);
    if (r() < 0.5) c = c.replace(/ {4}/g, pick(['  ', '\t', '        ']));
    if (r() < 0.3) c = pick(CODE) + c;
    add(c);
  }
  for (let i = 0; i < 150; i++) add(pick(CJK) + (r() < 0.5 ? ' ' + sentence() : pick(CJK)));
  for (let i = 0; i < 120; i++) add(sentence().split(' ').map((w) => r() < 0.3 ? w + pick(EMOJI) : w).join(' '));
  for (let i = 0; i < 120; i++) add(pick(COMBINING) + ' ' + pick(WORDS) + pick(COMBINING) + pick(['', ' ', '.']));
  for (let i = 0; i < 200; i++) {
    let s = '';
    const n = int(1, 8);
    for (let k = 0; k < n; k++) s += (r() < 0.5 ? pick(SPACES).repeat(int(1, 12)) : pick(WORDS));
    add(s);
  }
  for (let i = 0; i < 150; i++) {
    const d = () => String(int(0, 10 ** int(1, 12)));
    add(pick([`${d()}`, `${d()}.${d()}`, `v${d()}.${d()}.${d()}`, `$${d()},${d()}`, `${d()}${d()}${d()}`,
      `call 555-${d()}`, `${d()}%`, `-${d()}e-${int(1, 30)}`, `${d()} + ${d()} = ${d()}`]));
  }
  // special-token look-alikes: exact, glued, broken, repeated
  const look = specials.length ? specials : ['<s>', '</s>'];
  for (let i = 0; i < 250; i++) {
    const sp = pick(look);
    const variants = [sp, sp + sp, 'x' + sp + 'y', ' ' + sp + ' ', sp.slice(0, -1), sp.slice(1),
      sp.toUpperCase(), sp.replace('|', '| '), sentence() + sp + sentence(), sp + '\n' + sentence(),
      '<' + sp, sp + '>', pick(['<|im_start|>', '<|im_end|>', '<start_of_turn>', '<end_of_turn>',
        '<|begin_of_text|>', '<|eot_id|>', '<|endoftext|>', '<bos>', '<eos>', '<pad>', '<unk>',
        '<think>', '</think>', '<tool_call>', '<|reserved_special_token_7|>', '<unused3>',
        '[multimodal]', '<mask>', '<|header_start|>', '<0x41>', '▁▁hi'])];
    add(pick(variants));
  }
  for (let i = 0; i < 300; i++) { // random code points from many scripts
    let s = '';
    const n = int(1, 40);
    for (let k = 0; k < n; k++) {
      const [lo, hi] = pick(SCRIPTS);
      let cp = int(lo, hi);
      if (cp >= 0xd800 && cp <= 0xdfff) cp = 0x20;
      s += String.fromCodePoint(cp);
      if (r() < 0.15) s += ' ';
    }
    add(s);
  }
  // invalid UTF-8: truncated sequences, lone continuations, overlongs,
  // surrogates, bytes > F4, mixed with text
  const BAD = ['80', 'bf', 'c0af', 'c3', 'e282', 'f09f98', 'eda080', 'f4908080', 'ff', 'fe',
    'c3 28', 'e228a1', 'f0288cbc', 'e0808f', 'f8888080af'];
  for (let i = 0; i < 120; i++) {
    const pre = Buffer.from(r() < 0.5 ? sentence() : pick(CJK)).toString('hex');
    const bad = pick(BAD).replace(/ /g, '');
    const post = Buffer.from(r() < 0.5 ? pick(WORDS) : '').toString('hex');
    out.push({x: r() < 0.3 ? bad : pre + bad + post});
  }
  return out;
}

module.exports = {build, rng};
