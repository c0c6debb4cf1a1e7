"""Streaming-client load for bench/concurrency.sh: for each client count C,
C concurrent /v1/chat/completions streams of N tokens each (greedy, EOS
biased away), after one warm-up request; each round is run R times and the
one with the best aggregate kept. Prints one JSON line per C:
{clients, tokens, wall_s, agg_tps, ttft_ms, prompt_tokens} (aggregate decode
tokens/s = completion tokens of all clients, from usage / wall time of the
round; TTFT = request start to the first streamed text, averaged over
clients). No logprobs: llama-server would compute 20 alternatives per token
for them. Python's standard library only (the GPU machine has no node).
  python3 bench/concurrency.py URL N "1 4 8" '{"logit_bias": {...}}' [R]
"""
import http.client
import json
import sys
import threading
import time
from urllib.parse import urlparse


def one(url, i, n, extra):
    body = {"messages": [{"role": "user", "content": f"Client {i}: write about the sea, part {i}."}],
            "max_tokens": n, "stream": True, "stream_options": {"include_usage": True},
            "temperature": 0, **extra}
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=3600)
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    first, events, usage, prompt = 0.0, 0, 0, 0
    for line in resp:  # server-sent events, one "data: {...}" line each
        if not line.startswith(b"data: {"):
            continue
        o = json.loads(line[6:])
        u = o.get("usage") or {}
        if u.get("completion_tokens"):
            usage, prompt = u["completion_tokens"], u["prompt_tokens"]
        ch = o.get("choices") or []
        if ch and (ch[0].get("delta") or {}).get("content"):  # a token's text arrived
            if not first:
                first = time.perf_counter()
            events += 1
    conn.close()
    return {"ttft": (first - t0) * 1000, "count": usage or events, "prompt": prompt}


def round_(url, c, n, extra):
    rs, errs = [None] * c, []

    def run(k):
        try:
            rs[k] = one(url, k + 1, n, extra)
        except Exception as e:  # noqa: BLE001 (reported below)
            errs.append(e)
    ts = [threading.Thread(target=run, args=(k,)) for k in range(c)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    if errs:
        raise errs[0]
    tokens = sum(r["count"] for r in rs)
    return {"clients": c, "tokens": tokens, "wall_s": wall, "agg_tps": tokens / wall,
            "ttft_ms": sum(r["ttft"] for r in rs) / c,
            "prompt_tokens": sum(r["prompt"] for r in rs) / c}


def main():
    base, n, counts = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split()]
    extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else {}
    repeats = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    url = urlparse(base)
    one(url, 0, n, extra)  # warm-up
    for c in counts:
        best = None
        for _ in range(repeats):
            r = round_(url, c, n, extra)
            if not best or r["agg_tps"] > best["agg_tps"]:
                best = r
        print(json.dumps({**best, "repeats": repeats}), flush=True)


if __name__ == "__main__":
    main()
