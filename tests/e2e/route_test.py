"""hearth route in front of replicas (tests/e2e/route.sh starts them).

    route_test.py sticky ROUTER REPLICA...  conversations stay on one replica
    route_test.py stream ROUTER             events pass through as they come; a
                                            client that leaves ends the upstream
    route_test.py health ROUTER PID         a frozen replica is taken out, comes back
    route_test.py retry ROUTER              the first replica is dead: retried
    route_test.py bad ROUTER REPLICA        4xx passed through unchanged
    route_test.py drain ROUTER              POST /admin/drain while a stream runs
    route_test.py models ROUTER A B         replica 0 serves model A, replica 1 model B
    route_test.py load ROUTER               --load-bound 1: a busy replica gives way

Prints "ok"/"FAIL" per check; exits 1 on a failure. Every wait is bounded."""
import http.client
import json
import os
import signal
import socket
import struct
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


def request(port, method, path, body=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    c.request(method, path, body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, r.getheader("Content-Type"), out


def post(port, path, body):
    st, _, out = request(port, "POST", path, body)
    return st, json.loads(out) if out else None


def stats(port):
    return json.loads(request(port, "GET", "/stats")[2])


def wait(fn, limit, what):
    t0 = time.time()
    while time.time() - t0 < limit:
        if fn():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {limit} s")


LONG = {"prompt": "a", "max_tokens": 4000, "stream": True, "logit_bias": {"370": -100}, "n": 4}


def sticky(router, replicas):
    def run():
        system = "You are a careful assistant that reads the code before it answers. " * 4
        convs = [[{"role": "system", "content": system},
                  {"role": "user", "content": f"conversation {i}: " + "tell me about it " * (i + 3)}]
                 for i in range(8)]
        for turn in range(3):
            for i, msgs in enumerate(convs):
                st, r = post(router, "/v1/chat/completions", {"messages": msgs, "max_tokens": 4})
                assert st == 200, (st, r)
                u = r["usage"]
                if turn > 0:  # the previous turn's whole prompt blocks, at least, came from the cache
                    want = msgs_prev[i] // 32 * 32
                    got = u["prompt_tokens_details"]["cached_tokens"]
                    assert got >= want, f"conversation {i} turn {turn}: {got} cached < {want}"
                msgs_prev[i] = u["prompt_tokens"]
                msgs.append({"role": "assistant", "content": r["choices"][0]["message"]["content"].replace("\0", "")})
                msgs.append({"role": "user", "content": f"and then {turn}?"})
        s = stats(router)
        used = [r["routed"] for r in s["replicas"] if r["routed"]]
        assert len(used) >= 2, f"every conversation went to one replica: {used}"
        assert s["requests"]["by_choice"]["prefix"] > 0, s["requests"]
        assert s["tokens"]["cached"] > 0 and 0 < s["tokens"]["cache_hit_rate"] <= 1, s["tokens"]
    msgs_prev = {}
    check("conversations stick to a replica (every later turn reuses its prompt)", run)

    def responses():
        for i in range(4):
            stream = i % 2 == 1
            st, ct, out = request(router, "POST", "/v1/responses",
                                  {"input": f"response chain {i} " * 4, "max_output_tokens": 3, "stream": stream})
            assert st == 200, (st, out)
            text = out.decode()
            rid = text[text.index('"resp_') + 1:]
            rid = rid[:rid.index('"')]
            # the stored response is on one replica only: the next request must go there
            st, r = post(router, "/v1/responses", {"input": "and next?", "previous_response_id": rid,
                                                   "max_output_tokens": 3})
            assert st == 200, (st, r)
            st, _, out = request(router, "GET", f"/v1/responses/{rid}")
            assert st == 200 and json.loads(out)["id"] == rid, (st, out)
        assert stats(router)["requests"]["by_choice"]["previous_response"] == 4
    check("previous_response_id and GET /v1/responses/{id} go to the replica that stored it", responses)

    def models():
        st, ct, out = request(router, "GET", "/v1/models")
        ids = [m["id"] for m in json.loads(out)["data"]]
        assert st == 200 and len(ids) == len(set(ids)) >= 1, ids
    check("/v1/models: the replicas' models, once each", models)

    def metrics():
        st, ct, out = request(router, "GET", "/metrics")
        text = out.decode()
        assert st == 200 and ct.startswith("text/plain"), (st, ct)
        assert text.count("hearth_route_replica_up{") == len(replicas), text
        assert "hearth_route_choices_total{how=\"prefix\"}" in text
    check("/metrics: the router's series", metrics)


def active(router):
    return sum((r["stats"] or {}).get("requests", {}).get("active", 0) for r in stats(router)["replicas"])


def stream(router):
    def run():
        c = http.client.HTTPConnection("127.0.0.1", router, timeout=30)
        c.request("POST", "/v1/completions", body=json.dumps(LONG), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream", r.status
        first = r.readline()
        assert first.startswith(b"data: {"), first
        # the first event is here while the replica still generates: not buffered
        assert active(router) >= 1, "the replica had finished before the first event came"
        c.sock.shutdown(2)
        c.close()
        wait(lambda: active(router) == 0, 3, "the replica's request ended after the client left")
    check("a stream passes through as it comes; a client that leaves ends it upstream", run)

    def reset():
        # a client that resets its connection while it waits for a whole answer
        gen0 = sum((r["stats"] or {}).get("tokens", {}).get("generated", 0) for r in stats(router)["replicas"])
        body = json.dumps(dict(LONG, stream=False)).encode()
        s = socket.create_connection(("127.0.0.1", router))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        wait(lambda: active(router) >= 1, 5, "the replica's request started")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        wait(lambda: active(router) == 0, 3, "the replica's request cancelled after the client's reset")
        gen = sum((r["stats"] or {}).get("tokens", {}).get("generated", 0) for r in stats(router)["replicas"])
        assert gen - gen0 < 4 * 3990, f"{gen - gen0} tokens: the request ran to its end"
    check("a client that resets while it waits: the replica's request is cancelled", reset)

    def whole():
        st, ct, out = request(router, "POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True})
        ev = [e for e in out.decode().split("\n\n") if e]
        assert st == 200 and ct == "text/event-stream" and ev[-1] == "data: [DONE]", (st, ct, ev[-1:])
        assert all(e.startswith("data: ") for e in ev), ev
    check("a whole stream ends with [DONE]", whole)


def health(router, pid):
    def run():
        n = json.loads(request(router, "GET", "/health")[2])["replicas_healthy"]
        os.kill(pid, signal.SIGSTOP)
        try:
            wait(lambda: json.loads(request(router, "GET", "/health")[2])["replicas_healthy"] == n - 1, 5,
                 "the frozen replica taken out")
            down = [r for r in stats(router)["replicas"] if not r["healthy"]]
            assert len(down) == 1 and down[0]["down_because"], down
            for i in range(6):  # nothing goes to it
                st, r = post(router, "/v1/completions", {"prompt": f"new prompt {i} " * 3, "max_tokens": 2})
                assert st == 200, (st, r)
        finally:
            os.kill(pid, signal.SIGCONT)
        wait(lambda: json.loads(request(router, "GET", "/health")[2])["replicas_healthy"] == n, 5,
             "the replica back once healthy")
    check("a frozen replica gets no requests and comes back when it answers /health", run)


def retry(router):
    def run():
        st, r = post(router, "/v1/completions", {"prompt": "hello", "max_tokens": 2})
        assert st == 200, (st, r)
        s = stats(router)
        assert s["requests"]["retried"] == 1, s["requests"]
        assert not s["replicas"][0]["healthy"] and s["replicas"][0]["failed"] == 1, s["replicas"][0]
    check("a replica that does not answer: retried once on another", run)


def bad(router, replica):
    def same(path, body):
        a = request(router, "POST", path, body)
        b = request(replica, "POST", path, body)
        assert a[0] == b[0] and 400 <= a[0] < 500, (a[0], b[0])
        assert a[1] == b[1] == "application/json", (a[1], b[1])
        assert a[2] == b[2], (a[2], b[2])
    check("bad messages: the replica's 400", lambda: same("/v1/chat/completions", {"messages": 3}))
    check("not JSON: the replica's 400", lambda: same("/v1/chat/completions", b"{not json"))
    check("/v1/messages: the replica's error in Anthropic's shape",
          lambda: same("/v1/messages", {"messages": [{"role": "user", "content": "x"}]}))
    check("an unknown model: the replica's 404",
          lambda: same("/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "x"}]}))

    def unknown():
        st, ct, out = request(router, "GET", "/v1/nothing")
        assert st == 404 and json.loads(out)["error"], (st, out)
    check("an unknown route: 404", unknown)


def models(router, a, b):
    def run():
        wait(lambda: all(r["models"] for r in stats(router)["replicas"]), 5, "the replicas' models read")
        for i in range(6):
            for m in (a, b, a):
                st, r = post(router, "/v1/completions", {"model": m, "prompt": f"prompt {i} for {m} " * 3, "max_tokens": 2})
                assert st == 200, (st, r)
        routed = [r["routed"] for r in stats(router)["replicas"]]
        assert routed == [12, 6], routed
        ids = sorted(m["id"] for m in json.loads(request(router, "GET", "/v1/models")[2])["data"])
        assert ids == sorted([a, b]), ids
    check("each request goes to a replica that serves its model", run)


def load(router):
    def run():
        conns = []
        try:
            for _ in range(3):  # one prompt: the same replica, until it is 2 requests busier
                c = http.client.HTTPConnection("127.0.0.1", router, timeout=30)
                c.request("POST", "/v1/completions", body=json.dumps(LONG), headers={"Content-Type": "application/json"})
                r = c.getresponse()
                assert r.status == 200 and r.readline().startswith(b"data: {")
                conns.append(c)
            s = stats(router)
            assert s["requests"]["by_choice"]["load"] == 1, s["requests"]
            assert sorted(r["in_flight"] for r in s["replicas"]) == [0, 1, 2], [r["in_flight"] for r in s["replicas"]]
        finally:
            for c in conns:
                c.sock.shutdown(2)
                c.close()
    check("--load-bound 1: the third request of a prompt goes to a less busy replica", run)


def drain(router):
    def run():
        c = http.client.HTTPConnection("127.0.0.1", router, timeout=60)
        body = dict(LONG, n=1, max_tokens=600)
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200
        first = r.readline()
        assert first.startswith(b"data: {"), first
        st, _, out = request(router, "POST", "/admin/drain")
        assert st == 202 and json.loads(out)["status"] == "draining", (st, out)
        st, _, out = request(router, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert st == 503, (st, out)
        rest = r.read().decode()
        assert rest.rstrip().endswith("data: [DONE]"), rest[-200:]
    check("POST /admin/drain: the running stream finishes, new ones get 503", run)


if __name__ == "__main__":
    cmd, router = sys.argv[1], int(sys.argv[2])
    if cmd == "sticky":
        sticky(router, sys.argv[3:])
    elif cmd == "stream":
        stream(router)
    elif cmd == "health":
        health(router, int(sys.argv[3]))
    elif cmd == "retry":
        retry(router)
    elif cmd == "bad":
        bad(router, int(sys.argv[3]))
    elif cmd == "drain":
        drain(router)
    elif cmd == "load":
        load(router)
    elif cmd == "models":
        models(router, sys.argv[3], sys.argv[4])
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
