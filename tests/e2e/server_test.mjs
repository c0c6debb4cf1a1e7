// Drives a running `hearth serve` with the official openai client, raw
// fetch and a malformed-request corpus. Prints "N passed, M failed".
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import net from 'node:net';

const [base, bin, model, root] = process.argv.slice(2);
const require = createRequire(`${root}/.deps/npm/`);
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none' });
let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); passed++; }
  catch (e) { failed++; console.log(`FAIL ${name}: ${e.stack || e}`); }
}
function assert(c, msg) { if (!c) throw new Error(msg); }
const msgs = [{ role: 'user', content: 'Hello world' }];

await check('health body is mlx-lm\'s', async () => {
  const r = await fetch(`${base}/health`);
  assert(r.status === 200 && (await r.text()) === '{"status": "ok"}', 'health');
});

await check('models list and lookup', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert(ids.length === 1 && ids[0] === 'tiny-chat', JSON.stringify(ids));
  const r = await fetch(`${base}/v1/models/nope`);
  assert(r.status === 404, 'unknown model id');
});

let greedy;
await check('chat completion: shape, usage, logprobs', async () => {
  const r = await client.chat.completions.create({ model: 'tiny-chat', messages: msgs, max_tokens: 12, logprobs: true, temperature: 0 });
  assert(r.object === 'chat.completion' && r.id.startsWith('chatcmpl-'), 'object/id');
  const c = r.choices[0];
  assert(c.message.role === 'assistant' && ['stop', 'length'].includes(c.finish_reason), 'choice');
  assert(r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, 'usage');
  assert(r.usage.prompt_tokens_details.cached_tokens === 0, 'cached_tokens');
  assert(c.logprobs.content.length === r.usage.completion_tokens || c.finish_reason === 'stop', 'logprobs per token');
  greedy = { text: c.message.content ?? '', ids: c.logprobs.content.map((e) => e.id), finish: c.finish_reason };
});

await check('greedy chat through the server == hearth generate on the rendered prompt', async () => {
  const msgFile = `${model}/msgs.json`;
  (await import('node:fs')).writeFileSync(msgFile, JSON.stringify(msgs));
  const prompt = execFileSync(bin, ['template', '--model', model, '--messages', msgFile]).toString();
  const ids = JSON.parse(execFileSync(bin, ['tokenize', '--model', model, '--no-add-special', '--json', '--text', prompt]).toString());
  const out = JSON.parse(execFileSync(bin, ['generate', '--model', model, '--prompt-tokens', ids.join(','), '--max-tokens', '12', '--json']).toString());
  assert(JSON.stringify(out.tokens.slice(0, greedy.ids.length)) === JSON.stringify(greedy.ids),
    `server ${greedy.ids} vs generate ${out.tokens}`);
});

await check('streaming: chunks concatenate to the non-streamed text; usage chunk; [DONE]', async () => {
  const stream = await client.chat.completions.create({ model: 'tiny-chat', messages: msgs, max_tokens: 12, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, n = 0;
  for await (const ch of stream) {
    n++;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      assert(c.delta.role === 'assistant', 'role in every delta');
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert(text === greedy.text, `stream "${text}" vs "${greedy.text}"`);
  assert(finish === greedy.finish && usage && usage.completion_tokens > 0 && n > 2, 'finish/usage');
  const raw = await (await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: msgs, max_tokens: 3, stream: true }) })).text();
  assert(raw.trimEnd().endsWith('data: [DONE]'), 'ends with [DONE]');
});

await check('text completion with top_logprobs', async () => {
  const r = await client.completions.create({ model: 'tiny-chat', prompt: 'The cat', max_tokens: 6, top_logprobs: 3, temperature: 0 });
  assert(r.object === 'text_completion' && typeof r.choices[0].text === 'string', 'shape');
  const lp = r.choices[0].logprobs.content;
  assert(lp.length === 6 && lp.every((e) => e.top_logprobs.length === 3), 'top_logprobs');
  assert(lp.every((e) => e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob), 'sorted');
  // greedy: the token is the best one, and its two reports are one value
  assert(lp.every((e) => e.id === e.top_logprobs[0].id && e.logprob === e.top_logprobs[0].logprob),
    `token vs top: ${JSON.stringify(lp[0])}`);
});

await check('stop strings end the text before the stop, even split across tokens', async () => {
  const full = greedy.text;
  // a stop string that starts inside the greedy text
  const i = Math.max(1, Math.floor(full.length / 2));
  const stop = full.slice(i, i + 2);
  if (stop.length < 2) return;
  const r = await client.chat.completions.create({ model: 'tiny-chat', messages: msgs, max_tokens: 12, stop: [stop] });
  const got = r.choices[0].message.content ?? '';
  assert(got === full.slice(0, full.indexOf(stop)), `"${got}" vs "${full.slice(0, full.indexOf(stop))}"`);
  assert(r.choices[0].finish_reason === 'stop', 'finish stop');
  const s = await client.chat.completions.create({ model: 'tiny-chat', messages: msgs, max_tokens: 12, stop, stream: true });
  let t = '';
  for await (const ch of s) for (const c of ch.choices) t += c.delta.content ?? '';
  assert(t === got, `stream "${t}" vs "${got}"`);
});

await check('seeded sampling is reproducible', async () => {
  const req = { model: 'tiny-chat', messages: msgs, max_tokens: 10, temperature: 1.0, top_p: 0.9, seed: 7, logprobs: true };
  const a = await client.chat.completions.create(req), b = await client.chat.completions.create(req);
  assert(JSON.stringify(a.choices[0].logprobs) === JSON.stringify(b.choices[0].logprobs), 'same seed, same tokens');
});

await check('n > 1: choice i is the n = 1 answer with seed + i; usage counts the prompt once', async () => {
  const base = { model: 'tiny-chat', messages: msgs, max_tokens: 10, temperature: 1.0, logprobs: true };
  const r = await client.chat.completions.create({ ...base, n: 3, seed: 7 });
  assert(r.choices.length === 3 && r.choices.every((c, i) => c.index === i), JSON.stringify(r.choices.map((c) => c.index)));
  let completion = 0;
  for (let i = 0; i < 3; i++) {
    const one = await client.chat.completions.create({ ...base, seed: 7 + i });
    const a = r.choices[i], b = one.choices[0];
    assert(JSON.stringify(a.logprobs.content.map((e) => e.id)) === JSON.stringify(b.logprobs.content.map((e) => e.id)) &&
      a.message.content === b.message.content && a.finish_reason === b.finish_reason, `choice ${i} differs from seed ${7 + i}`);
    completion += one.usage.completion_tokens;
    if (i === 0) assert(r.usage.prompt_tokens === one.usage.prompt_tokens, 'prompt tokens once');
  }
  assert(r.usage.completion_tokens === completion && r.usage.total_tokens === r.usage.prompt_tokens + completion,
    `usage ${JSON.stringify(r.usage)} vs completion ${completion}`);
  const ids = new Set(r.choices.map((c) => JSON.stringify(c.logprobs.content.map((e) => e.id))));
  assert(ids.size > 1, 'sampled choices all equal');
  const c = await client.completions.create({ model: 'tiny-chat', prompt: 'The cat', max_tokens: 5, n: 2, temperature: 0 });
  assert(c.choices.length === 2 && c.choices[0].text === c.choices[1].text && c.choices[1].index === 1, 'greedy completions');
});

await check('n > 1 streaming: per-index chunks concatenate to the non-streamed choices; summed usage; [DONE]', async () => {
  const req = { model: 'tiny-chat', messages: msgs, max_tokens: 10, temperature: 1.0, seed: 11, n: 4 };
  const want = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const text = ['', '', '', ''], finish = [null, null, null, null];
  let usage = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      assert(c.index >= 0 && c.index < 4 && finish[c.index] === null, `chunk for ${c.index} after its finish`);
      text[c.index] += c.delta.content ?? '';
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  for (let i = 0; i < 4; i++)
    assert(text[i] === (want.choices[i].message.content ?? '') && finish[i] === want.choices[i].finish_reason,
      `stream choice ${i} "${text[i]}" vs "${want.choices[i].message.content}"`);
  assert(usage && usage.completion_tokens === want.usage.completion_tokens && usage.prompt_tokens === want.usage.prompt_tokens,
    `usage ${JSON.stringify(usage)} vs ${JSON.stringify(want.usage)}`);
});

await check('n > 1 shares the prompt: the other choices take its KV blocks from the prompt cache', async () => {
  const long = [{ role: 'user', content: 'Sharing one prefill among several choices. '.repeat(8) }];
  const before = (await (await fetch(`${base}/stats`)).json()).tokens.cached;
  const r = await client.chat.completions.create({ model: 'tiny-chat', messages: long, max_tokens: 4, n: 4, temperature: 1.0, seed: 3 });
  const after = (await (await fetch(`${base}/stats`)).json()).tokens.cached;
  const p = r.usage.prompt_tokens, shared = Math.min(Math.floor(p / 32) * 32, p - 1);
  const first = r.usage.prompt_tokens_details.cached_tokens; // choice 0's: what earlier requests left
  assert(p > 64 && first < 32, `prompt ${p}, cached ${first}`);
  // at least: /stats counts every request, and one an earlier check left
  // in flight (a cancelled stream, the --isolate relay) may land in between
  assert(after - before >= first + 3 * shared, `cached ${after - before}, want ${first} + 3 x ${shared}`);
});

// malformed requests: [path, body, status, param]
const corpus = [
  ['/v1/chat/completions', '{', 400, null],
  ['/v1/chat/completions', '[1,2]', 400, null],
  ['/v1/chat/completions', '', 400, null],
  ['/v1/chat/completions', '{"messages": 5}', 400, 'messages'],
  ['/v1/chat/completions', '{"messages": []}', 400, 'messages'],
  ['/v1/chat/completions', '{"messages": [{"content": "x"}]}', 400, 'messages'],
  ['/v1/chat/completions', '{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', 400, 'messages'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, max_tokens: 'a' }), 400, 'max_tokens'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, max_tokens: -1 }), 400, 'max_tokens'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, temperature: -1 }), 400, 'temperature'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, top_p: 2 }), 400, 'top_p'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, top_k: 1.5 }), 400, 'top_k'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, top_k: 100000 }), 400, 'top_k'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, min_p: 3 }), 400, 'min_p'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, xtc_threshold: 0.9 }), 400, 'xtc_threshold'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, top_logprobs: 12 }), 400, 'top_logprobs'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, logprobs: 3 }), 400, 'logprobs'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, stream: 'yes' }), 400, 'stream'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, stop: 5 }), 400, 'stop'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, logit_bias: { x: 1 } }), 400, 'logit_bias'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, logit_bias: { 99999: 1 } }), 400, 'logit_bias'],
  // token ids written canonically only (issue 40: "5", "05" and "+5" summed as one token)
  ...['05', '+5', ' 5', '5 ', '5.0', '-1', '0x5', '', '99999999999999999999'].map((k) =>
    ['/v1/chat/completions', JSON.stringify({ messages: msgs, logit_bias: { [k]: 1 } }), 400, 'logit_bias']),
  ...[101, -100.5, 3e38].map((b) =>
    ['/v1/chat/completions', JSON.stringify({ messages: msgs, logit_bias: { 5: b } }), 400, 'logit_bias']),
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, seed: 'x' }), 400, 'seed'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, n: 17 }), 400, 'n'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, n: 0 }), 400, 'n'],
  ['/v1/completions', JSON.stringify({ prompt: 'a', n: 1.5 }), 400, 'n'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, model: 'gpt-4' }), 404, 'model'],
  ['/v1/chat/completions', JSON.stringify({ messages: msgs, chat_template_kwargs: 3 }), 400, 'chat_template_kwargs'],
  ['/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(20000) }] }), 400, 'messages'],
  ['/v1/completions', '{"prompt": 3}', 400, 'prompt'],
  ['/v1/completions', '{}', 400, 'prompt'],
  ['/v1/nope', '{}', 404, null],
  ['/v1/chat/completions', '{"messages": "' + 'a'.repeat(1100000) + '"}', 413, null],
];
await check(`malformed corpus (${corpus.length} requests) gets OpenAI-shaped errors`, async () => {
  for (const [path, body, status, param] of corpus) {
    const r = await fetch(`${base}${path}`, { method: 'POST', body });
    const j = await r.json();
    assert(r.status === status, `${path} ${body.slice(0, 80)}: status ${r.status}, want ${status}: ${JSON.stringify(j)}`);
    assert(typeof j.error?.message === 'string' && j.error.message.length > 0 && 'type' in j.error && 'code' in j.error,
      `error shape for ${body.slice(0, 60)}: ${JSON.stringify(j)}`);
    assert((j.error.param ?? null) === param, `param ${j.error.param} want ${param} for ${body.slice(0, 60)}`);
  }
  const h = await fetch(`${base}/health`);
  assert(h.status === 200, 'still healthy');
});

await check('logit_bias at the bounds of [-100, 100] is served', async () => {
  const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST',
    body: JSON.stringify({ messages: msgs, max_tokens: 2, logit_bias: { 0: -100, 5: 100, 370: -100.0 } }) });
  assert(r.status === 200, `status ${r.status}: ${await r.text()}`);
});

await check('a huge max_tokens is capped to what the context leaves after the prompt', async () => {
  for (const mt of [Number.MAX_SAFE_INTEGER]) { // was a 400 above 2^30
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST',
      body: JSON.stringify({ messages: msgs, max_tokens: mt, logit_bias: { 370: -100 } }) });
    const j = await r.json();
    assert(r.status === 200, `max_tokens ${mt}: status ${r.status}: ${JSON.stringify(j)}`);
    assert(j.choices[0].finish_reason === 'length', `finish ${j.choices[0].finish_reason}`);
    assert(j.usage.prompt_tokens + j.usage.completion_tokens === 4096,
      `prompt ${j.usage.prompt_tokens} + completion ${j.usage.completion_tokens} != n_ctx 4096`);
  }
});

await check('invalid UTF-8 and garbage bytes do not crash the server', async () => {
  for (const bytes of [[0xff, 0xfe, 0x7b], [0x7b, 0x22, 0xc3, 0x28, 0x22, 0x3a, 0x31, 0x7d]]) {
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: new Uint8Array(bytes) });
    assert(r.status === 400, `status ${r.status}`);
  }
  const sock = net.connect(new URL(base).port, '127.0.0.1');
  sock.write('GARBAGE / HTTP/9.9\r\n\r\n');
  await new Promise((res) => {
    sock.on('data', () => {}).on('close', res).on('error', res);
    setTimeout(res, 2000);
  });
  sock.destroy();
  assert((await fetch(`${base}/health`)).status === 200, 'healthy after garbage');
});

await check('/health and /stats answer within 50 ms during a long generation; disconnect frees the KV', async () => {
  const ctrl = new AbortController();
  const body = JSON.stringify({ messages: msgs, max_tokens: 5000, stream: true, temperature: 1.0, logit_bias: { 370: -100 } });
  const resp = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body, signal: ctrl.signal });
  const reader = resp.body.getReader();
  await reader.read();
  let worst = 0;
  for (let i = 0; i < 10; i++) {
    const t0 = performance.now();
    const h = await fetch(`${base}/health`);
    await h.text();
    const s = await (await fetch(`${base}/stats`)).json();
    worst = Math.max(worst, performance.now() - t0);
    assert(s.requests.active === 1, `active ${s.requests.active}`);
  }
  assert(worst < 100, `health+stats took ${worst.toFixed(1)} ms`);
  console.log(`health+stats worst ${worst.toFixed(1)} ms during generation`);
  ctrl.abort();
  let s;
  for (let i = 0; i < 100; i++) {
    s = await (await fetch(`${base}/stats`)).json();
    if (s.requests.active === 0 && s.kv_cache.blocks_used === 0) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert(s.requests.active === 0 && s.kv_cache.blocks_used === 0, `after disconnect: ${JSON.stringify(s)}`);
});

await check('prompt cache: a repeated prompt reuses all its tokens and its last logits and gives the same tokens', async () => {
  let total = 0;
  for (const repeat of [12, 1]) { // longer, then shorter than a 32-token KV block
    const msgs = [{ role: 'user', content: 'The quick brown fox jumps over the lazy dog. '.repeat(repeat) }];
    const req = { model: 'tiny-chat', messages: msgs, max_tokens: 8, logprobs: true };
    const a = await client.chat.completions.create(req), b = await client.chat.completions.create(req);
    assert(a.usage.prompt_tokens_details.cached_tokens < a.usage.prompt_tokens, 'first');
    const c = b.usage.prompt_tokens_details.cached_tokens;
    assert(c === b.usage.prompt_tokens, `cached ${c} of ${b.usage.prompt_tokens}`);
    assert(JSON.stringify(a.choices[0].logprobs) === JSON.stringify(b.choices[0].logprobs), 'same tokens');
    total += c;
  }
  const s = await (await fetch(`${base}/stats`)).json();
  assert(s.kv_cache.blocks_cached > 0 && s.tokens.cached >= total, JSON.stringify(s.kv_cache));
  assert(s.kv_cache.bytes_per_token > 0 &&
         s.kv_cache.bytes_per_token * s.kv_cache.blocks_total * 32 === s.kv_cache.bytes,
         JSON.stringify(s.kv_cache));
});

await check('CORS preflight', async () => {
  const r = await fetch(`${base}/v1/chat/completions`, { method: 'OPTIONS' });
  assert(r.status === 204 && r.headers.get('access-control-allow-origin') === '*', 'cors');
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
