// One transformers media fixture through a running `hearth serve` with the
// official openai client (tests/e2e/media_parity.sh): the request that
// tests/e2e/lib/parity_model.py wrote, greedy, 8 tokens, logprobs; the
// tokens (the logprob entries' ids and their texts "wN") equal ref.json's
// greedy tokens, each logprob within 1e-4, the prompt as long as ref.json's.
// Prints one line; exits 1 on any difference.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const [base, reqPath, root] = process.argv.slice(2);
const require = createRequire(`${root}/.deps/npm/`);
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0 });
const req = JSON.parse(readFileSync(reqPath, 'utf8'));
const fam = req.family;
const fails = [];
const check = (c, msg) => { if (!c) fails.push(msg); };

const models = await client.models.list();
const model = models.data[0];
const kind = req.content.some((p) => p.type === 'input_audio') ? 'audio' : 'image';
check(model.modalities && model.modalities.includes(kind), `/v1/models: modalities ${JSON.stringify(model.modalities)}`);
const r = await client.chat.completions.create({
  model: model.id, messages: [{ role: 'user', content: req.content }],
  temperature: 0, max_tokens: req.greedy.length, logprobs: true, top_logprobs: 1,
});
const c = r.choices[0];
check(r.usage.prompt_tokens === req.prompt.length,
  `usage.prompt_tokens ${r.usage.prompt_tokens}, ref.json's prompt has ${req.prompt.length}`);
check(c.finish_reason === 'length' && r.usage.completion_tokens === req.greedy.length,
  `finish_reason ${c.finish_reason}, ${r.usage.completion_tokens} tokens, want 'length' and ${req.greedy.length}`);
const got = (c.logprobs && c.logprobs.content) || [];
check(got.length === req.greedy.length, `${got.length} logprob entries, want ${req.greedy.length}`);
let worst = 0;
req.greedy.forEach((want, i) => {
  const e = got[i];
  if (!e) return;
  const id = /^w(\d+)$/.exec((e.token || '').trim());
  check(id && Number(id[1]) === want.token && e.id === want.token,
    `token ${i}: '${e.token}' (id ${e.id}), ref.json's is ${want.token}`);
  const d = Math.abs(e.logprob - want.logprob);
  worst = Math.max(worst, d);
  check(d <= 1e-4, `token ${i}: logprob ${e.logprob}, ref.json's ${want.logprob} (|d| ${d.toExponential(2)})`);
});
const text = got.map((e) => (e.token || '').trim()).join(' ');
if (fails.length) {
  for (const f of fails) console.log(`FAIL ${fam}: ${f}`);
  console.log(`${fam}: got ${text}; want ${req.greedy.map((g) => `w${g.token}`).join(' ')}`);
  process.exit(1);
}
console.log(`${fam}: ${req.prompt.length} prompt tokens, ${got.length} greedy tokens equal to ` +
  `transformers', logprobs within ${worst.toExponential(2)}`);
