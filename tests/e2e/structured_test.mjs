// Constrained decoding through the server, validated with ajv.
import { createRequire } from 'node:module';

const [base, root] = process.argv.slice(2);
const require = createRequire(`${root}/.deps/npm/`);
const OpenAI = require('openai');
const Ajv = require('ajv/dist/2020');
const addFormats = require('ajv-formats');
const ajv = new Ajv({ strict: false });
addFormats(ajv);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none' });
let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); passed++; } catch (e) { failed++; console.log(`FAIL ${name}: ${e.stack || e}`); }
}
function assert(c, msg) { if (!c) throw new Error(msg); }
const msgs = [{ role: 'user', content: 'Give me the data.' }];

const schemas = [
  { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer', minimum: 0, maximum: 150 } }, required: ['name', 'age'], additionalProperties: false },
  { type: 'array', items: { type: 'number' }, minItems: 1, maxItems: 4 },
  { type: 'object', properties: { ok: { type: 'boolean' }, tags: { type: 'array', items: { enum: ['a', 'b', 'c'] }, maxItems: 3 } }, required: ['ok'] },
  { type: 'object', properties: { id: { type: 'string', format: 'uuid' }, when: { type: 'string', format: 'date-time' } }, required: ['id', 'when'], additionalProperties: false },
  { $defs: { pt: { type: 'object', properties: { x: { type: 'integer' }, y: { type: 'integer' } }, required: ['x', 'y'], additionalProperties: false } }, type: 'object', properties: { a: { $ref: '#/$defs/pt' }, b: { $ref: '#/$defs/pt' } }, required: ['a', 'b'], additionalProperties: false },
  { anyOf: [{ type: 'string', maxLength: 5 }, { type: 'integer' }, { type: 'null' }] },
  { type: 'object', properties: { kind: { const: 'event' }, level: { enum: ['low', 'high'] }, email: { type: 'string', format: 'email' } }, required: ['kind', 'level', 'email'], additionalProperties: false },
  { type: 'object', properties: { code: { type: 'string', pattern: '^[A-Z]{3}-[0-9]{2}$' }, items: { type: 'array', prefixItems: [{ type: 'string', maxLength: 4 }, { type: 'integer' }], items: false } }, required: ['code', 'items'], additionalProperties: false },
];

await check(`${schemas.length} schemas x 4 seeds: outputs validate with ajv`, async () => {
  let valid = 0, total = 0, length = 0;
  for (const [i, schema] of schemas.entries()) {
    const validate = ajv.compile(schema);
    for (let seed = 1; seed <= 4; seed++) {
      const r = await client.chat.completions.create({ model: 'default_model', messages: msgs, max_tokens: 200,
        temperature: 1.0, seed, response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema } } });
      const c = r.choices[0];
      total++;
      if (c.finish_reason === 'length') { length++; continue; }
      let ok = false;
      try { ok = validate(JSON.parse(c.message.content)); } catch { ok = false; }
      assert(ok, `schema ${i} seed ${seed}: ${c.message.content} (${JSON.stringify(validate.errors)})`);
      valid++;
    }
  }
  console.log(`structured: ${valid}/${total} outputs valid, ${length} ended by max_tokens`);
});

await check('a small max_tokens still ends with valid output (finish_reason stop)', async () => {
  // The shortest valid output of each schema is at most 80 bytes, and the
  // tiny tokenizer has a token for every byte: 90 tokens always suffice.
  let stopped = 0;
  for (const [i, schema] of schemas.entries()) {
    const validate = ajv.compile(schema);
    for (let seed = 1; seed <= 3; seed++) {
      const r = await client.chat.completions.create({ model: 'default_model', messages: msgs, max_tokens: 90,
        temperature: 1.0, seed, response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema } } });
      const c = r.choices[0];
      assert(c.finish_reason === 'stop', `schema ${i} seed ${seed}: finish_reason ${c.finish_reason}: ${c.message.content}`);
      assert(r.usage.completion_tokens <= 90, `schema ${i}: ${r.usage.completion_tokens} tokens`);
      let ok = false;
      try { ok = validate(JSON.parse(c.message.content)); } catch { ok = false; }
      assert(ok, `schema ${i} seed ${seed}: ${c.message.content} (${JSON.stringify(validate.errors)})`);
      stopped++;
    }
  }
  // too small to fit any valid output: cut, and said so
  const r = await client.chat.completions.create({ model: 'default_model', messages: msgs, max_tokens: 3,
    temperature: 1.0, seed: 1, response_format: { type: 'json_schema', json_schema: { name: 's0', schema: schemas[0] } } });
  assert(r.choices[0].finish_reason === 'length', `max_tokens 3: ${JSON.stringify(r.choices[0])}`);
  console.log(`structured: ${stopped} outputs under max_tokens 90 complete and valid; max_tokens 3 ends with length`);
});

await check('json_object, guided_choice, guided_regex, guided_grammar, streaming', async () => {
  const o = await client.chat.completions.create({ model: 'default_model', messages: msgs, max_tokens: 200, temperature: 1, seed: 9, response_format: { type: 'json_object' } });
  if (o.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(o.choices[0].message.content);
    assert(typeof v === 'object' && v && !Array.isArray(v), 'object');
  }
  const post = async (body) => (await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: msgs, temperature: 1, seed: 5, max_tokens: 40, ...body }) })).json();
  const c = await post({ guided_choice: ['red', 'green', 'blue'] });
  assert(['red', 'green', 'blue'].includes(c.choices[0].message.content), JSON.stringify(c));
  const r = await post({ guided_regex: '[0-9]{3}-[a-z]{2}' });
  assert(/^[0-9]{3}-[a-z]{2}$/.test(r.choices[0].message.content), JSON.stringify(r));
  const g = await post({ guided_grammar: 'root ::= "a" ("b" | "c")+ "d"' });
  assert(/^a[bc]+d$/.test(g.choices[0].message.content) || g.choices[0].finish_reason === 'length', JSON.stringify(g));
  const stream = await client.chat.completions.create({ model: 'default_model', messages: msgs, max_tokens: 40, stream: true, temperature: 1, seed: 2, response_format: { type: 'json_schema', json_schema: { name: 's', schema: schemas[1] } } });
  let text = '', fin = null;
  for await (const ch of stream) for (const x of ch.choices) { text += x.delta.content ?? ''; fin = x.finish_reason ?? fin; }
  if (fin === 'stop') assert(ajv.validate(schemas[1], JSON.parse(text)), text);
});

await check('schemas that do not compile are 400s naming the problem', async () => {
  for (const [body, param] of [
    [{ response_format: { type: 'json_schema', json_schema: { schema: { type: 'object', propertyNames: { maxLength: 3 } } } } }, 'response_format'],
    [{ response_format: { type: 'xml' } }, 'response_format'],
    [{ guided_regex: '(' }, 'guided_regex'],
    [{ guided_grammar: 'root ::= "a' }, 'guided_grammar'],
    [{ guided_choice: [] }, 'guided_choice'],
    [{ guided_json: '{not json' }, 'guided_json'],
    [{ guided_json: { type: 'string' }, guided_regex: 'a' }, 'guided_regex'],
  ]) {
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: msgs, ...body }) });
    const j = await r.json();
    assert(r.status === 400 && j.error.param === param && j.error.message.length > 0, `${JSON.stringify(body)}: ${r.status} ${JSON.stringify(j)}`);
  }
  assert((await fetch(`${base}/health`)).status === 200, 'healthy');
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
