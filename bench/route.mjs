// The router's hit-rate benchmark body: see bench/route.sh.
//   node bench/route.mjs BIN MODEL CONVERSATIONS TURNS CONCURRENCY
import { spawn } from 'node:child_process';
import os from 'node:os';

const [bin, model, convStr, turnStr, concStr] = process.argv.slice(2);
const nConv = Number(convStr), nTurns = Number(turnStr), conc = Number(concStr);

function listen(args) {
  const p = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  return new Promise((res, rej) => {
    p.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) res({ p, base: `http://127.0.0.1:${m[1]}` });
    });
    p.on('exit', (c) => rej(new Error(`${args[0]} exited ${c}: ${err}`)));
  });
}
const serve = () => listen(['serve', '--model', model, '--port', '0', '--threads', '1', '--no-ui']);
const stop = (s) => new Promise((res) => {
  if (s.p.exitCode !== null) return res();
  s.p.on('exit', res); s.p.kill('SIGINT');
});

// a deterministic shuffle (the same interleaving in every arm)
let seed = 12345;
const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const words = 'read the file then edit the function and run the tests again until they pass'.split(' ');
const sentence = (n) => Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(' ');
const system = 'You are a coding agent working in a large C repository. ' + sentence(120);
const firstUser = Array.from({ length: nConv }, (_, c) => `Task ${c}: ` + sentence(40));
const laterUser = Array.from({ length: nConv }, () => Array.from({ length: nTurns }, () => sentence(25)));
const order = [];
for (let t = 0; t < nTurns; t++) {
  const cs = [...Array(nConv).keys()];
  for (let i = cs.length - 1; i > 0; i--) { const j = Math.floor(rand() * (i + 1)); [cs[i], cs[j]] = [cs[j], cs[i]]; }
  for (const c of cs) order.push(c);
}

async function run(base) {
  const convs = firstUser.map((u) => [{ role: 'system', content: system }, { role: 'user', content: u }]);
  const turn = new Array(nConv).fill(0), busy = new Array(nConv).fill(false);
  let next = 0, errors = 0;
  // each worker takes the next turn in the schedule whose conversation is not busy
  async function worker() {
    for (;;) {
      let k = -1;
      for (let i = next; i < order.length; i++) if (order[i] !== null && !busy[order[i]]) { k = i; break; }
      if (k < 0) { if (order.slice(next).every((x) => x === null)) return; await new Promise((r) => setTimeout(r, 5)); continue; }
      const c = order[k]; order[k] = null; busy[c] = true;
      while (next < order.length && order[next] === null) next++;
      const stream = turn[c] % 2 === 1;
      const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ messages: convs[c], max_tokens: 8, temperature: 0, stream }) });
      let text = '';
      if (!r.ok) { if (!errors++) console.error(`first error: ${r.status} ${await r.text()}`); else await r.text(); }
      else if (stream) {
        for (const ev of (await r.text()).split('\n\n'))
          if (ev.startsWith('data: {')) text += JSON.parse(ev.slice(6)).choices?.[0]?.delta?.content ?? '';
      } else text = (await r.json()).choices[0].message.content;
      // the random-weight model can emit a NUL byte, which a request body may not hold
      convs[c].push({ role: 'assistant', content: text.replaceAll('\u0000', '') });
      turn[c]++;
      if (turn[c] < nTurns) convs[c].push({ role: 'user', content: laterUser[c][turn[c]] });
      busy[c] = false;
    }
  }
  const saved = order.slice();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: conc }, worker));
  order.splice(0, order.length, ...saved);
  return { s: (performance.now() - t0) / 1000, errors };
}

async function hitRate(bases) {
  let prompt = 0, cached = 0;
  for (const b of bases) {
    const st = await (await fetch(`${b}/stats`)).json();
    prompt += st.tokens.prompt; cached += st.tokens.cached;
  }
  return { prompt, cached, rate: cached / prompt };
}

async function arm(name, nRep, policy) {
  const reps = [];
  for (let i = 0; i < nRep; i++) reps.push(await serve());
  let front = reps[0];
  if (policy) front = await listen(['route', '--port', '0', '--policy', policy, '--replicas', reps.map((r) => r.base).join(',')]);
  const w = await run(front.base);
  const h = await hitRate(reps.map((r) => r.base));
  let per = '';
  if (policy) {
    const st = await (await fetch(`${front.base}/stats`)).json();
    per = ' routed ' + st.replicas.map((r) => r.routed).join('/') + ' by ' + JSON.stringify(st.requests.by_choice);
    await stop(front);
  }
  for (const r of reps) await stop(r);
  console.log(`${name.padEnd(28)} hit rate ${(100 * h.rate).toFixed(1)}%  (${h.cached}/${h.prompt} prompt tokens cached) ${w.s.toFixed(1)} s, ${w.errors} errors${per}`);
  return h.rate;
}

console.log(`workload: ${nConv} conversations x ${nTurns} turns, ${conc} in flight, interleaved; load ${os.loadavg().map((x) => x.toFixed(1)).join(' ')}`);
const single = await arm('single server', 1, null);
const prefix = await arm('4 replicas, prefix router', 4, 'prefix');
const rr = await arm('4 replicas, round-robin', 4, 'round-robin');
console.log(`prefix router vs single: ${(100 * (prefix - single)).toFixed(1)} points (${(100 * prefix / single).toFixed(1)}% of single); round-robin: ${(100 * (rr - single)).toFixed(1)} points`);
console.log(`load after: ${os.loadavg().map((x) => x.toFixed(1)).join(' ')}`);
