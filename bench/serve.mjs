// Served-latency benchmark body: see bench/serve.sh.
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';

const [base, bin, model, nStr, repsStr] = process.argv.slice(2);
const n = Number(nStr), reps = Number(repsStr);
const messages = [{ role: 'user', content: 'Write a short story about a lighthouse keeper who finds a message in a bottle.' }];
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

// the same prompt tokens for both paths
writeFileSync(`${model}/bench-msgs.json`, JSON.stringify(messages));
const prompt = execFileSync(bin, ['template', '--model', model, '--messages', `${model}/bench-msgs.json`]).toString();
const ids = JSON.parse(execFileSync(bin, ['tokenize', '--model', model, '--no-add-special', '--json', '--text', prompt]).toString());

// the server: every token yields an event (logprobs on), end-of-sequence suppressed
const cfg = JSON.parse(execFileSync('cat', [`${model}/config.json`]).toString());
const eos = [].concat(cfg.eos_token_id ?? []);
const bias = Object.fromEntries(eos.map((id) => [id, -100]));

async function served() {
  const t0 = performance.now();
  const resp = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({
    messages, max_tokens: n, stream: true, logprobs: true, logit_bias: bias, temperature: 0 }) });
  const reader = resp.body.getReader();
  const dec8 = new TextDecoder();
  let buf = '', first = 0, last = 0, count = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec8.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith('data: {')) continue;
      const j = JSON.parse(ev.slice(6));
      if (j.choices?.[0]?.logprobs) {
        const now = performance.now();
        if (!first) first = now;
        last = now; count++;
      }
    }
  }
  return { ttft: first - t0, tps: (count - 1) / ((last - first) / 1000) };
}

// interleaved, so both see the same machine noise
const gen = [], ttft = [], dec = [];
for (let r = 0; r < reps; r++) {
  const o = JSON.parse(execFileSync(bin, ['generate', '--model', model, '--prompt-tokens', ids.join(','),
    '--max-tokens', String(n), '--ignore-eos', '--threads', '2', '--json']).toString());
  gen.push(o.decode_tokens_per_s);
  const s = await served();
  ttft.push(s.ttft);
  dec.push(s.tps);
}
const g = median(gen), s = median(dec);
console.log(`model           ${model} (synthesized qwen3-0.6b, bf16, 2 threads)`);
console.log(`prompt          ${ids.length} tokens, ${n} generated, median of ${reps}`);
console.log(`generate        decode ${g.toFixed(2)} tokens/s`);
console.log(`server (HTTP)   decode ${s.toFixed(2)} tokens/s, TTFT ${median(ttft).toFixed(1)} ms`);
console.log(`server overhead ${(100 * (1 - s / g)).toFixed(2)} % of decode speed`);
