// Agent-style prompt-cache benchmark body: see bench/agent.sh.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';

const [bin, model, prefixTokensStr, turnsStr] = process.argv.slice(2);
const prefixTokens = Number(prefixTokensStr), turns = Number(turnsStr);

async function start(args) {
  const p = spawn(bin, ['serve', '--model', model, '--port', '0', '--threads', '2', '--ctx', '16384', ...args]);
  let err = '';
  const port = await new Promise((res, rej) => {
    p.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) res(Number(m[1]));
    });
    p.on('exit', () => rej(new Error(err)));
  });
  return { p, base: `http://127.0.0.1:${port}` };
}
const stop = (s) => new Promise((res) => { s.p.on('exit', res); s.p.kill('SIGTERM'); });

// the shared prefix: tool definitions until about prefixTokens tokens
const tools = [];
for (let i = 0; tools.length * 60 < prefixTokens; i++)
  tools.push({ type: 'function', function: { name: `tool_${i}`, description: `Tool number ${i}: reads the file system entry ${i * 7} and reports its size, owner and permissions in detail.`, parameters: { type: 'object', properties: { path: { type: 'string' }, depth: { type: 'integer' } }, required: ['path'] } } });
const system = { role: 'system', content: 'You are a coding agent. Use the tools when needed. ' + 'Follow the repository conventions. '.repeat(20) };

async function turn(base, messages, maxTokens = 16) {
  const t0 = performance.now();
  const resp = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({
    messages, tools, max_tokens: maxTokens, stream: true, logprobs: true, temperature: 0,
    stream_options: { include_usage: true } }) });
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '', first = 0, last = 0, n = 0, text = '', usage = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
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
  }
  return { ttft: first - t0, tps: n > 1 ? (n - 1) / ((last - first) / 1000) : 0, text, usage };
}

function conversation(k, replies) {
  const m = [system];
  for (let t = 0; t <= k; t++) {
    m.push({ role: 'user', content: `Step ${t}: look at module ${t} and tell me what to change.` });
    if (t < k) m.push({ role: 'assistant', content: replies[t] || 'ok' });
  }
  return m;
}

async function run(args) {
  const s = await start(args);
  const replies = [], rows = [];
  for (let k = 0; k < turns; k++) {
    const r = await turn(s.base, conversation(k, replies));
    replies.push(r.text || 'ok');
    rows.push(r);
  }
  await stop(s);
  return { rows, replies };
}

const on = await run([]);
const off = await run(['--prompt-cache', '0']);
console.log(`prefix ~${on.rows[0].usage.prompt_tokens} prompt tokens at turn 1, ${turns} turns`);
console.log('turn  prompt_tokens  cached  TTFT cache on (ms)  TTFT cache off (ms)');
for (let k = 0; k < turns; k++)
  console.log(`${String(k + 1).padStart(4)}  ${String(on.rows[k].usage.prompt_tokens).padStart(13)}  ${String(on.rows[k].usage.prompt_tokens_details.cached_tokens).padStart(6)}  ${on.rows[k].ttft.toFixed(0).padStart(18)}  ${off.rows[k].ttft.toFixed(0).padStart(19)}`);

// SSD: fill the cache, restart, re-attach the last conversation
const ssd = mkdtempSync('/tmp/hearth-ssd-');
const a = await start(['--ssd-cache', ssd]);
const replies = [];
for (let k = 0; k < turns; k++) replies.push((await turn(a.base, conversation(k, replies))).text || 'ok');
const dSsd = await turn(a.base, conversation(turns - 1, replies), 64);
await stop(a);
const b = await start(['--ssd-cache', ssd]);
const re = await turn(b.base, conversation(turns - 1, replies));
await stop(b);
const c = await start(['--prompt-cache', '0']);
const full = await turn(c.base, conversation(turns - 1, replies));
const dOff = await turn(c.base, conversation(turns - 1, replies), 64);
await stop(c);
rmSync(ssd, { recursive: true, force: true });
console.log(`after restart: re-attach TTFT ${re.ttft.toFixed(0)} ms (${re.usage.prompt_tokens_details.cached_tokens} of ${re.usage.prompt_tokens} tokens from SSD) vs full re-prefill ${full.ttft.toFixed(0)} ms: ${(full.ttft / re.ttft).toFixed(1)}x`);
console.log(`decode with the SSD tier on ${dSsd.tps.toFixed(2)} tokens/s, off ${dOff.tps.toFixed(2)} tokens/s`);
