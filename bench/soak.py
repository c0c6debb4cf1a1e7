"""The soak of issue 40 (bench/soak.sh starts the server; docs/operations.md
has the figures): C clients (8) send mixed traffic for D seconds on
loopback: completions, chats, Anthropic messages, JSON Schema and regex
constrained answers, streaming and not; random cancellations (a stream
closed after a few events, a whole-answer request reset mid-way, a costly
regex whose client leaves while it compiles) and bad requests (bad JSON,
no Host, two Content-Length, a grammar that does not compile, a body past
--max-body-mb, an unknown route). Every answer must be exact: each request
is one of a fixed set whose answers are taken first, one at a time (the
replay), and taken again at the end; every bad request must get its 4xx in
the API's error shape. /proc/PID/status VmRSS is sampled every few seconds.

    soak.py PORT PID SECONDS CURVE.tsv [CLIENTS]

Prints the RSS curve (min, median, max per minute) and exits 1 on any
unexpected answer or when, after the warm-up (the first 5 minutes, or a
sixth of a shorter run), the median RSS of a window is more than 5 % over
that of the first window after the warm-up, or the grammar mask cache
(/stats memory.grammar_cache_bytes) passes its 256 MiB bound. Medians, not
single samples: RSS moves by a few MB with what the 8 clients happen to
run at once (a costly regex in flight holds several MB while it
compiles)."""
import http.client
import json
import os
import random
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "e2e"))
from ops_test import body_of, read_all, status_of  # noqa: E402

port, pid, duration, curve = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
clients = int(sys.argv[5]) if len(sys.argv) > 5 else 8
WARMUP = min(300.0, duration / 6)
WINDOW = min(60.0, duration / 12)  # the curve's resolution
BOUND = 0.05

CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say something about cats."}]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                            "n": {"type": "integer"}}, "required": ["name", "n"]}

# name -> (path, body without "stream"); answers are compared as text + finish reason
GOOD = {
    "completion": ("/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 24, "temperature": 0}),
    "completion_long": ("/v1/completions", {"prompt": "Once upon a time " * 12, "max_tokens": 40,
                                            "temperature": 0, "logit_bias": {"370": -100}}),
    "completion_seeded": ("/v1/completions", {"prompt": "Hello", "max_tokens": 20, "temperature": 0.9,
                                              "top_p": 0.9, "seed": 11}),
    "chat": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 24, "temperature": 0}),
    "chat_seeded": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 24, "temperature": 1.0, "seed": 5}),
    "chat_schema": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 48, "temperature": 0,
                                             "response_format": {"type": "json_schema", "json_schema": {
                                                 "name": "x", "schema": SCHEMA}}}),
    "completion_regex": ("/v1/completions", {"prompt": "Code:", "max_tokens": 16, "temperature": 0,
                                             "guided_regex": "[a-z]{3}-[0-9]{2,4}"}),
    "messages": ("/v1/messages", {"model": "tiny-chat", "max_tokens": 24, "temperature": 0,
                                  "messages": [{"role": "user", "content": "Tell me about dogs."}]}),
}

# name -> (raw request bytes, expected status)
def raw(method, path, body=b"", headers="Host: x\r\nContent-Type: application/json\r\n"):
    return (f"{method} {path} HTTP/1.1\r\n{headers}Content-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


BAD = {
    "bad_json": (raw("POST", "/v1/chat/completions", b'{"messages": [}'), 400),
    "no_messages": (raw("POST", "/v1/chat/completions", b'{"max_tokens": 3}'), 400),
    "negative_max_tokens": (raw("POST", "/v1/completions", b'{"prompt": "a", "max_tokens": -1}'), 400),
    "bad_grammar": (raw("POST", "/v1/completions", b'{"prompt": "a", "guided_grammar": "root ::= ("}'), 400),
    "bad_schema_ref": (raw("POST", "/v1/chat/completions", json.dumps({
        "messages": CHAT, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"$ref": "#/$defs/nope"}}}}).encode()), 400),
    "no_host": (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", 400),
    "two_lengths": (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n"
                    b"\r\n{}", 400),
    "too_large": (raw("POST", "/v1/completions", b'{"prompt": "' + b"a" * (1100 << 10) + b'"}'), 413),
    "unknown_route": (raw("POST", "/v1/nope", b"{}"), 404),
    "messages_bad": (raw("POST", "/v1/messages", b'{"model": "x", "messages": 3}'), 400),
}

lock = threading.Lock()
counts = {}
failures = []
stop = time.time() + duration


def count(key):
    with lock:
        counts[key] = counts.get(key, 0) + 1


def fail(msg):
    with lock:
        failures.append(msg)
        if len(failures) <= 20:
            print("FAIL:", msg, flush=True)


def answer_of(path, j):
    if path == "/v1/messages":
        return "".join(b.get("text", "") for b in j["content"]), j["stop_reason"]
    c = j["choices"][0]
    return (c["message"]["content"] if "message" in c else c["text"]), c["finish_reason"]


def stream_answer(path, events):
    text, reason = "", None
    for e in events:
        if path == "/v1/messages":
            if e.get("type") == "content_block_delta":
                text += e["delta"].get("text", "")
            elif e.get("type") == "message_delta":
                reason = e["delta"].get("stop_reason")
            elif e.get("type") == "error":
                raise AssertionError(f"error event {e}")
        else:
            if "error" in e:
                raise AssertionError(f"error event {e}")
            c = e["choices"][0] if e.get("choices") else {}
            text += (c.get("delta", {}).get("content") or "") if "delta" in c else (c.get("text") or "")
            reason = c.get("finish_reason") or reason
    return text, reason


def events_of(body):
    out = []
    for line in body.split(b"\n"):
        if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
            out.append(json.loads(line[6:]))
    return out


def good(name, stream):
    path, req = GOOD[name]
    req = dict(req, stream=stream)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", path, json.dumps(req), {"Content-Type": "application/json"})
        r = c.getresponse()
        b = r.read()
    finally:
        c.close()
    if r.status != 200:
        raise AssertionError(f"status {r.status}: {b[:300]!r}")
    if stream:
        if path != "/v1/messages" and not b.rstrip().endswith(b"data: [DONE]"):
            raise AssertionError(f"stream without [DONE]: {b[-200:]!r}")
        return stream_answer(path, events_of(b))
    return answer_of(path, json.loads(b))


def send_raw(data, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
    except OSError:
        pass
    got, closed, _ = read_all(s, timeout)
    s.close()
    return got


def bad(name):
    data, want = BAD[name]
    got = send_raw(data)
    st = status_of(got)
    if st != want:
        raise AssertionError(f"status {st}, want {want}: {got[:300]!r}")
    j = json.loads(body_of(got))
    msg = j["error"]["message"]
    if not isinstance(msg, str) or not msg:
        raise AssertionError(f"no error message: {got[:300]!r}")


def rst_close(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def cancel_stream(rng):
    """a stream closed (or reset) after a few events"""
    body = json.dumps({"prompt": "A long story:", "max_tokens": 400, "stream": True,
                       "logit_bias": {"370": -100}}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(raw("POST", "/v1/completions", body).replace(b"Connection: close\r\n", b""))
    want, got = rng.randint(1, 30), 0
    while got < want:
        chunk = s.recv(4096)
        if not chunk:
            raise AssertionError("stream closed by the server before the client left")
        got += chunk.count(b"data: ")
    rst_close(s) if rng.random() < 0.5 else s.close()


def cancel_whole(rng):
    """a whole-answer request reset while it generates"""
    body = json.dumps({"prompt": "Another long story:", "max_tokens": 400,
                       "logit_bias": {"370": -100}}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(raw("POST", "/v1/completions", body))
    time.sleep(rng.uniform(0.01, 0.3))
    rst_close(s)


def cancel_compile(rng):
    """a costly regex whose client leaves while it compiles"""
    body = json.dumps({"prompt": "a", "max_tokens": 4,
                       "guided_regex": "(a|b)*a(a|b){%d}" % rng.randint(14, 16)}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(raw("POST", "/v1/completions", body))
    time.sleep(rng.uniform(0.05, 0.3))
    rst_close(s)


CANCELS = {"cancel_stream": cancel_stream, "cancel_whole": cancel_whole, "cancel_compile": cancel_compile}


SKIP = set(os.environ.get("SOAK_SKIP", "").split(","))  # kinds left out (to find what grows)


def client(i, reference):
    rng = random.Random(1000 + i)
    names = sorted(set(GOOD) - SKIP)
    bads = sorted(set(BAD) - SKIP)
    cancels = [k for k in ("cancel_stream", "cancel_whole", "cancel_compile") if k not in SKIP]
    weights = [{"cancel_stream": 5, "cancel_whole": 5, "cancel_compile": 1}[k] for k in cancels]
    while time.time() < stop:
        x = rng.random()
        try:
            if x < 0.70:
                name, stream = rng.choice(names), rng.random() < 0.5
                key = f"{name}{'/stream' if stream else ''}"
                got = good(name, stream)
                if got != reference[(name, stream)]:
                    raise AssertionError(f"answer {got!r} != replay {reference[(name, stream)]!r}")
            elif x < 0.85:
                key = rng.choice(bads)
                bad(key)
            else:
                key = rng.choices(cancels, weights=weights)[0]
                CANCELS[key](rng)
            count(key)
        except Exception as e:  # noqa: BLE001
            fail(f"client {i} {key}: {e!r}"[:600])
        time.sleep(rng.uniform(0.0, 0.2))


def rss_kb():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def grammar_cache_kb():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/stats")
    n = json.loads(c.getresponse().read())["memory"].get("grammar_cache_bytes", 0)
    c.close()
    return n / 1024


def sampler(samples, t0, every):
    while time.time() < stop + 1:
        try:
            st = time.time()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            c.close()
            hms = (time.time() - st) * 1000
            if r.status != 200:
                fail(f"/health {r.status}")
        except OSError as e:
            fail(f"/health: {e!r}")
            hms = -1
        samples.append((time.time() - t0, rss_kb(), hms, grammar_cache_kb()))
        with open(curve + ".live", "a") as f:  # to watch a long run
            f.write("\t".join(f"{x:.1f}" for x in samples[-1]) + "\n")
        time.sleep(every)


def replay():
    ref = {}
    for name in sorted(GOOD):
        for stream in (False, True):
            ref[(name, stream)] = good(name, stream)
    for name in sorted(GOOD):  # a stream and a whole answer agree
        if ref[(name, False)] != ref[(name, True)]:
            fail(f"{name}: stream {ref[(name, True)]!r} != whole {ref[(name, False)]!r}")
    return ref


def slope(pts):
    n = len(pts)
    if n < 2:
        return 0.0
    mx = sum(p[0] for p in pts) / n
    my = sum(p[1] for p in pts) / n
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else 0.0


def main():
    global stop
    reference = replay()
    for k, v in sorted(reference.items()):
        print(f"replay {k[0]}{'/stream' if k[1] else ''}: {v[0][:40]!r} {v[1]}")
    t0 = time.time()
    stop = t0 + duration
    samples = []
    every = 2.0 if duration <= 120 else 5.0
    th = [threading.Thread(target=client, args=(i, reference)) for i in range(clients)]
    th.append(threading.Thread(target=sampler, args=(samples, t0, every)))
    for t in th:
        t.start()
    for t in th:
        t.join()
    time.sleep(1.0)  # the last cancellations' requests leave
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/stats")
    stats = json.loads(c.getresponse().read())
    c.close()
    if stats["requests"]["active"] or stats["requests"].get("queued"):
        fail(f"requests left after the soak: {stats['requests']}")
    again = replay()
    for k in reference:
        if again[k] != reference[k]:
            fail(f"replay after the soak: {k} {again[k]!r} != {reference[k]!r}")
    samples.append((time.time() - t0, rss_kb(), 0.0, grammar_cache_kb()))
    with open(curve, "w") as f:
        f.write("seconds\trss_kb\thealth_ms\tgrammar_cache_kb\n")
        for s in samples:
            f.write(f"{s[0]:.1f}\t{s[1]}\t{s[2]:.1f}\t{s[3]:.0f}\n")
    post = [s for s in samples if s[0] >= WARMUP]
    health = sorted(s[2] for s in samples if s[2] >= 0)
    total = sum(counts.values())
    print(f"soak: {duration:.0f} s, {clients} clients, {total} requests, {len(failures)} unexpected")
    print("  " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    # the curve, a line per window: RSS (MB) min / median / max
    step = WINDOW
    print(f"  RSS curve (MB) per {step:.0f} s window, warm-up the first {WARMUP:.0f} s: RSS min / median / max; "
          f"the grammar mask cache (/stats memory.grammar_cache_bytes) and RSS less it, medians")
    wins = []
    t = 0.0
    while t < duration:
        w = sorted(x for x in samples if t <= x[0] < t + step)
        if w:
            r = sorted(x[1] / 1024 for x in w)
            net = sorted((x[1] - x[3]) / 1024 for x in w)
            cache = sorted(x[3] / 1024 for x in w)
            wins.append((t, r[0], r[len(r) // 2], r[-1], cache[len(w) // 2], net[len(w) // 2]))
            print(f"    {t / 60:5.1f} min  {r[0]:7.1f} {r[len(r) // 2]:7.1f} {r[-1]:7.1f}   "
                  f"cache {cache[len(w) // 2]:6.1f}   net {net[len(w) // 2]:7.1f}")
        t += step
    after = [w for w in wins if w[0] >= WARMUP]
    base, worst = after[0][2], max(w[2] for w in after)
    sl = slope([(x[0] / 60, x[1] / 1024) for x in post])
    print(f"  RSS (MB): start {samples[0][1] / 1024:.1f}, at the end of the warm-up {post[0][1] / 1024:.1f}, "
          f"end {samples[-1][1] / 1024:.1f}; max after the warm-up {max(x[1] for x in post) / 1024:.1f}; "
          f"window medians after the warm-up {base:.1f} first, {after[-1][2]:.1f} last, {worst:.1f} highest "
          f"({(worst / base - 1) * 100:+.1f} %); slope after the warm-up {sl:+.3f} MB/min; "
          f"grammar mask cache max {max(x[3] for x in samples) / 1024:.1f} MB")
    print(f"  /health during the soak: median {health[len(health) // 2]:.1f} ms, max {health[-1]:.1f} ms "
          f"({len(health)} samples)")
    print(f"  curve: {curve} ({len(samples)} samples, every {every:.0f} s)")
    ok = not failures
    if worst > base * (1 + BOUND):
        print(f"FAIL: a window's median RSS is {(worst / base - 1) * 100:.1f} % over the first one after "
              f"the warm-up (bound {BOUND * 100:.0f} %)")
        ok = False
    if max(x[3] for x in samples) > 256 * 1024:
        print("FAIL: the grammar mask cache passed its bound (256 MiB)")
        ok = False
    print("soak: OK" if ok else "soak: FAILED")
    sys.exit(0 if ok else 1)


main()
