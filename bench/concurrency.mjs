// Streaming-client load for bench/concurrency.sh: for each client count C,
// C concurrent /v1/chat/completions streams of N tokens each (greedy, EOS
// biased away), after one warm-up request. Prints one JSON line per C:
// {clients, tokens, wall_s, agg_tps, ttft_ms, prompt_tokens} (aggregate
// decode tokens/s = completion tokens of all clients, from usage / wall
// time of the round; TTFT = request start to the first streamed text,
// averaged over clients). No logprobs: llama-server would compute 20
// alternatives per token for them.
//   node bench/concurrency.mjs URL N "1 4 8" '{"logit_bias": {...}}'
const [base, nStr, countsStr, extraStr] = process.argv.slice(2);
const n = Number(nStr);
const extra = JSON.parse(extraStr || '{}');

async function one(i) {
  const t0 = performance.now();
  const resp = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'user', content: `Client ${i}: write about the sea, part ${i}.` }],
      max_tokens: n, stream: true, stream_options: { include_usage: true }, temperature: 0,
      ...extra,
    }),
  });
  if (!resp.ok) throw new Error(`HTTP ${resp.status}: ${await resp.text()}`);
  const reader = resp.body.getReader(), dec = new TextDecoder();
  let buf = '', first = 0, events = 0, usage = 0, prompt = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: {')) continue;
      const o = JSON.parse(ev.slice(6));
      if (o.usage?.completion_tokens) {
        usage = o.usage.completion_tokens;
        prompt = o.usage.prompt_tokens;
      }
      if (o.choices?.[0]?.delta?.content) { // a token's text arrived
        if (!first) first = performance.now();
        events++;
      }
    }
  }
  return { ttft: first - t0, count: usage || events, prompt };
}

await one(0); // warm-up
for (const c of countsStr.split(/\s+/).filter(Boolean).map(Number)) {
  const t0 = performance.now();
  const rs = await Promise.all([...Array(c).keys()].map((i) => one(i + 1)));
  const wall = (performance.now() - t0) / 1000;
  const tokens = rs.reduce((a, r) => a + r.count, 0);
  console.log(JSON.stringify({
    clients: c, tokens, wall_s: wall, agg_tps: tokens / wall,
    ttft_ms: rs.reduce((a, r) => a + r.ttft, 0) / c,
    prompt_tokens: rs.reduce((a, r) => a + r.prompt, 0) / c,
  }));
}
