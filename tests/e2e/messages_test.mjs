// /v1/messages through @anthropic-ai/sdk and raw fetch (see messages.sh).
import { createRequire } from 'node:module';

const [base, root] = process.argv.slice(2);
const require = createRequire(`${root}/.deps/npm/`);
const Anthropic = require('@anthropic-ai/sdk');
const client = new Anthropic({ baseURL: base, apiKey: 'none', maxRetries: 0 });
let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); passed++; } catch (e) { failed++; console.log(`FAIL ${name}: ${e.stack || e}`); }
}
function assert(c, msg) { if (!c) throw new Error(msg); }
const model = 'tiny-chat';
const messages = [{ role: 'user', content: 'Hello world' }];
// raw SSE: [{event, data}] in order
async function sse(body) {
  const r = await fetch(`${base}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
  assert(r.status === 200 && r.headers.get('content-type') === 'text/event-stream', `status ${r.status}`);
  const events = [];
  for (const block of (await r.text()).split('\n\n').filter((b) => b.trim())) {
    const lines = block.split('\n').filter((l) => !l.startsWith(':'));
    if (!lines.length) continue;
    assert(lines.length === 2 && lines[0].startsWith('event: ') && lines[1].startsWith('data: '), `block ${JSON.stringify(block)}`);
    const data = JSON.parse(lines[1].slice(6));
    assert(data.type === lines[0].slice(7), `event ${lines[0]} carries ${data.type}`);
    events.push(data);
  }
  return events;
}

let greedy;
await check('non-streaming: message shape, text block, usage, stop_reason', async () => {
  const m = await client.messages.create({ model, max_tokens: 12, temperature: 0, system: 'Be brief.', messages });
  assert(m.type === 'message' && m.role === 'assistant' && /^msg_[0-9a-f]{24}$/.test(m.id) && m.model === model, JSON.stringify(m));
  assert(['end_turn', 'max_tokens'].includes(m.stop_reason) && m.stop_sequence === null, m.stop_reason);
  assert(m.content.every((b) => b.type === 'text'), JSON.stringify(m.content));
  const u = m.usage;
  assert(u.input_tokens > 0 && u.cache_read_input_tokens >= 0 && u.cache_creation_input_tokens === 0, JSON.stringify(u));
  assert(u.output_tokens > 0 && u.output_tokens <= 12, JSON.stringify(u));
  greedy = { text: m.content.map((b) => b.text).join(''), m };
  // system as blocks is the same prompt; a repeat is served from the prompt cache
  const again = await client.messages.create({ model, max_tokens: 12, temperature: 0, system: [{ type: 'text', text: 'Be brief.' }], messages });
  assert(again.content.map((b) => b.text).join('') === greedy.text, 'system blocks == system string');
  assert(again.usage.input_tokens + again.usage.cache_read_input_tokens === u.input_tokens + u.cache_read_input_tokens &&
    again.usage.cache_read_input_tokens > 0, `cache ${JSON.stringify(again.usage)}`);
});

await check('stop_sequences: stop_reason stop_sequence names the sequence, text ends before it', async () => {
  const chars = [...greedy.text];
  const i = chars.findIndex((c, k) => k > 0 && c !== '\uFFFD' && chars[k + 1] && chars[k + 1] !== '\uFFFD');
  assert(i >= 0, `no stop sequence to pick in "${greedy.text}"`);
  const stop = chars[i] + chars[i + 1];
  const m = await client.messages.create({ model, max_tokens: 12, temperature: 0, system: 'Be brief.', messages, stop_sequences: [stop, 'never'] });
  const text = m.content.map((b) => b.text).join('');
  assert(m.stop_reason === 'stop_sequence' && m.stop_sequence === stop, `${m.stop_reason} ${m.stop_sequence}`);
  assert(text === greedy.text.slice(0, greedy.text.indexOf(stop)), `"${text}"`);
});

await check('streaming: exact event order; deltas concatenate to the non-streamed text', async () => {
  const ev = await sse({ model, max_tokens: 12, temperature: 0, system: 'Be brief.', messages });
  const types = ev.map((e) => e.type);
  const expect = ['message_start', 'content_block_start', 'ping', ...Array(types.length - 6).fill('content_block_delta'),
    'content_block_stop', 'message_delta', 'message_stop'];
  assert(JSON.stringify(types) === JSON.stringify(expect), types.join(' '));
  const ms = ev[0].message;
  assert(ms.role === 'assistant' && ms.content.length === 0 && ms.stop_reason === null &&
    ms.usage.input_tokens + ms.usage.cache_read_input_tokens > 0, JSON.stringify(ms)); // (a repeat: all cached)
  assert(ev[1].index === 0 && ev[1].content_block.type === 'text' && ev[1].content_block.text === '', JSON.stringify(ev[1]));
  const text = ev.filter((e) => e.type === 'content_block_delta').map((e) => (assert(e.index === 0 && e.delta.type === 'text_delta', 'delta'), e.delta.text)).join('');
  assert(text === greedy.text, `"${text}" vs "${greedy.text}"`);
  const md = ev[ev.length - 2];
  assert(md.delta.stop_reason === greedy.m.stop_reason && md.usage.output_tokens === greedy.m.usage.output_tokens, JSON.stringify(md));
  // the SDK's stream helper assembles the same message
  const final = await client.messages.stream({ model, max_tokens: 12, temperature: 0, system: 'Be brief.', messages }).finalMessage();
  assert(final.content.map((b) => b.text).join('') === greedy.text && final.stop_reason === greedy.m.stop_reason, JSON.stringify(final));
});

const tools = [{ name: 'get_weather', description: 'Weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'], additionalProperties: false } }];
await check('tool_use: a forced call (tool_choice tool / any), a tool_result round trip', async () => {
  const m = await client.messages.create({ model, max_tokens: 200, temperature: 0, messages: [{ role: 'user', content: 'Weather in Paris?' }],
    tools, tool_choice: { type: 'tool', name: 'get_weather' } });
  assert(m.stop_reason === 'tool_use', `${m.stop_reason} ${JSON.stringify(m.content)}`);
  const use = m.content.find((b) => b.type === 'tool_use');
  assert(use && use.name === 'get_weather' && ['Paris', 'Rome'].includes(use.input.city) && typeof use.id === 'string', JSON.stringify(m.content));
  const any = await client.messages.create({ model, max_tokens: 200, temperature: 0, messages: [{ role: 'user', content: 'Weather in Paris?' }],
    tools, tool_choice: { type: 'any' } });
  assert(any.stop_reason === 'tool_use' && any.content.some((b) => b.type === 'tool_use'), JSON.stringify(any));
  // the call and its result go back through the template: a longer result is a longer prompt
  const turn = (result) => client.messages.create({ model, max_tokens: 4, temperature: 0, tools, messages: [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: [{ type: 'text', text: 'Let me look.' }, use] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: result }, { type: 'text', text: 'Thanks' }] }] });
  const short = await turn('21'), long = await turn([{ type: 'text', text: 'It is 21 degrees and sunny in Paris today.' }]);
  const n = (r) => r.usage.input_tokens + r.usage.cache_read_input_tokens;
  assert(n(long) > n(short) && n(short) > n(m), `prompts ${n(m)} ${n(short)} ${n(long)}`);
  const none = await client.messages.create({ model, max_tokens: 4, temperature: 0, messages: [{ role: 'user', content: 'Hi' }], tools, tool_choice: { type: 'none' } });
  assert(none.content.every((b) => b.type === 'text'), JSON.stringify(none.content));
});

await check('tool_use streaming: content_block_start tool_use, input_json_delta, stop_reason tool_use', async () => {
  const body = { model, max_tokens: 200, temperature: 0, messages: [{ role: 'user', content: 'Weather?' }], tools, tool_choice: { type: 'tool', name: 'get_weather' } };
  const ev = await sse(body);
  const types = ev.map((e) => e.type);
  assert(types[0] === 'message_start' && types[1] === 'content_block_start' && types[2] === 'ping' && types.at(-1) === 'message_stop', types.join(' '));
  const start = ev[1].content_block;
  assert(start.type === 'tool_use' && start.name === 'get_weather' && JSON.stringify(start.input) === '{}', JSON.stringify(start));
  const json = ev.filter((e) => e.type === 'content_block_delta').map((e) => (assert(e.delta.type === 'input_json_delta', 'delta type'), e.delta.partial_json)).join('');
  assert(['Paris', 'Rome'].includes(JSON.parse(json).city), json);
  assert(ev.at(-2).delta.stop_reason === 'tool_use', JSON.stringify(ev.at(-2)));
  const final = await client.messages.stream(body).finalMessage();
  const use = final.content.find((b) => b.type === 'tool_use');
  assert(use && JSON.stringify(use.input) === JSON.stringify(JSON.parse(json)), JSON.stringify(final.content));
});

await check('count_tokens: the prompt length of the same body', async () => {
  const c = await client.messages.countTokens({ model, system: 'Be brief.', messages });
  assert(c.input_tokens === greedy.m.usage.input_tokens + greedy.m.usage.cache_read_input_tokens, `${JSON.stringify(c)} vs ${JSON.stringify(greedy.m.usage)}`);
  const r = await fetch(`${base}/v1/messages/count_tokens`, { method: 'POST', body: JSON.stringify({ messages: [] }) });
  const j = await r.json();
  assert(r.status === 400 && j.type === 'error' && j.error.type === 'invalid_request_error', JSON.stringify(j));
});

await check('bad bodies: 4xx in Anthropic\'s error shape', async () => {
  const cases = [
    ['not json', 400, /Invalid JSON/],
    ['[1]', 400, /JSON dictionary/],
    [JSON.stringify({ messages }), 400, /max_tokens/],
    [JSON.stringify({ max_tokens: 0, messages }), 400, /max_tokens/],
    [JSON.stringify({ max_tokens: 5 }), 400, /messages/],
    [JSON.stringify({ max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }), 400, /role/],
    [JSON.stringify({ max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }), 400, /not supported yet: image/],
    [JSON.stringify({ max_tokens: 5, messages: [{ role: 'user', content: 5 }] }), 400, /content/],
    [JSON.stringify({ max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'tool_result' }] }] }), 400, /tool_use_id/],
    [JSON.stringify({ max_tokens: 5, messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 'x', name: 'f', input: 3 }] }] }), 400, /input/],
    [JSON.stringify({ max_tokens: 5, messages: [...messages, { role: 'assistant', content: 'Sure' }] }), 400, /prefill/],
    [JSON.stringify({ max_tokens: 5, messages, temperature: 'hot' }), 400, /temperature/],
    [JSON.stringify({ max_tokens: 5, messages, stop_sequences: 'x' }), 400, /stop_sequences/],
    [JSON.stringify({ max_tokens: 5, messages, system: [{ type: 'image' }] }), 400, /system/],
    [JSON.stringify({ max_tokens: 5, messages, tools: [{ name: 'f' }] }), 400, /input_schema/],
    [JSON.stringify({ max_tokens: 5, messages, tools: [{ type: 'web_search_20250305', name: 'web_search' }] }), 400, /not supported yet/],
    [JSON.stringify({ max_tokens: 5, messages, tools, tool_choice: { type: 'maybe' } }), 400, /tool_choice/],
    [JSON.stringify({ max_tokens: 5, messages, tools, tool_choice: { type: 'tool' } }), 400, /name/],
    [JSON.stringify({ max_tokens: 5, messages, thinking: { type: 'enabled', budget_tokens: 1024 } }), 400, /not supported yet: thinking/],
    [JSON.stringify({ max_tokens: 5, messages, model: 'claude-opus' }), 404, /does not exist/],
    [JSON.stringify({ max_tokens: 5, messages: [{ role: 'user', content: 'x'.repeat(2 << 20) }] }), 413, /exceeds/],
  ];
  for (const [body, status, re] of cases) {
    const r = await fetch(`${base}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const j = await r.json();
    assert(r.status === status, `${body.slice(0, 80)}: status ${r.status} ${JSON.stringify(j)}`);
    const type = { 400: 'invalid_request_error', 404: 'not_found_error', 413: 'request_too_large' }[status];
    assert(j.type === 'error' && j.error.type === type && re.test(j.error.message) && Object.keys(j).length === 2, `${body.slice(0, 80)}: ${JSON.stringify(j)}`);
  }
  // the SDK raises its typed errors from these
  try { await client.messages.create({ model, max_tokens: 0, messages }); assert(false, 'no throw'); }
  catch (e) { assert(e instanceof Anthropic.BadRequestError && e.error.error.type === 'invalid_request_error', String(e)); }
  // the server still serves
  const m = await client.messages.create({ model, max_tokens: 2, messages });
  assert(m.type === 'message', 'alive');
});

console.log(`messages: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
