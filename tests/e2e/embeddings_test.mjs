// /v1/embeddings through the openai client and raw fetch (see embeddings.sh).
import { createRequire } from 'node:module';
import fs from 'node:fs';

const [base, root, bertBase] = process.argv.slice(2);
const require = createRequire(`${root}/.deps/npm/`);
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0 });
let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); passed++; } catch (e) { failed++; console.log(`FAIL ${name}: ${e.stack || e}`); }
}
function assert(c, msg) { if (!c) throw new Error(msg); }
const model = 'tiny-chat';
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
const maxDiff = (a, b) => Math.max(...a.map((x, i) => Math.abs(x - b[i])));
const cos = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0) / (norm(a) * norm(b));
async function raw(body, url = base) {
  const r = await fetch(`${url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

await check('the client (base64 on the wire): a string, unit length, usage', async () => {
  const r = await client.embeddings.create({ model, input: 'Hello world' });
  assert(r.object === 'list' && r.data.length === 1 && r.data[0].object === 'embedding' && r.data[0].index === 0, JSON.stringify(r).slice(0, 200));
  const v = r.data[0].embedding;
  assert(Array.isArray(v) && v.length === 64 && Math.abs(norm(v) - 1) < 1e-5, `len ${v.length} norm ${norm(v)}`);
  assert(r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens && r.model === model, JSON.stringify(r.usage));
  const f = await client.embeddings.create({ model, input: 'Hello world', encoding_format: 'float' });
  assert(maxDiff(f.data[0].embedding, v) < 1e-6, 'float and base64 agree');
});

await check('every input form; batch invariance; token ids = the same text', async () => {
  const texts = ['Hello world', 'What does abate mean?', 'The cat sat on the mat.'];
  const batch = await client.embeddings.create({ model, input: texts, encoding_format: 'float' });
  assert(batch.data.length === 3 && batch.data.every((d, i) => d.index === i), 'indices');
  for (let i = 0; i < 3; i++) {
    const one = await client.embeddings.create({ model, input: texts[i], encoding_format: 'float' });
    assert(maxDiff(one.data[0].embedding, batch.data[i].embedding) < 1e-5, `input ${i}: alone vs batched ${maxDiff(one.data[0].embedding, batch.data[i].embedding)}`);
  }
  const ids = [5, 80, 121, 42, 7];
  const a = await client.embeddings.create({ model, input: ids, encoding_format: 'float' });
  const b = await client.embeddings.create({ model, input: [ids, [9, 10]], encoding_format: 'float' });
  assert(a.usage.prompt_tokens === 5 && b.usage.prompt_tokens === 7, `usage ${a.usage.prompt_tokens} ${b.usage.prompt_tokens}`);
  assert(maxDiff(a.data[0].embedding, b.data[0].embedding) < 1e-5 && b.data.length === 2, 'ids forms');
  assert(cos(b.data[0].embedding, b.data[1].embedding) < 0.9999, 'different inputs, different vectors');
  // sentence-transformers strips the text (Python's str.strip)
  const st = await client.embeddings.create({ model, input: ['\t Hello world\u3000\n', 'Hello world'], encoding_format: 'float' });
  assert(maxDiff(st.data[0].embedding, st.data[1].embedding) < 1e-6 && st.usage.prompt_tokens % 2 === 0, 'stripped');
});

await check('dimensions: the head, re-normalised', async () => {
  const full = (await client.embeddings.create({ model, input: 'Hello world', encoding_format: 'float' })).data[0].embedding;
  const r = await client.embeddings.create({ model, input: 'Hello world', dimensions: 16, encoding_format: 'float' });
  const v = r.data[0].embedding, n = norm(full.slice(0, 16));
  assert(v.length === 16 && maxDiff(v, full.slice(0, 16).map((x) => x / n)) < 1e-5, 'head / |head|');
});

await check('bad bodies: 4xx in OpenAI\'s shape', async () => {
  const bad = [
    [{ model, input: [] }, 400, 'input'], [{ model }, 400, 'input'], [{ model, input: '' }, 400, 'input'],
    [{ model, input: [[1, 2], 'a', 3] }, 400, 'input'], [{ model, input: [[]] }, 400, 'input'],
    [{ model, input: [99999] }, 400, 'input'], [{ model, input: [-1] }, 400, 'input'], [{ model, input: [1.5] }, 400, 'input'],
    [{ model, input: { a: 1 } }, 400, 'input'], [{ model, input: 'x', dimensions: 0 }, 400, 'dimensions'],
    [{ model, input: 'x', dimensions: 65 }, 400, 'dimensions'], [{ model, input: 'x', encoding_format: 'int8' }, 400, 'encoding_format'],
    [{ model, input: 'x', prompt_name: 'nope' }, 400, null], [{ model, input: 'x', prompt_name: 3 }, 400, 'prompt_name'],
    [{ model: 'other', input: 'x' }, 404, 'model'], ['{', 400, null], ['[1]', 400, null],
  ];
  for (const [body, status, param] of bad) {
    const r = await raw(body);
    assert(r.status === status && typeof r.body.error.message === 'string' && r.body.error.type &&
      (param === null || r.body.error.param === param), `${JSON.stringify(body)} -> ${r.status} ${JSON.stringify(r.body)}`);
  }
  try { await client.embeddings.create({ model, input: [] }); assert(false, 'no throw'); }
  catch (e) { assert(e instanceof OpenAI.BadRequestError, String(e)); }
  const inputs = Array.from({ length: 2049 }, () => 'a');
  assert((await raw({ model, input: inputs })).status === 400, 'more than 2048 inputs');
});

if (bertBase) {
  const ref = JSON.parse(fs.readFileSync(`${root}/tests/fixtures/embed/bert-mean/ref.json`, 'utf8'));
  const bert = new OpenAI({ baseURL: `${bertBase}/v1`, apiKey: 'none', maxRetries: 0 });
  await check('BERT (mean pooling, default prompt): sentence-transformers\' vectors', async () => {
    for (const pn of [null, 'passage']) {
      const cases = ref.cases.filter((c) => c.prompt_name === pn);
      const body = { model: 'bert-mean', input: cases.map((c) => c.text), encoding_format: 'float' };
      if (pn) body.prompt_name = pn;
      const r = await bert.embeddings.create(body);
      cases.forEach((c, i) => assert(1 - cos(r.data[i].embedding, c.embedding) < 1e-4,
        `${pn} ${JSON.stringify(c.text)}: cosine ${cos(r.data[i].embedding, c.embedding)}`));
      assert(r.usage.prompt_tokens === cases.reduce((s, c) => s + c.ids.length, 0), `usage ${r.usage.prompt_tokens}`);
    }
  });
  await check('BERT: no generation (an encoder), a 400', async () => {
    const r = await fetch(`${bertBase}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'hi', max_tokens: 2 }) });
    const b = await r.json();
    assert(r.status === 400 && /encoder/.test(b.error.message), `${r.status} ${JSON.stringify(b)}`);
  });
}

console.log(`embeddings: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
