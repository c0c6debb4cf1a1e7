"""The server under abuse, on raw sockets (tests/e2e/ops.sh starts the servers).

    ops_test.py hardening PORT PID   framing, half-close, floods, slow clients
    ops_test.py limits PORT          --max-requests (429), --request-timeout
    ops_test.py drain PORT TOKEN     POST /admin/drain while a stream runs

Prints "N passed, M failed"; exits 1 on a failure. Every wait is bounded."""
import json
import os
import resource
import socket
import sys
import threading
import time

passed = failed = 0


def check(name, fn):
    global passed, failed
    try:
        fn()
        passed += 1
        print(f"ok   {name}")
    except Exception as e:  # noqa: BLE001 - a test harness reports everything
        failed += 1
        print(f"FAIL {name}: {type(e).__name__}: {e}")


def conn(port, timeout=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    return s


def read_all(s, limit, until=None):
    """Everything until the peer closes (or `until` is in it), or until
    `limit` s; (bytes, closed or complete, seconds)."""
    t0 = time.time()
    got, closed = b"", False
    s.settimeout(0.1)
    while time.time() - t0 < limit:
        try:
            d = s.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            closed = True
            break
        if not d:
            closed = True
            break
        got += d
        if until and until in got[-len(until) - 65536:]:
            closed = True
            break
    return got, closed, time.time() - t0


def status_of(raw):
    line = raw.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 and line[0].startswith(b"HTTP/") else None


def body_of(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():  # de-chunk
        out = b""
        while body:
            size, _, rest = body.partition(b"\r\n")
            n = int(size.split(b";")[0] or b"0", 16)
            if n == 0:
                break
            out += rest[:n]
            body = rest[n + 2:]
        return out
    return body


def request(port, method, path, body=None, headers=None, timeout=10.0):
    """One request on a fresh connection: (status, headers text, body bytes)."""
    s = conn(port, timeout)
    data = body.encode() if isinstance(body, str) else (body or b"")
    h = {"Host": "x", "Connection": "close"}
    if body is not None:
        h["Content-Length"] = str(len(data))
    h.update(headers or {})
    s.sendall(f"{method} {path} HTTP/1.1\r\n".encode() +
              b"".join(f"{k}: {v}\r\n".encode() for k, v in h.items()) + b"\r\n" + data)
    raw, _, _ = read_all(s, timeout)
    s.close()
    head = raw.partition(b"\r\n\r\n")[0].decode(errors="replace")
    return status_of(raw), head, body_of(raw)


def health_ms(port):
    t0 = time.time()
    st, _, b = request(port, "GET", "/health", timeout=5)
    ms = (time.time() - t0) * 1000
    assert st == 200, f"/health {st} {b[:200]!r}"
    return ms


def api_error(body, status=None):
    j = json.loads(body)
    assert isinstance(j.get("error", {}).get("message"), str), f"not the API's error shape: {body[:200]!r}"
    return j


COMPLETION = json.dumps({"prompt": "a", "max_tokens": 4}).encode()
LONG = {"prompt": "a", "max_tokens": 8000, "logit_bias": {"370": -100}}


# ---- framing (RFC 9112) --------------------------------------------------------------------------

def framing(port):
    cases = [  # name, bytes, statuses accepted
        ("two different Content-Length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
         b"Content-Length: 5\r\n\r\n" % len(COMPLETION) + COMPLETION, {400}),
        ("HTTP/1.1 without Host", b"GET /health HTTP/1.1\r\n\r\n", {400}),
        ("HTTP/1.1 POST without Host", b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
         {400}),
        ("HTTP/1.1 without Host on /v1/messages", b"POST /v1/messages HTTP/1.1\r\nContent-Length: 2\r\n"
         b"\r\n{}", {400}),
        ("two Host headers", b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", {400}),
        ("whitespace before a field's colon", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length : %d\r\n\r\n" % len(COMPLETION) + COMPLETION, {400}),
        ("Transfer-Encoding: gzip, chunked", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", {400, 501}),
        ("chunk size 0xffffffffffffffff", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nhello", {400, 411, 413}),
        ("Expect: 100-continue with 1 GB and no body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Expect: 100-continue\r\nContent-Length: 1000000000\r\n\r\n", {413}),
        ("100 KB chunk extension", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
         b"\r\n\r\n5;" + b"a" * 100000 + b"\r\nhello\r\n0\r\n\r\n", {400, 411}),
        ("NUL in the path", b"POST /v1/chat/completions%00.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
         b"Connection: close\r\n\r\n{}", {404}),
    ]
    for name, data, want in cases:
        s = conn(port)
        try:
            s.sendall(data)
        except OSError:
            pass
        raw, closed, dt = read_all(s, 3.0)
        s.close()
        st = status_of(raw)
        assert st in want, f"{name}: status {st}, want {want}: {raw[:300]!r}"
        assert closed and dt < 2.0, f"{name}: connection held {dt:.1f} s (closed={closed})"
        j = api_error(body_of(raw))  # JSON in the API's shape, never libmicrohttpd's HTML page
        anthropic = b"/v1/messages" in data.split(b"\r\n", 1)[0]
        assert (j.get("type") == "error") == anthropic, f"{name}: wrong error shape: {raw[-300:]!r}"


def garbage_after_keepalive(port, timeout):
    for tail in (b"\x01\x02garbage\r\n\r\n", b"\x01\x02garbage without an end"):
        s = conn(port)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + tail)
        raw, closed, dt = read_all(s, timeout + 3)
        s.close()
        assert status_of(raw) == 200, raw[:200]
        assert closed and dt < timeout + 1.5, f"{tail!r}: held {dt:.1f} s"


# ---- half-close ----------------------------------------------------------------------------------

def half_close(port):
    """A client that shuts its write side after the request still gets the answer."""
    prompt = "The quick brown fox jumps over the lazy dog. " * 60  # a prefill of a few hundred tokens
    for stream in (False, True):
        body = json.dumps({"prompt": prompt, "max_tokens": 16, "stream": stream}).encode()
        s = conn(port, 30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        s.shutdown(socket.SHUT_WR)
        raw, _, _ = read_all(s, 30)
        s.close()
        assert status_of(raw) == 200, f"stream={stream}: {raw[:300]!r}"
        b = body_of(raw)
        if stream:
            assert b.rstrip().endswith(b"data: [DONE]"), b[-200:]
        else:
            assert json.loads(b)["choices"][0]["finish_reason"] in ("length", "stop"), b[:200]


def reset_frees(port):
    """A client that resets its connection during a non-streaming generation
    cancels it (the engine frees its KV at the next step)."""
    before = json.loads(request(port, "GET", "/stats")[2])["tokens"]["generated"]
    body = json.dumps(LONG).encode()
    s = conn(port)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    for _ in range(200):
        st = json.loads(request(port, "GET", "/stats")[2])
        if st["tokens"]["generated"] > before:
            break
        time.sleep(0.01)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()  # an RST
    t0 = time.time()
    while time.time() - t0 < 5:
        st = json.loads(request(port, "GET", "/stats")[2])
        if st["requests"]["active"] == 0 and st["kv_cache"]["blocks_used"] == 0:
            break
        time.sleep(0.01)
    gen = st["tokens"]["generated"] - before
    assert st["requests"]["active"] == 0 and gen < LONG["max_tokens"], f"{st['requests']}, {gen} tokens"


# ---- floods --------------------------------------------------------------------------------------

def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def connection_flood(port, pid):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 4096)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    n = min(2000, want - 400)  # below the server's cap, which the same limit bounds
    base = threads_of(pid)
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            socks.append(s)
        time.sleep(0.3)
        worst = max(health_ms(port) for _ in range(10))
        assert worst < 100, f"/health took {worst:.0f} ms with {n} idle connections"
        st, _, b = request(port, "POST", "/v1/completions", COMPLETION)
        assert st == 200, f"completion {st} {b[:200]!r}"
        t = threads_of(pid)
        assert t - base < 20, f"{n} idle connections: threads {base} -> {t}"
        print(f"     {n} idle connections: /health worst {worst:.1f} ms, threads {base} -> {t}")
    finally:
        for s in socks:
            s.close()


def slow_clients(port, timeout):
    """Clients sending their headers at 1 byte per second hold a socket, not a
    thread, and not past --timeout."""
    stop = threading.Event()
    closed_after = []

    def slow():
        s = conn(port)
        t0 = time.time()
        msg = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
        for ch in msg:
            if stop.is_set():
                break
            try:
                s.send(bytes([ch]))
                s.settimeout(1.0)
                if s.recv(1, socket.MSG_PEEK) == b"":
                    break
            except socket.timeout:
                continue
            except OSError:
                break
        closed_after.append(time.time() - t0)
        s.close()

    ts = [threading.Thread(target=slow) for _ in range(50)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    worst = max(health_ms(port) for _ in range(10))
    st, _, b = request(port, "POST", "/v1/completions", COMPLETION)
    for t in ts:
        t.join(timeout + 5)
    stop.set()
    assert worst < 100, f"/health took {worst:.0f} ms beside 50 slow clients"
    assert st == 200, f"completion {st} {b[:200]!r}"
    assert len(closed_after) == 50 and max(closed_after) < timeout + 2, \
        f"slow clients closed after {sorted(closed_after)[-3:]} s (--timeout {timeout})"
    print(f"     50 slow clients: /health worst {worst:.1f} ms, cut after {max(closed_after):.1f} s")


# ---- limits --------------------------------------------------------------------------------------

def start_stream(port, body):
    s = conn(port, 30)
    data = json.dumps(dict(body, stream=True)).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    first = s.recv(4096)
    assert status_of(first) == 200, first[:200]
    return s, first


def too_many(port):
    a, _ = start_stream(port, LONG)
    b, _ = start_stream(port, LONG)  # queued behind a (--batch 1)
    st, head, body = request(port, "POST", "/v1/completions", COMPLETION)
    a.close()
    b.close()
    assert st == 429, f"third request: {st} {body[:200]!r}"
    assert "Retry-After: 1" in head, head
    api_error(body)
    st, _, body = request(port, "POST", "/v1/messages", json.dumps(
        {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}))
    assert st in (200, 429), st
    # the two streams' slots come back once their clients are gone
    for _ in range(100):
        st, _, body = request(port, "POST", "/v1/completions", COMPLETION)
        if st == 200:
            break
        time.sleep(0.05)
    assert st == 200, f"after the clients left: {st} {body[:200]!r}"


def request_timeout(port):
    t0 = time.time()
    st, _, body = request(port, "POST", "/v1/completions", json.dumps(LONG), timeout=10)
    dt = time.time() - t0
    assert st == 500 and "time limit" in api_error(body)["error"]["message"], f"{st} {body[:300]!r}"
    assert dt < 1.2, f"took {dt:.1f} s with --request-timeout 0.3"
    st, _, body = request(port, "POST", "/v1/completions", json.dumps(dict(LONG, stream=True)), timeout=10)
    assert st == 200 and b"time limit" in body and b"[DONE]" not in body, body[-300:]


# ---- drain ---------------------------------------------------------------------------------------

def drain(port, token):
    st, _, body = request(port, "POST", "/admin/drain")
    assert st == 401, f"no token: {st}"
    st, _, body = request(port, "POST", "/admin/drain", headers={"Authorization": "Bearer nope"})
    assert st == 401, f"wrong token: {st}"
    s, first = start_stream(port, {"prompt": "a", "max_tokens": 300, "logit_bias": {"370": -100}})
    st, _, body = request(port, "POST", "/admin/drain", headers={"Authorization": f"Bearer {token}"})
    assert st == 202 and json.loads(body)["status"] == "draining", f"{st} {body!r}"
    st, _, body = request(port, "GET", "/health")
    assert st == 503 and json.loads(body)["status"] == "draining", f"health {st} {body!r}"
    st, _, body = request(port, "POST", "/v1/completions", COMPLETION)
    assert st == 503, f"new request while draining: {st}"
    api_error(body)
    rest, _, _ = read_all(s, 20)
    s.close()
    assert body_of(first + rest).rstrip().endswith(b"data: [DONE]"), "the running stream did not finish"


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def compile_cancel(port, pid):
    """A client that resets its connection while its grammar compiles stops
    the compile: the server's CPU goes quiet at once instead of running the
    compile and its mask warming (1.3 s of CPU here) to their end, and the
    next request is served."""
    body = json.dumps({"prompt": "a", "max_tokens": 4, "guided_regex": "(a|b)*a(a|b){16}"}).encode()
    c0 = cpu_s(pid)
    s = conn(port)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    t0 = time.time()
    while cpu_s(pid) - c0 < 0.1 and time.time() - t0 < 5:  # it compiles
        time.sleep(0.01)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()  # an RST
    c1 = cpu_s(pid)
    t1 = last = time.time()
    seen = c1
    while time.time() - last < 0.5 and time.time() - t1 < 15:  # until the server is quiet for 0.5 s
        time.sleep(0.05)
        now = cpu_s(pid)
        if now > seen:
            seen, last = now, time.time()
    used = seen - c1
    print(f"  compile cancel: {used:.2f} s of server CPU after the reset")
    assert used < 0.4, f"the compile went on after its client left: {used:.2f} s of CPU"
    st, _, b = request(port, "POST", "/v1/completions", json.dumps(
        {"prompt": "a", "max_tokens": 4, "guided_regex": "[a-z]{3}"}).encode())
    assert st == 200, b[:200]
    mem = json.loads(request(port, "GET", "/stats")[2])["memory"]
    assert 0 < mem["grammar_cache_bytes"] <= 256 << 20, mem  # the shared mask cache, counted


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "hardening":
        pid, timeout = int(sys.argv[3]), float(sys.argv[4])
        check("framing: 400/411/413/404, never a held connection", lambda: framing(port))
        check("garbage after a keep-alive request", lambda: garbage_after_keepalive(port, timeout))
        check("half-closed clients get their answer", lambda: half_close(port))
        check("a reset cancels a non-streaming generation", lambda: reset_frees(port))
        check("a reset cancels a grammar compile", lambda: compile_cancel(port, pid))
        check("connection flood: /health < 100 ms, few threads", lambda: connection_flood(port, pid))
        check("slow clients: /health < 100 ms, cut at --timeout", lambda: slow_clients(port, timeout))
        check("still healthy", lambda: health_ms(port))
    elif mode == "limits":
        check("--max-requests: 429 with Retry-After", lambda: too_many(port))
        check("--request-timeout: an error, in time", lambda: request_timeout(port))
    elif mode == "drain":
        check("POST /admin/drain: token, 503 for new work, the running stream ends", lambda: drain(port, sys.argv[3]))
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
