#!/usr/bin/env bash
# The server end to end: a tiny model with a real tokenizer and chat
# template, driven by the official `openai` npm client, curl, and a corpus of
# malformed requests (tests/e2e/server_test.mjs), and keep-alive comments on a
# stream queued behind a long generation.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
model=$tmp/tiny-chat
tiny_chat_model "$model"
start_server "$tmp/err" --model "$model" --threads 1 --max-body-mb 1
pid=$SERVER_PID; port=$SERVER_PORT
node "$root/tests/e2e/server_test.mjs" "http://127.0.0.1:$port" "$bin" "$model" "$root"
# graceful shutdown: SIGTERM ends the process with status 0
kill -TERM "$pid"
status=0; wait "$pid" || status=$?
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status after SIGTERM"; cat "$tmp/err"; exit 1; }
echo "server: clean exit on SIGTERM"

# ...and while connections keep arriving: the shutdown must not race
# libmicrohttpd's workers for the listening socket (lib/slow_epoll_del.c
# widens the race MHD_quiesce_daemon had: it aborted 5 of 5 stops)
cc -shared -fPIC -O2 -o "$tmp/slow_epoll_del.so" "$root/tests/e2e/lib/slow_epoll_del.c" -ldl
for i in 1 2 3; do
    LD_PRELOAD=$tmp/slow_epoll_del.so ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
        start_server "$tmp/churn" --model "$root/models/hearth-demo" --threads 1
    pid=$SERVER_PID
    python3 - "$SERVER_PORT" <<'PY' &
import socket, sys, time
t0 = time.time()
while time.time() - t0 < 1.0:  # connect and hang up, as fast as it goes
    try:
        socket.create_connection(('127.0.0.1', int(sys.argv[1]))).close()
    except OSError:
        pass
PY
    churn=$!
    sleep 0.2
    kill -TERM "$pid"
    status=0; wait "$pid" || status=$?
    wait "$churn"
    [ "$status" -eq 0 ] ||
        { echo "FAIL: exit status $status after SIGTERM under connection churn"; cat "$tmp/churn"; exit 1; }
done
echo "server: clean exit on SIGTERM under connection churn (3 of 3)"

# keep-alive: a stream queued behind long generations (--batch 1) gets
# ": keepalive P/T" comments while silent, then its chunks and [DONE]. Three
# long ones on the demo model (600 tokens each, about half a second of
# decoding)
HEARTH_SSE_KEEPALIVE=0.05 start_server "$tmp/ka" --model "$root/models/hearth-demo" --threads 1 --batch 1
port=$SERVER_PORT
queue_long "$port" '{"prompt": "a", "max_tokens": 600, "logit_bias": {"1": -100, "3": -100}}'
curl -sfN "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "b", "max_tokens": 2, "stream": true}' >"$tmp/ka.out"
wait "${LONG_PIDS[@]}"
grep -q '^: keepalive [0-9]*/[0-9]*$' "$tmp/ka.out" ||
    { echo "FAIL: no keepalive comment"; cat "$tmp/ka.out"; exit 1; }
tail -2 "$tmp/ka.out" | grep '^data: \[DONE\]$' >/dev/null || { echo "FAIL: no [DONE]"; exit 1; }
echo "server: keepalive comments while queued ($(grep -c '^: keepalive' "$tmp/ka.out"))"

