// One family's tool calls through the openai client (see tools.sh).
import { createRequire } from 'node:module';

const [base, root, family] = process.argv.slice(2);
const require = createRequire(`${root}/.deps/npm/`);
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none' });
let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); passed++; } catch (e) { failed++; console.log(`FAIL ${family} ${name}: ${e.stack || e}`); }
}
function assert(c, msg) { if (!c) throw new Error(msg); }

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 } }, required: ['city'], additionalProperties: false } } }];
const call = '{"name": "get_weather", "arguments": {"city": "Paris"}}';
// the family's call syntax, as a literal GBNF string
const lit = (s) => JSON.stringify(s);
const outputs = {
  hermes: `<tool_call>\n${call}\n</tool_call>`,
  llama3: '{"name": "get_weather", "parameters": {"city": "Paris"}}',
  mistral: `[TOOL_CALLS][${call}]`,
};
const grammar = `root ::= ${lit(outputs[family])}`;
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

await check('non-streaming: tool_calls, finish_reason tool_calls', async () => {
  const r = await client.chat.completions.create({ model: 'default_model', messages, tools, max_tokens: 80, guided_grammar: grammar });
  const c = r.choices[0];
  assert(c.finish_reason === 'tool_calls', `finish ${c.finish_reason}: ${JSON.stringify(c)}`);
  const tc = c.message.tool_calls;
  assert(tc.length === 1 && tc[0].type === 'function' && tc[0].function.name === 'get_weather', JSON.stringify(tc));
  const idOk = family === 'mistral' ? /^[A-Za-z0-9]{9}$/ : /^call_[A-Za-z0-9]{24}$/;
  assert(JSON.parse(tc[0].function.arguments).city === 'Paris' && idOk.test(tc[0].id), JSON.stringify(tc));
  assert(!c.message.content, `content ${c.message.content}`);
});

await check('streaming: call deltas accumulate to the same call', async () => {
  const s = await client.chat.completions.create({ model: 'default_model', messages, tools, max_tokens: 80, guided_grammar: grammar, stream: true });
  const calls = [];
  let finish = null, content = '';
  for await (const ch of s)
    for (const c of ch.choices) {
      content += c.delta.content ?? '';
      for (const d of c.delta.tool_calls ?? []) {
        calls[d.index] ??= { id: '', name: '', args: '' };
        if (d.id) calls[d.index].id = d.id;
        if (d.function?.name) calls[d.index].name = d.function.name;
        calls[d.index].args += d.function?.arguments ?? '';
      }
      finish = c.finish_reason ?? finish;
    }
  assert(finish === 'tool_calls' && calls.length === 1 && calls[0].name === 'get_weather', `${finish} ${JSON.stringify(calls)}`);
  assert(JSON.parse(calls[0].args).city === 'Paris' && content === '', `${calls[0].args} / "${content}"`);
});

await check('tool results round-trip through the template; tool_choice none gives text', async () => {
  // the call as the server returned it, id included, goes back in the history
  const first = await client.chat.completions.create({ model: 'default_model', messages, tools, max_tokens: 80, guided_grammar: grammar });
  const tc = first.choices[0].message.tool_calls[0];
  const history = [...messages,
    { role: 'assistant', content: null, tool_calls: [tc] },
    { role: 'tool', tool_call_id: tc.id, content: '{"temp": 21}' }];
  const r = await client.chat.completions.create({ model: 'default_model', messages: history, tools, max_tokens: 40, guided_choice: ['It is 21 degrees.'] });
  assert(r.choices[0].message.content === 'It is 21 degrees.' && !r.choices[0].message.tool_calls, JSON.stringify(r.choices[0]));
  const n = await client.chat.completions.create({ model: 'default_model', messages, tools, tool_choice: 'none', max_tokens: 80, guided_grammar: grammar });
  assert(n.choices[0].finish_reason === 'stop' && !n.choices[0].message.tool_calls && n.choices[0].message.content === outputs[family], JSON.stringify(n.choices[0]));
});

await check('tool_choice required and a named function force a valid call (grammar), streaming and not', async () => {
  const two = [...tools, { type: 'function', function: { name: 'get_time', description: 'Time in a zone',
    parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 12 } }, required: ['zone'], additionalProperties: false } } }];
  let completed = 0;
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({ model: 'default_model', messages, tools: two, tool_choice: 'required', max_tokens: 200, temperature: 1, seed });
    const c = r.choices[0];
    if (c.finish_reason === 'length') continue;
    completed++;
    assert(c.finish_reason === 'tool_calls' && c.message.tool_calls.length >= 1, JSON.stringify(c));
    for (const tc of c.message.tool_calls) /* list formats (Mistral) may hold parallel calls */
      assert(['get_weather', 'get_time'].includes(tc.function.name) && typeof JSON.parse(tc.function.arguments) === 'object', JSON.stringify(tc));
  }
  assert(completed > 0, 'no forced call completed within max_tokens');
  const named = await client.chat.completions.create({ model: 'default_model', messages, tools: two, max_tokens: 200, temperature: 1, seed: 4,
    tool_choice: { type: 'function', function: { name: 'get_time' } }, stream: true });
  let name = '', args = '', finish = null;
  for await (const ch of named)
    for (const c of ch.choices) {
      for (const d of c.delta.tool_calls ?? []) if (d.index === 0) { name += d.function?.name ?? ''; args += d.function?.arguments ?? ''; }
      finish = c.finish_reason ?? finish;
    }
  if (finish !== 'length') {
    assert(finish === 'tool_calls' && name === 'get_time', `${finish} ${name}`);
    const a = JSON.parse(args);
    assert(typeof a.zone === 'string' && a.zone.length <= 12 && Object.keys(a).length === 1, args);
  }
});

await check('a malformed call comes back as text with finish_reason stop', async () => {
  const bad = { hermes: '<tool_call>\n{"name": oops}\n</tool_call>', llama3: '{"name": "get_weather", "parameters": {"city": ', mistral: '[TOOL_CALLS][{"name": 1}]' }[family];
  const r = await client.chat.completions.create({ model: 'default_model', messages, tools, max_tokens: 80, guided_grammar: `root ::= ${lit(bad)}` });
  assert(r.choices[0].finish_reason === 'stop' && r.choices[0].message.content === bad && !r.choices[0].message.tool_calls, JSON.stringify(r.choices[0]));
});

console.log(`${family}: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
