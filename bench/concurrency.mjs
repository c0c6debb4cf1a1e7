// Streaming-client load for bench/concurrency.sh: for each client count C,
// C concurrent /v1/chat/completions streams of N tokens each (greedy, EOS
// biased away), after one warm-up request; each round is run R times and
// the one with the best aggregate kept. Prints one JSON line per C:
// {clients, tokens, wall_s, agg_tps, ttft_ms, prompt_tokens} (aggregate
// decode tokens/s = completion tokens of all clients, from usage / wall
// time of the round; TTFT = request start to the first streamed text,
// averaged over clients). No logprobs: llama-server would compute 20
// alternatives per token for them.
//   node bench/concurrency.mjs URL N "1 4 8" '{"logit_bias": {...}}' [R]
const [base, nStr, countsStr, extraStr, repeatsStr] = process.argv.slice(2);
const n = Number(nStr), repeats = Number(repeatsStr || 1);
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

async function round(c) {
  const t0 = performance.now();
  const rs = await Promise.all([...Array(c).keys()].map((i) => one(i + 1)));
  const wall = (performance.now() - t0) / 1000;
  const tokens = rs.reduce((a, r) => a + r.count, 0);
  return {
    clients: c, tokens, wall_s: wall, agg_tps: tokens / wall,
    ttft_ms: rs.reduce((a, r) => a + r.ttft, 0) / c,
    prompt_tokens: rs.reduce((a, r) => a + r.prompt, 0) / c,
  };
}

await one(0); // warm-up
for (const c of countsStr.split(/\s+/).filter(Boolean).map(Number)) {
  let best = null;
  for (let k = 0; k < repeats; k++) {
    const r = await round(c);
    if (!best || r.agg_tps > best.agg_tps) best = r;
  }
  console.log(JSON.stringify({ ...best, repeats }));
}
