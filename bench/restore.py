"""Restore-after-restart benchmark body: see bench/restore.sh. Python, not
node, so that the GPU machine (which has no node) runs the same measurement.
  python3 bench/restore.py BIN[,BIN2..] MODEL PROMPT_TOKENS REPEATS KV...
With several binaries the first one prefills and every one restarts on the
same SSD files, in turn, each run of one right after the others'.
KV: "f16" (--kv-dtype f16), "B" (--kv-bits B --quantized-kv-start 0),
"turbo[:..]" (--kv-quant), "q8_0" / "q4_0" (--cache-type-k/v).
env: SSD_DIR (keep the SSD files there; a later run on the same directory
finds them, so its "first prefill" is a restore too), WAIT_MS (send the
request this long after the server listens; 0), DEVICE (--device; cpu),
THREADS (--threads; 2)."""
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

bins = sys.argv[1].split(',')
model, want, repeats, kvs = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
ctx = 1024 * -(-(want + 512) // 1024)
device, threads = os.environ.get('DEVICE', 'cpu'), os.environ.get('THREADS', '2')


def kv_args(kv):
    if kv in ('f16', 'f32', 'bf16'):
        return ['--kv-dtype', kv]
    if kv.isdigit():
        return ['--kv-bits', kv, '--quantized-kv-start', '0']
    if kv.startswith('turbo'):
        return ['--kv-quant', kv]
    return ['--cache-type-k', kv, '--cache-type-v', kv]


def start(exe, args):
    """`exe serve --port 0 ...` once it listens: (process, port)"""
    p = subprocess.Popen([exe, 'serve', '--port', '0', '--model', model, '--threads', threads,
                          '--ctx', str(ctx), '--device', device, '--log-level', 'warn'] + args,
                         stderr=subprocess.PIPE, text=True)
    err = ''
    for line in p.stderr:
        err += line
        m = re.search(r'listening on http://127\.0\.0\.1:(\d+)', line)
        if m:
            # the rest of its stderr to ours, so that the pipe never fills
            threading.Thread(target=lambda: [sys.stderr.write(x) for x in p.stderr],
                             daemon=True).start()
            return p, int(m.group(1))
    raise SystemExit(f'{exe} did not start:\n{err}')


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait()


def metric(port, name):
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
    c.request('GET', '/metrics')
    text = c.getresponse().read().decode()
    m = re.search(rf'^hearth_{name}(?:{{[^}}]*}})? (\S+)$', text, re.M)
    return float(m.group(1)) if m else float('nan')


# The prompt: numbered lines of varied words, about `want` tokens (sized
# with the model's tokenizer), the same text for every run.
w = ('alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike '
     'november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee '
     'zulu').split()


def line(i):
    return f'{i}: {w[i % 26]} {w[(i * 7) % 26]} {w[(i * 11) % 26]} {i * 13}.\n'


def tokens(n):
    text = ''.join(line(i) for i in range(n))
    out = subprocess.run([bins[0], 'tokenize', '--model', model, '--text', text, '--json'],
                         check=True, capture_output=True, text=True).stdout
    return len(json.loads(out))


per_line = tokens(200) / 200
prompt = ''.join(line(i) for i in range(round(want / per_line)))


def complete(port):
    """TTFT (ms) of a one-token streamed completion, and its usage"""
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=3600)
    body = json.dumps({'prompt': prompt, 'max_tokens': 1, 'temperature': 0, 'stream': True,
                       'stream_options': {'include_usage': True}})
    t0 = time.perf_counter()
    c.request('POST', '/v1/completions', body, {'Content-Type': 'application/json'})
    r = c.getresponse()
    first, usage, buf = 0.0, None, b''
    while True:
        d = r.read1(65536)
        if not d:
            break
        buf += d
        while b'\n\n' in buf:
            ev, buf = buf.split(b'\n\n', 1)
            if not ev.startswith(b'data: {'):
                continue
            j = json.loads(ev[6:])
            if j.get('usage'):
                usage = j['usage']
            if j.get('choices') and not first:
                first = time.perf_counter()
    return (first - t0) * 1e3, usage


def files(d):
    return [os.path.join(a, f) for a, _, fs in os.walk(d) if 'quarantine' not in a
            for f in fs]


def evict(d):
    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), 'evict.py')] +
                   files(d), check=True)


def cold_bandwidth(d):
    """the disk's cold read bandwidth over these very files: all of them
    read by 8 readers at once, after an eviction"""
    fs = files(d)
    n = sum(os.path.getsize(f) for f in fs)
    evict(d)

    def rd(f):
        with open(f, 'rb', buffering=0) as h:
            while h.read(1 << 20):
                pass
    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(rd, fs))
    return n / (time.perf_counter() - t0)


def median(a):
    return sorted(a)[len(a) // 2]


rows = []
for kv in kvs:
    keep = os.environ.get('SSD_DIR')
    ssd = os.path.join(keep, kv) if keep else tempfile.mkdtemp(prefix='hearth-restore-ssd-')
    os.makedirs(ssd, exist_ok=True)
    had = len(files(ssd))  # (SSD_DIR of an earlier run: nothing new to write)
    p, port = start(bins[0], ['--ssd-cache', ssd] + kv_args(kv))
    t0 = time.perf_counter()
    complete(port)
    prefill_ms = (time.perf_counter() - t0) * 1e3
    # the SSD writer is done when its count of blocks stops moving
    n = -1
    while True:
        m = metric(port, 'ssd_cache_written_blocks_total')
        if m == n and (m or had):
            break
        n = m
        time.sleep(2)
    stop(p)
    runs = [[] for _ in bins]
    for r in range(repeats):
        for i, b in enumerate(bins):
            bw = cold_bandwidth(ssd)
            evict(ssd)
            p, port = start(b, ['--ssd-cache', ssd] + kv_args(kv))
            time.sleep(int(os.environ.get('WAIT_MS', '0')) / 1e3)
            ttft, usage = complete(port)
            got = metric(port, 'ssd_cache_read_bytes_total')
            lg = metric(port, 'prompt_cache_logits_hits_total')  # (nan: a binary without it)
            stop(p)
            runs[i].append({'bw': bw, 'bytes': got, 'ttft': ttft, 'lg': lg,
                            'tokens': usage['prompt_tokens'],
                            'cached': usage['prompt_tokens_details']['cached_tokens']})
            print(f'  {kv} {b} run {r + 1}: TTFT {ttft:.0f} ms, {got / 1e6:.0f} MB read, '
                  f'cold {bw / 1e6:.0f} MB/s, bound {got / bw * 1e3:.0f} ms, first token from '
                  f'cached logits: {"yes" if lg == 1 else "no"}', file=sys.stderr,
                  flush=True)
    if not keep:
        shutil.rmtree(ssd, ignore_errors=True)
    for i, b in enumerate(bins):
        rows.append((f'{kv} {b}' if len(bins) > 1 else kv, prefill_ms, runs[i]))

print(f'restore after restart, {rows[0][2][0]["tokens"]} prompt tokens, medians of {repeats} '
      '(each run: page cache of the SSD files dropped first)')
print('kv       cached   MB read  cold MB/s  bound (ms)  TTFT (ms)  TTFT/bound  '
      'first prefill (ms)')
for kv, prefill_ms, runs in rows:
    got, bw = median([x['bytes'] for x in runs]), median([x['bw'] for x in runs])
    ttft, bound = median([x['ttft'] for x in runs]), got / bw * 1e3
    print(f'{kv:<8}\n         {runs[0]["cached"]:>6}  {got / 1e6:>8.0f}  {bw / 1e6:>9.0f}  '
          f'{bound:>10.0f}  {ttft:>9.0f}  {ttft / bound:>10.2f}  {prefill_ms:>18.0f}')
