// Agent-style prompt-cache benchmark body: see bench/agent.sh.
//   node bench/agent.mjs BIN MODEL PREFIX_TOKENS TURNS OFF_TURNS
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { start as serve, stop, post } from './lib/server.mjs';

const [bin, model, prefixStr, turnsStr, offStr] = process.argv.slice(2);
const prefixTokens = Number(prefixStr), turns = Number(turnsStr);
const offTurns = Math.min(Number(offStr), turns);
const ctx = 1024 * Math.ceil((prefixTokens + turns * 64 + 256) / 1024);
const start = (args) => serve(bin, ['--model', model, '--threads', '2', '--ctx', String(ctx),
  ...args]);

// the shared prefix: a system prompt and tool definitions, as many as make
// the first turn's prompt about prefixTokens tokens (measured with the
// model's own template and tokenizer)
const tool = (i) => ({ type: 'function', function: { name: `tool_${i}`, description: `Tool number ${i}: reads the file system entry ${i * 7} and reports its size, owner and permissions in detail.`, parameters: { type: 'object', properties: { path: { type: 'string' }, depth: { type: 'integer' } }, required: ['path'] } } });
const system = { role: 'system', content: 'You are a coding agent. Use the tools when needed. ' + 'Follow the repository conventions. '.repeat(20) };
const tmp = mkdtempSync('/tmp/hearth-agent-');
function promptTokens(nTools) {
  writeFileSync(`${tmp}/m.json`, JSON.stringify(conversation(0, [])));
  writeFileSync(`${tmp}/t.json`, JSON.stringify([...Array(nTools).keys()].map(tool)));
  writeFileSync(`${tmp}/p.txt`, execFileSync(bin, ['template', '--model', model, '--messages',
    `${tmp}/m.json`, '--tools', `${tmp}/t.json`]));
  return JSON.parse(execFileSync(bin, ['tokenize', '--model', model, '--file', `${tmp}/p.txt`,
    '--json'])).length;
}
const base0 = promptTokens(0), per = (promptTokens(100) - base0) / 100;
const tools = [...Array(Math.max(0, Math.round((prefixTokens - base0) / per))).keys()].map(tool);

async function turn(base, messages, maxTokens = 16) {
  const t0 = performance.now();
  let buf = '', first = 0, last = 0, n = 0, text = '', usage = null;
  await post(`${base}/v1/chat/completions`, {
    messages, tools, max_tokens: maxTokens, stream: true, logprobs: true, temperature: 0,
    stream_options: { include_usage: true } }, (chunk) => {
    buf += chunk;
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith('data: {')) continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) usage = j.usage;
      const c = j.choices?.[0];
      if (c?.logprobs) { const now = performance.now(); if (!first) first = now; last = now; n++; }
      text += c?.delta?.content ?? '';
    }
  });
  const r = { ttft: first - t0, tps: n > 1 ? (n - 1) / ((last - first) / 1000) : 0, text, usage };
  console.error(`  ${new Date().toISOString().slice(11, 19)} prompt ${usage.prompt_tokens} ` +
    `cached ${usage.prompt_tokens_details.cached_tokens} TTFT ${r.ttft.toFixed(0)} ms ` +
    `decode ${r.tps.toFixed(2)} tokens/s`);
  return r;
}

function conversation(k, replies) {
  const m = [system];
  for (let t = 0; t <= k; t++) {
    m.push({ role: 'user', content: `Step ${t}: look at module ${t} and tell me what to change.` });
    if (t < k) m.push({ role: 'assistant', content: replies[t] || 'ok' });
  }
  return m;
}

// 1. cache on (RAM + SSD tier): every turn; then decode 64 tokens after
//    conversation R (its prompt is cached: decode with the SSD tier on)
const R = offTurns - 1, ssd = mkdtempSync('/tmp/hearth-ssd-');
console.error('cache on (RAM + SSD tier):');
const a = await start(['--ssd-cache', ssd]);
const replies = [], on = [];
for (let k = 0; k < turns; k++) {
  const r = await turn(a.base, conversation(k, replies));
  replies.push(r.text || 'ok');
  on.push(r);
}
const dSsd = await turn(a.base, conversation(R, replies), 64);
await stop(a);
// 2. restart: re-attach conversation R from the SSD tier
console.error('restart, re-attach:');
const b = await start(['--ssd-cache', ssd]);
const re = await turn(b.base, conversation(R, replies));
await stop(b);
rmSync(ssd, { recursive: true, force: true });
// 3. cache off: the first offTurns turns, the same prompts; the last one is
//    conversation R's full re-prefill and decodes 64 tokens (SSD tier off)
console.error('cache off:');
const c = await start(['--prompt-cache', '0']);
const off = [];
for (let k = 0; k < offTurns; k++)
  off.push(await turn(c.base, conversation(k, replies), k === R ? 64 : 16));
await stop(c);
rmSync(tmp, { recursive: true, force: true });

console.log(`prefix ${on[0].usage.prompt_tokens} prompt tokens at turn 1 (${tools.length} tools), ` +
  `${turns} turns, cache-off arm ${offTurns} turns`);
console.log('turn  prompt_tokens  cached  TTFT cache on (ms)  TTFT cache off (ms)');
for (let k = 0; k < turns; k++)
  console.log(`${String(k + 1).padStart(4)}  ${String(on[k].usage.prompt_tokens).padStart(13)}  ` +
    `${String(on[k].usage.prompt_tokens_details.cached_tokens).padStart(6)}  ` +
    `${on[k].ttft.toFixed(0).padStart(18)}  ${(k < offTurns ? off[k].ttft.toFixed(0) : '-').padStart(19)}`);
const full = off[R];
console.log(`after restart: re-attach turn ${R + 1}'s conversation: TTFT ${re.ttft.toFixed(0)} ms ` +
  `(${re.usage.prompt_tokens_details.cached_tokens} of ${re.usage.prompt_tokens} tokens from SSD) ` +
  `vs full re-prefill ${full.ttft.toFixed(0)} ms: ${(full.ttft / re.ttft).toFixed(1)}x`);
console.log(`decode after turn ${R + 1}'s conversation (${full.usage.prompt_tokens} tokens): ` +
  `SSD tier on ${dSsd.tps.toFixed(2)} tokens/s, off ${full.tps.toFixed(2)} tokens/s`);
