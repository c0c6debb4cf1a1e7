// Restore-after-restart benchmark body: see bench/restore.sh.
//   node bench/restore.mjs BIN[,BIN2..] MODEL PROMPT_TOKENS REPEATS KV...
// With several binaries the first one prefills and every one restarts on
// the same SSD files, in turn, each run of one right after the others'.
// KV: "f16" (--kv-dtype f16), "B" (--kv-bits B --quantized-kv-start 0),
// "turbo[:..]" (--kv-quant), "q8_0" / "q4_0" (--cache-type-k/v).
// SSD_DIR (env): keep the SSD files there; a later run on the same
// directory finds them, so its "first prefill" is a restore too.
// WAIT_MS (env): the request this long after the server listens (0: at once).
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { start as serve, stop, post } from './lib/server.mjs';

const [binList, model, tokStr, repStr, ...kvs] = process.argv.slice(2);
const bins = binList.split(','), bin = bins[0];
const want = Number(tokStr), repeats = Number(repStr);
const ctx = 1024 * Math.ceil((want + 512) / 1024);
const here = new URL('.', import.meta.url).pathname;
const start = (args, exe = bin) => serve(exe, ['--model', model, '--threads', '2',
  '--ctx', String(ctx), '--log-level', 'warn', ...args]);

function kvArgs(kv) {
  if (kv === 'f16' || kv === 'f32' || kv === 'bf16') return ['--kv-dtype', kv];
  if (/^\d+$/.test(kv)) return ['--kv-bits', kv, '--quantized-kv-start', '0'];
  if (kv.startsWith('turbo')) return ['--kv-quant', kv];
  return ['--cache-type-k', kv, '--cache-type-v', kv];
}

async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = text.match(new RegExp(`^hearth_${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

// The prompt: numbered lines of varied words, about `want` tokens (sized
// with the model's tokenizer), the same text for every run.
const words = 'alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike ' +
  'november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu';
const w = words.split(' ');
const line = (i) => `${i}: ${w[i % 26]} ${w[(i * 7) % 26]} ${w[(i * 11) % 26]} ${i * 13}.\n`;
const tmp = mkdtempSync('/tmp/hearth-restore-');
function tokens(n) {
  const text = [...Array(n).keys()].map(line).join('');
  return JSON.parse(execFileSync(bin, ['tokenize', '--model', model, '--text', text, '--json'],
    { maxBuffer: 1 << 26 })).length;
}
const perLine = tokens(200) / 200;
const prompt = [...Array(Math.round(want / perLine)).keys()].map(line).join('');

async function complete(base) {
  const t0 = performance.now();
  let buf = '', first = 0, usage = null;
  await post(`${base}/v1/completions`, { prompt, max_tokens: 1, temperature: 0, stream: true,
    stream_options: { include_usage: true } }, (chunk) => {
    buf += chunk;
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith('data: {')) continue;
      const j = JSON.parse(ev.slice(6));
      if (j.usage) usage = j.usage;
      if (j.choices?.length && !first) first = performance.now();
    }
  });
  return { ttft: first - t0, usage };
}

const files = (dir) => readdirSync(dir, { recursive: true }).map((f) => join(dir, f))
  .filter((f) => statSync(f).isFile() && !f.includes('quarantine'));
// drop the cache files from the page cache (posix_fadvise DONTNEED)
const evict = (dir) => execFileSync('python3', [join(here, 'evict.py'), ...files(dir)]);
// the disk's cold read bandwidth over these very files: all of them read
// by 8 readers at once, after an eviction
function coldBandwidth(dir) {
  const f = files(dir), bytes = f.reduce((s, x) => s + statSync(x).size, 0);
  evict(dir);
  const t0 = performance.now();
  execFileSync('sh', ['-c', 'xargs -0 -P 8 -n 16 cat > /dev/null'], { input: f.join('\0') });
  return bytes / ((performance.now() - t0) / 1000);
}
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

const rows = [];
for (const kv of kvs) {
  const ssd = process.env.SSD_DIR ? join(process.env.SSD_DIR, kv)
    : mkdtempSync('/tmp/hearth-restore-ssd-');
  mkdirSync(ssd, { recursive: true });
  const had = files(ssd).length; // (SSD_DIR of an earlier run: nothing new to write)
  const a = await start(['--ssd-cache', ssd, ...kvArgs(kv)]);
  const t0 = performance.now();
  const first = await complete(a.base);
  const prefillMs = performance.now() - t0;
  // the SSD writer is done when its count of blocks stops moving
  for (let n = -1, m; (m = await metric(a.base, 'ssd_cache_written_blocks_total')) !== n ||
    (!m && !had);
    n = m)
    await new Promise((r) => setTimeout(r, 2000));
  await stop(a);
  const runs = bins.map(() => []);
  for (let r = 0; r < repeats; r++) {
    for (let i = 0; i < bins.length; i++) {
      const bw = coldBandwidth(ssd);
      evict(ssd);
      const b = await start(['--ssd-cache', ssd, ...kvArgs(kv)], bins[i]);
      await new Promise((r) => setTimeout(r, Number(process.env.WAIT_MS || 0)));
      const re = await complete(b.base);
      const bytes = await metric(b.base, 'ssd_cache_read_bytes_total');
      await stop(b);
      runs[i].push({ bw, bytes, ttft: re.ttft, tokens: re.usage.prompt_tokens,
        cached: re.usage.prompt_tokens_details.cached_tokens });
      console.error(`  ${kv} ${bins[i]} run ${r + 1}: TTFT ${re.ttft.toFixed(0)} ms, ` +
        `${(bytes / 1e6).toFixed(0)} MB read, cold ${(bw / 1e6).toFixed(0)} MB/s, ` +
        `bound ${(bytes / bw * 1000).toFixed(0)} ms`);
    }
  }
  if (!process.env.SSD_DIR) rmSync(ssd, { recursive: true, force: true });
  bins.forEach((b, i) => rows.push({ kv: bins.length > 1 ? `${kv} ${b}` : kv, prefillMs,
    runs: runs[i] }));
}
rmSync(tmp, { recursive: true, force: true });

console.log(`restore after restart, ${rows[0].runs[0].tokens} prompt tokens, medians of ` +
  `${repeats} (each run: page cache of the SSD files dropped first)`);
console.log('kv       cached   MB read  cold MB/s  bound (ms)  TTFT (ms)  TTFT/bound  ' +
  'first prefill (ms)');
for (const { kv, prefillMs, runs } of rows) {
  const bytes = median(runs.map((r) => r.bytes)), bw = median(runs.map((r) => r.bw));
  const ttft = median(runs.map((r) => r.ttft)), bound = bytes / bw * 1000;
  console.log(`${kv.padEnd(8)}\n         ${String(runs[0].cached).padStart(6)}  ` +
    `${(bytes / 1e6).toFixed(0).padStart(8)}  ${(bw / 1e6).toFixed(0).padStart(9)}  ` +
    `${bound.toFixed(0).padStart(10)}  ${ttft.toFixed(0).padStart(9)}  ` +
    `${(ttft / bound).toFixed(2).padStart(10)}  ${prefillMs.toFixed(0).padStart(18)}`);
}
