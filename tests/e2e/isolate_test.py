"""--isolate's acceptance (tests/e2e/isolate.sh starts the server):
kill -9 of the engine child while 8 clients stream and one waits for a whole
answer: every client gets an error or a complete answer within 5 s, /health
says the engine restarts, the server answers again, the SSD tier makes the
new child warm, and a second death waits longer (exponential backoff).

    isolate_test.py PORT PARENT_PID LOG"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from ops_test import body_of, check, read_all, request, status_of  # noqa: E402

import ops_test  # noqa: E402

port, parent, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
WARM = "The quick brown fox jumps over the lazy dog. " * 20  # several 32-token blocks


def child_pid():
    out = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout.split()
    assert len(out) == 1, f"engine children: {out}"
    return int(out[0])


def wait_healthy(limit=20):
    t0 = time.time()
    while time.time() - t0 < limit:
        try:
            st, _, _ = request(port, "GET", "/health", timeout=2)
            if st == 200:
                return time.time() - t0
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"not healthy within {limit} s")


def stream_client(results, i):
    body = json.dumps({"prompt": f"client {i}", "max_tokens": 3000, "stream": True,
                       "logit_bias": {"370": -100}}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    first = s.recv(8192)
    results[i] = {"started": time.time()}
    raw, closed, _ = read_all(s, 30, until=b"\r\n0\r\n\r\n")  # closed, or the last chunk
    s.close()
    b = body_of(first + raw)
    results[i].update(ended=time.time(), status=status_of(first), closed=closed,
                      done=b.rstrip().endswith(b"data: [DONE]"), error=b'"error"' in b)


def blocking_client(results):
    st, _, b = request(port, "POST", "/v1/completions", json.dumps(
        {"prompt": "blocking", "max_tokens": 3000, "logit_bias": {"370": -100}}), timeout=30)
    results["blocking"] = {"ended": time.time(), "status": st, "body": b[:300]}


def kill_mid_stream():
    # warm the SSD tier: a prompt of whole blocks, written through in the background
    st, _, b = request(port, "POST", "/v1/completions", json.dumps({"prompt": WARM, "max_tokens": 2}))
    assert st == 200, b[:200]
    for _ in range(100):
        stats = json.loads(request(port, "GET", "/stats")[2])
        if stats["ssd_cache"]["blocks_written"] > 0:
            break
        time.sleep(0.05)
    assert stats["ssd_cache"]["blocks_written"] > 0, stats["ssd_cache"]
    results = {}
    ts = [threading.Thread(target=stream_client, args=(results, i)) for i in range(8)]
    ts.append(threading.Thread(target=blocking_client, args=(results,)))
    for t in ts:
        t.start()
    for _ in range(500):
        if sum(1 for k in range(8) if k in results) == 8:
            break
        time.sleep(0.01)
    assert sum(1 for k in range(8) if k in results) == 8, "the streams did not start"
    time.sleep(0.1)
    victim = child_pid()
    t_kill = time.time()
    os.kill(victim, signal.SIGKILL)
    saw_restarting = False
    while time.time() - t_kill < 3:
        st, _, b = request(port, "GET", "/health", timeout=2)
        if st == 503 and json.loads(b)["status"] == "restarting":
            saw_restarting = True
            break
        time.sleep(0.01)
    for t in ts:
        t.join(8)
    assert not any(t.is_alive() for t in ts), "a client hangs"
    for i in range(8):
        r = results[i]
        assert r["status"] == 200 and r["closed"] and (r["done"] or r["error"]), f"client {i}: {r}"
        assert r["ended"] - t_kill < 5, f"client {i} ended {r['ended'] - t_kill:.1f} s after the kill"
    rb = results["blocking"]
    assert rb["status"] in (200, 503) and rb["ended"] - t_kill < 5, rb
    assert saw_restarting, "/health never said the engine restarts"
    up = wait_healthy()
    print(f"     8 streams: {sum(results[i]['error'] for i in range(8))} errors, "
          f"{sum(results[i]['done'] for i in range(8))} complete; blocking: {rb['status']}; "
          f"healthy again {time.time() - t_kill:.2f} s after the kill")
    assert child_pid() != victim
    st, _, b = request(port, "POST", "/v1/completions", json.dumps({"prompt": WARM, "max_tokens": 2}))
    assert st == 200, b[:200]
    cached = json.loads(b)["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 32, f"the new child is cold: cached_tokens {cached}"
    print(f"     warm after the restart: {cached} cached tokens from the SSD tier")


def backoff():
    os.kill(child_pid(), signal.SIGKILL)
    lines = []
    for _ in range(250):
        with open(log) as f:
            lines = [l for l in f if "restarting in" in l]
        if len(lines) >= 2:
            break
        time.sleep(0.02)
    assert len(lines) >= 2 and "restarting in 0.2 s" in lines[-1], lines[-2:]
    wait_healthy()


def stopped_child():
    """A child that stops answering (SIGSTOP) is killed after --engine-timeout
    (2 s here) and replaced; its request ends with an error meanwhile."""
    victim = child_pid()
    results = {}
    th = threading.Thread(target=stream_client, args=(results, 0))
    th.start()
    for _ in range(300):
        if 0 in results:
            break
        time.sleep(0.01)
    t0 = time.time()
    os.kill(victim, signal.SIGSTOP)
    th.join(10)
    assert not th.is_alive(), "the stream hangs"
    r = results[0]
    assert r["error"] and 1.5 < r["ended"] - t0 < 5, f"{r}, {r['ended'] - t0:.1f} s after SIGSTOP"
    wait_healthy()
    assert child_pid() != victim
    with open(log) as f:
        assert any("stopped answering" in l for l in f), "no log line"


check("kill -9 of the engine mid-stream: no client hangs, restart, warm", kill_mid_stream)
check("a second death restarts after a longer wait", backoff)
check("a stopped engine is killed after --engine-timeout and replaced", stopped_child)
print(f"{ops_test.passed} passed, {ops_test.failed} failed")
sys.exit(1 if ops_test.failed else 0)
