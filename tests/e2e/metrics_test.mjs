// GET /metrics: every line well-formed, counters move (see metrics.sh).
const [base] = process.argv.slice(2);
let passed = 0, failed = 0;
async function check(name, fn) {
  try { await fn(); passed++; } catch (e) { failed++; console.log(`FAIL ${name}: ${e.stack || e}`); }
}
function assert(c, msg) { if (!c) throw new Error(msg); }

// Parse the exposition text strictly: HELP and TYPE before each family's
// samples, names hearth_*, counters *_total, values numbers.
function parse(text) {
  assert(text.endsWith('\n'), 'ends with a newline');
  const types = new Map(), help = new Set(), values = new Map();
  for (const line of text.slice(0, -1).split('\n')) {
    let m;
    if ((m = /^# HELP (hearth_[a-z_]+) (\S.*)$/.exec(line))) {
      assert(!help.has(m[1]), `second HELP for ${m[1]}`);
      help.add(m[1]);
    } else if ((m = /^# TYPE (hearth_[a-z_]+) (counter|gauge|histogram)$/.exec(line))) {
      assert(help.has(m[1]) && !types.has(m[1]), `TYPE ${m[1]} without HELP or twice`);
      assert((m[2] === 'counter') === m[1].endsWith('_total'), `counter naming: ${m[1]}`);
      types.set(m[1], m[2]);
    } else if ((m = /^(hearth_[a-z_]+)(\{[a-z_]+="(?:[^"\\\n]|\\[\\"n])*"(?:,[a-z_]+="(?:[^"\\\n]|\\[\\"n])*")*\})? (-?[0-9.e+-]+|NaN|[+-]Inf)$/.exec(line))) {
      const base = m[1].replace(/_(bucket|sum|count)$/, '');
      const type = types.get(m[1]) ?? (types.get(base) === 'histogram' ? 'histogram' : undefined);
      assert(type && (type !== 'histogram' || m[1] !== base), `sample before its TYPE: ${line}`);
      assert(!m[1].endsWith('_bucket') || /^\{le="([0-9.e+-]+|\+Inf)"\}$/.test(m[2] ?? ''), `bucket label: ${line}`);
      const v = Number(m[3]);
      assert(!Number.isNaN(v) && (type === 'gauge' || v >= 0), `value: ${line}`);
      values.set(m[1] + (m[2] ?? ''), v);
    } else {
      throw new Error(`malformed line: ${JSON.stringify(line)}`);
    }
  }
  // histograms: cumulative buckets ending in +Inf == _count
  for (const [name, type] of types) {
    if (type !== 'histogram') continue;
    const buckets = [...values].filter(([k]) => k.startsWith(`${name}_bucket{`)).map(([, v]) => v);
    assert(buckets.length > 1 && buckets.every((v, i) => i === 0 || v >= buckets[i - 1]), `${name} buckets`);
    assert(values.get(`${name}_bucket{le="+Inf"}`) === values.get(`${name}_count`) && values.has(`${name}_sum`), `${name} +Inf/count/sum`);
  }
  return values;
}
async function scrape() {
  const r = await fetch(`${base}/metrics`);
  assert(r.status === 200 && r.headers.get('content-type') === 'text/plain; version=0.0.4; charset=utf-8', `${r.status} ${r.headers.get('content-type')}`);
  return parse(await r.text());
}

await check('every line is well-formed; the families are there', async () => {
  const v = await scrape();
  for (const name of ['hearth_http_requests_total', 'hearth_requests_total{model="tiny-chat"}', 'hearth_requests_running{model="tiny-chat"}', 'hearth_requests_queued{model="tiny-chat"}',
    'hearth_prompt_tokens_total{model="tiny-chat"}', 'hearth_generated_tokens_total{model="tiny-chat"}', 'hearth_prompt_cache_hit_tokens_total{model="tiny-chat"}', 'hearth_kv_blocks_capacity{model="tiny-chat"}',
    'hearth_kv_blocks_free{model="tiny-chat"}', 'hearth_kv_blocks_used{model="tiny-chat"}', 'hearth_kv_blocks_cached{model="tiny-chat"}', 'hearth_ssd_cache_read_blocks_total{model="tiny-chat"}',
    'hearth_prompt_cache_miss_tokens_total{model="tiny-chat"}', 'hearth_prompt_cache_lookups_total{model="tiny-chat"}', 'hearth_prompt_cache_hits_total{model="tiny-chat"}',
    'hearth_prompt_cache_misses_total{model="tiny-chat"}', 'hearth_ssd_cache_written_bytes_total{model="tiny-chat"}', 'hearth_ssd_cache_read_bytes_total{model="tiny-chat"}',
    'hearth_prefill_tokens_per_second{model="tiny-chat"}', 'hearth_decode_tokens_per_second{model="tiny-chat"}', 'hearth_process_resident_memory_bytes', 'hearth_model_info{model="tiny-chat",loaded="true"}',
    'hearth_time_to_first_token_seconds_count', 'hearth_inter_token_latency_seconds_bucket{le="+Inf"}'])
    assert(v.has(name), `missing ${name}`);
  assert(v.get('hearth_kv_blocks_capacity{model="tiny-chat"}') > 0 && v.get('hearth_process_resident_memory_bytes') > 0, 'gauges');
  // the start's warm-up token is no request: nothing counted, nothing held
  for (const name of ['requests_total', 'prompt_tokens_total', 'generated_tokens_total', 'prompt_cache_lookups_total', 'kv_blocks_used', 'kv_blocks_cached'])
    assert(v.get(`hearth_${name}{model="tiny-chat"}`) === 0, `after the warm-up: ${name} ${v.get(`hearth_${name}{model="tiny-chat"}`)}`);
});

await check('counters move as requests are served', async () => {
  const before = await scrape();
  const msgs = [{ role: 'user', content: 'Hello world' }];
  for (let i = 0; i < 2; i++) {
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ messages: msgs, max_tokens: 4, logit_bias: { 370: -100 } }) });
    assert(r.status === 200, `chat ${r.status}`);
  }
  await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: '{' });
  const after = await scrape();
  const d = (k) => after.get(k) - before.get(k);
  assert(d('hearth_requests_total{model="tiny-chat"}') === 2 && d('hearth_requests_finished_total{model="tiny-chat"}') === 2, `requests ${d('hearth_requests_total{model="tiny-chat"}')}`);
  assert(d('hearth_prompt_tokens_total{model="tiny-chat"}') > 0 && d('hearth_generated_tokens_total{model="tiny-chat"}') >= 2, 'tokens');
  assert(d('hearth_prompt_cache_hit_tokens_total{model="tiny-chat"}') > 0, 'the repeat is a cache hit');
  assert(d('hearth_prompt_cache_lookups_total{model="tiny-chat"}') === 2 && d('hearth_prompt_cache_hits_total{model="tiny-chat"}') === 1 &&
    d('hearth_prompt_cache_misses_total{model="tiny-chat"}') === 1, `lookups ${d('hearth_prompt_cache_lookups_total{model="tiny-chat"}')} hits ${d('hearth_prompt_cache_hits_total{model="tiny-chat"}')}`);
  assert(d('hearth_prompt_cache_miss_tokens_total{model="tiny-chat"}') + d('hearth_prompt_cache_hit_tokens_total{model="tiny-chat"}') === d('hearth_prompt_tokens_total{model="tiny-chat"}'),
    'every looked-up prompt token is a hit or a miss');
  assert(d('hearth_http_requests_total') === 4 && d('hearth_http_errors_total') === 1, `http ${d('hearth_http_requests_total')} ${d('hearth_http_errors_total')}`);
  assert(after.get('hearth_uptime_seconds') >= before.get('hearth_uptime_seconds'), 'uptime');
  const by = (v, route, code) => v.get(`hearth_http_responses_total{route="${route}",code="${code}"}`) ?? 0;
  assert(by(after, '/v1/chat/completions', 200) - by(before, '/v1/chat/completions', 200) === 2 &&
    by(after, '/v1/chat/completions', 400) - by(before, '/v1/chat/completions', 400) === 1, 'replies by route and status');
  assert(by(after, '/metrics', 200) >= 1, 'the first scrape is counted');
  assert(d('hearth_time_to_first_token_seconds_count') === 2 && d('hearth_time_to_first_token_seconds_sum') > 0, 'ttft');
  assert(d('hearth_inter_token_latency_seconds_count') >= 2, 'itl');
});

await check('answered from published counters while a generation runs', async () => {
  const ctrl = new AbortController();
  const resp = await fetch(`${base}/v1/completions`, { method: 'POST', signal: ctrl.signal,
    body: JSON.stringify({ prompt: 'a', max_tokens: 5000, stream: true, logit_bias: { 370: -100 } }) });
  await resp.body.getReader().read(); /* generating now */
  const t0 = performance.now();
  const v = await scrape();
  const ms = performance.now() - t0;
  ctrl.abort();
  // the generation was still running when the scrape was answered
  assert(v.get('hearth_requests_running{model="tiny-chat"}') === 1, `running ${v.get('hearth_requests_running{model="tiny-chat"}')}`);
  assert(ms < 1000, `took ${ms.toFixed(1)} ms`);
  console.log(`metrics: scrape took ${ms.toFixed(1)} ms during a generation`);
});

console.log(`metrics: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
