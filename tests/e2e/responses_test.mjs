// /v1/responses through the openai client and raw fetch (see responses.sh).
import { createRequire } from 'node:module';

const [base, root] = process.argv.slice(2);
const require = createRequire(`${root}/.deps/npm/`);
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0 });
let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); passed++; } catch (e) { failed++; console.log(`FAIL ${name}: ${e.stack || e}`); }
}
function assert(c, msg) { if (!c) throw new Error(msg); }
const model = 'tiny-chat';
async function sse(body) {
  const r = await fetch(`${base}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
  assert(r.status === 200 && r.headers.get('content-type') === 'text/event-stream', `status ${r.status}`);
  const events = [];
  for (const block of (await r.text()).split('\n\n').filter((b) => b.trim())) {
    const lines = block.split('\n').filter((l) => !l.startsWith(':'));
    if (!lines.length) continue;
    assert(lines.length === 2 && lines[0].startsWith('event: ') && lines[1].startsWith('data: '), `block ${JSON.stringify(block)}`);
    const data = JSON.parse(lines[1].slice(6));
    assert(data.type === lines[0].slice(7) && data.sequence_number === events.length, `event ${lines[0]} #${data.sequence_number}`);
    events.push(data);
  }
  return events;
}

let greedy;
await check('non-streaming: response object, message item, usage', async () => {
  const r = await client.responses.create({ model, input: 'Hello world', instructions: 'Be brief.', max_output_tokens: 12, temperature: 0 });
  assert(r.object === 'response' && /^resp_[0-9a-f]{24}$/.test(r.id) && r.model === model && r.instructions === 'Be brief.', JSON.stringify(r));
  assert(['completed', 'incomplete'].includes(r.status) && r.store === true && r.previous_response_id === null, r.status);
  if (r.status === 'incomplete') assert(r.incomplete_details.reason === 'max_output_tokens', JSON.stringify(r.incomplete_details));
  assert(r.output.length <= 1, JSON.stringify(r.output));
  const u = r.usage;
  assert(u.input_tokens > 0 && u.output_tokens > 0 && u.output_tokens <= 12 && u.total_tokens === u.input_tokens + u.output_tokens &&
    u.input_tokens_details.cached_tokens >= 0 && u.output_tokens_details.reasoning_tokens === 0, JSON.stringify(u));
  if (r.output.length) {
    const m = r.output[0];
    assert(m.type === 'message' && m.role === 'assistant' && /^msg_/.test(m.id) && m.content[0].type === 'output_text', JSON.stringify(m));
  }
  greedy = r;
  // items in place of the string: the same prompt, so the same greedy text
  const again = await client.responses.create({ model, max_output_tokens: 12, temperature: 0, instructions: 'Be brief.',
    input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hello ' }, { type: 'input_text', text: 'world' }] }] });
  assert(again.output_text === greedy.output_text && again.usage.input_tokens === u.input_tokens, `"${again.output_text}" vs "${greedy.output_text}"`);
  assert(again.usage.input_tokens_details.cached_tokens > 0, 'prompt cache');
  const dev = await client.responses.create({ model, max_output_tokens: 12, temperature: 0,
    input: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: 'Hello world' }] });
  assert(dev.output_text === greedy.output_text, 'developer message == instructions');
});

await check('streaming: event order, sequence numbers, deltas == the non-streamed text', async () => {
  const ev = await sse({ model, input: 'Hello world', instructions: 'Be brief.', max_output_tokens: 12, temperature: 0 });
  const types = ev.map((e) => e.type);
  const done = greedy.status === 'completed' ? 'response.completed' : 'response.incomplete';
  const deltas = types.filter((t) => t === 'response.output_text.delta').length;
  const expect = ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
    ...Array(deltas).fill('response.output_text.delta'), 'response.output_text.done', 'response.content_part.done',
    'response.output_item.done', done];
  assert(JSON.stringify(types) === JSON.stringify(expect), types.join(' '));
  assert(ev[0].response.status === 'in_progress' && ev[0].response.output.length === 0, JSON.stringify(ev[0]));
  const text = ev.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert(text === greedy.output_text && ev.at(-4).text === text, `"${text}"`);
  const item = ev.at(-2).item;
  assert(item.id === ev[2].item.id && ev[3].item_id === item.id && item.content[0].text === text, JSON.stringify(item));
  const final = ev.at(-1).response;
  assert(final.id === ev[0].response.id && final.usage.output_tokens === greedy.usage.output_tokens && final.output[0].id === item.id, JSON.stringify(final));
  // the client's stream helper accepts the events and assembles the same response
  const fr = await client.responses.stream({ model, input: 'Hello world', instructions: 'Be brief.', max_output_tokens: 12, temperature: 0 }).finalResponse();
  assert(fr.output_text === greedy.output_text && fr.status === greedy.status, JSON.stringify(fr));
});

const tools = [{ type: 'function', name: 'get_weather', description: 'Weather in a city', strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } }, required: ['city'], additionalProperties: false } }];
await check('function calls: forced call item, streaming argument events, output round trip', async () => {
  const input = [{ role: 'user', content: 'Weather in Paris?' }];
  const r = await client.responses.create({ model, input, tools, tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 200, temperature: 0 });
  const call = r.output.find((o) => o.type === 'function_call');
  assert(r.status === 'completed' && call && call.name === 'get_weather' && /^fc_/.test(call.id) && call.status === 'completed', JSON.stringify(r.output));
  assert(['Paris', 'Rome'].includes(JSON.parse(call.arguments).city) && typeof call.call_id === 'string', call.arguments);
  const req = await client.responses.create({ model, input, tools, tool_choice: 'required', max_output_tokens: 200, temperature: 0 });
  assert(req.output.some((o) => o.type === 'function_call'), JSON.stringify(req.output));
  const ev = await sse({ model, input, tools, tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 200, temperature: 0 });
  const types = ev.map((e) => e.type);
  assert(types[2] === 'response.output_item.added' && ev[2].item.type === 'function_call' && ev[2].item.arguments === '', types.join(' '));
  const args = ev.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
  const adone = ev.find((e) => e.type === 'response.function_call_arguments.done');
  assert(args === call.arguments && adone.arguments === args && adone.item_id === ev[2].item.id, `${args} / ${JSON.stringify(adone)}`);
  assert(types.at(-2) === 'response.output_item.done' && types.at(-1) === 'response.completed', types.join(' '));
  const fr = await client.responses.stream({ model, input, tools, tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 200, temperature: 0 }).finalResponse();
  assert(fr.output.find((o) => o.type === 'function_call')?.arguments === args, JSON.stringify(fr.output));
  // the call and its output go back through the template: a longer output is a longer prompt
  const turn = (output) => client.responses.create({ model, tools, max_output_tokens: 4, temperature: 0, input: [...input,
    { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
    { type: 'function_call_output', call_id: call.call_id, output }] });
  const short = await turn('21'), long = await turn('It is 21 degrees and sunny in Paris today.');
  assert(long.usage.input_tokens > short.usage.input_tokens && short.usage.input_tokens > r.usage.input_tokens,
    `prompts ${r.usage.input_tokens} ${short.usage.input_tokens} ${long.usage.input_tokens}`);
});

await check('text.format json_schema: the output parses and validates', async () => {
  const schema = { type: 'object', properties: { answer: { type: 'string', enum: ['yes', 'no'] } }, required: ['answer'], additionalProperties: false };
  const r = await client.responses.create({ model, input: 'Is it raining?', max_output_tokens: 100, temperature: 0,
    text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } } });
  assert(r.status === 'completed' && ['yes', 'no'].includes(JSON.parse(r.output_text).answer), r.output_text);
  assert(r.text.format.type === 'json_schema', JSON.stringify(r.text));
  const o = await client.responses.create({ model, input: 'JSON please', max_output_tokens: 100, temperature: 0, text: { format: { type: 'json_object' } } });
  assert(o.status !== 'completed' || typeof JSON.parse(o.output_text) === 'object', o.output_text);
});

await check('stored responses: previous_response_id continues the conversation; retrieve, delete', async () => {
  const r1 = await client.responses.create({ model, input: 'Hello world', instructions: 'Be brief.', max_output_tokens: 6, temperature: 0 });
  assert(r1.store === true && r1.previous_response_id === null, 'stored by default');
  const r2 = await client.responses.create({ model, input: 'And then?', previous_response_id: r1.id, max_output_tokens: 4, temperature: 0 });
  assert(r2.previous_response_id === r1.id, 'echoed');
  // the same conversation sent whole (instructions do not carry over, as OpenAI's)
  const whole = await client.responses.create({ model, store: false, max_output_tokens: 4, temperature: 0, input: [
    { role: 'user', content: 'Hello world' }, { role: 'assistant', content: r1.output_text }, { role: 'user', content: 'And then?' }] });
  assert(whole.usage.input_tokens === r2.usage.input_tokens && whole.output_text === r2.output_text,
    `${whole.usage.input_tokens} vs ${r2.usage.input_tokens}`);
  // a call and its output across two requests
  const c1 = await client.responses.create({ model, input: [{ role: 'user', content: 'Weather in Paris?' }], tools,
    tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 200, temperature: 0 });
  const call = c1.output.find((o) => o.type === 'function_call');
  const c2 = await client.responses.create({ model, tools, previous_response_id: c1.id, max_output_tokens: 4, temperature: 0,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '21' }] });
  const c2whole = await client.responses.create({ model, tools, store: false, max_output_tokens: 4, temperature: 0, input: [
    { role: 'user', content: 'Weather in Paris?' }, { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
    { type: 'function_call_output', call_id: call.call_id, output: '21' }] });
  assert(c2.usage.input_tokens === c2whole.usage.input_tokens, `${c2.usage.input_tokens} vs ${c2whole.usage.input_tokens}`);
  // streamed responses are stored too; retrieve gives the final object
  const sr = await client.responses.stream({ model, input: 'Hi', max_output_tokens: 3, temperature: 0 }).finalResponse();
  const got = await client.responses.retrieve(sr.id);
  assert(got.id === sr.id && got.output_text === sr.output_text && got.usage.output_tokens === sr.usage.output_tokens, JSON.stringify(got));
  const del = await client.responses.delete(r1.id).catch((e) => e);
  const g = await fetch(`${base}/v1/responses/${r1.id}`);
  assert(!(del instanceof Error) && g.status === 404 && (await g.json()).error.type === 'invalid_request_error', `delete ${del} / ${g.status}`);
  const gone = await fetch(`${base}/v1/responses`, { method: 'POST', body: JSON.stringify({ input: 'x', previous_response_id: r1.id }) });
  assert(gone.status === 400 && (await gone.json()).error.param === 'previous_response_id', 'deleted id refused');
  assert((await fetch(`${base}/v1/responses/${whole.id}`)).status === 404, 'store: false keeps nothing');
  const d2 = await fetch(`${base}/v1/responses/${r1.id}`, { method: 'DELETE' });
  assert(d2.status === 404, 'a second delete');
});

await check('bad bodies: 400s in OpenAI\'s shape naming the field', async () => {
  const cases = [
    ['not json', null],
    [JSON.stringify({ model }), 'input'],
    [JSON.stringify({ input: 5 }), 'input'],
    [JSON.stringify({ input: [] }), 'input'],
    [JSON.stringify({ input: 'x', previous_response_id: 'resp_1' }), 'previous_response_id', /not found/],
    [JSON.stringify({ input: 'x', previous_response_id: 5 }), 'previous_response_id'],
    [JSON.stringify({ input: 'x', store: 'yes' }), 'store'],
    [JSON.stringify({ input: 'x', background: true }), 'background'],
    [JSON.stringify({ input: 'x', max_output_tokens: 0 }), 'max_output_tokens'],
    [JSON.stringify({ input: 'x', instructions: 3 }), 'instructions'],
    [JSON.stringify({ input: [{ role: 'wizard', content: 'x' }] }), 'input'],
    [JSON.stringify({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }), 'input', /does not accept images/],
    [JSON.stringify({ input: [{ type: 'function_call', name: 'f' }] }), 'input'],
    [JSON.stringify({ input: [{ type: 'function_call_output', output: 'x' }] }), 'input'],
    [JSON.stringify({ input: [{ type: 'item_reference', id: 'x' }] }), 'input', /not supported yet/],
    [JSON.stringify({ input: 'x', tools: [{ type: 'web_search' }] }), 'tools', /not supported yet/],
    [JSON.stringify({ input: 'x', tools: 3 }), 'tools'],
    [JSON.stringify({ input: 'x', tools, tool_choice: { type: 'file_search' } }), 'tool_choice'],
    [JSON.stringify({ input: 'x', tools, tool_choice: 'sometimes' }), 'tool_choice'],
    [JSON.stringify({ input: 'x', text: { format: { type: 'yaml' } } }), 'text.format'],
    [JSON.stringify({ input: 'x', text: { format: { type: 'json_schema', name: 'x' } } }), 'text.format'],
    [JSON.stringify({ input: 'x', text: { format: { type: 'json_schema', name: 'x', schema: { $ref: '#/$defs/missing' } } } }), 'text.format'],
    [JSON.stringify({ input: 'x', temperature: -1 }), 'temperature'],
    [JSON.stringify({ input: 'x', reasoning: { effort: 'high' } }), 'reasoning'],
  ];
  for (const [body, param, re] of cases) {
    const r = await fetch(`${base}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const j = await r.json();
    assert(r.status === 400 && j.error && j.error.type === 'invalid_request_error' && j.error.param === param, `${body.slice(0, 80)}: ${r.status} ${JSON.stringify(j)}`);
    assert(!re || re.test(j.error.message), j.error.message);
  }
  try { await client.responses.create({ model, input: 'x', previous_response_id: 'resp_none' }); assert(false, 'no throw'); }
  catch (e) { assert(e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id', String(e)); }
});

console.log(`responses: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
