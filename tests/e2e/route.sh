#!/usr/bin/env bash
# hearth route in front of 3 replicas (tests/e2e/route_test.py): sticky
# conversations, streams passed through as they come and ended upstream
# when the client leaves, health checks (a frozen replica out and back),
# one retry when a replica gives no answer, 4xx passed through unchanged,
# replicas of different models, --load-bound, and a drain that finishes
# the running stream and exits 0.
# docs/routing.md.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
model=$tmp/tiny-chat
tiny_chat_model "$model"

# start_router LOG ARGS...: `hearth route --port 0 ARGS...`; sets ROUTER_PID, ROUTER_PORT
start_router() {
    start_verb route "$@" || return 1
    ROUTER_PID=$SERVER_PID ROUTER_PORT=$SERVER_PORT
}

ports=(); pids=()
for r in a b c; do
    start_server "$tmp/$r" --model "$model" --threads 1 --no-ui
    ports+=("$SERVER_PORT"); pids+=("$SERVER_PID")
done
urls=http://127.0.0.1:${ports[0]},http://127.0.0.1:${ports[1]},http://127.0.0.1:${ports[2]}
start_router "$tmp/r" --replicas "$urls" --health-interval 0.2
fail() { echo "--- router log"; cat "$tmp/r"; exit 1; }
python3 "$root/tests/e2e/route_test.py" sticky "$ROUTER_PORT" "${ports[@]}" || fail
python3 "$root/tests/e2e/route_test.py" stream "$ROUTER_PORT" || fail
python3 "$root/tests/e2e/route_test.py" bad "$ROUTER_PORT" "${ports[0]}" || fail
python3 "$root/tests/e2e/route_test.py" health "$ROUTER_PORT" "${pids[1]}" || fail

# a dead replica first in round-robin order, never polled in time: the
# request's first try gets no answer and goes to the next replica
start_server "$tmp/d" --model "$model" --threads 1 --no-ui
dead=$SERVER_PORT dead_pid=$SERVER_PID
start_router "$tmp/r2" --replicas "http://127.0.0.1:$dead,$urls" --policy round-robin --health-interval 60
kill -9 "$dead_pid"; wait "$dead_pid" 2>/dev/null || true
python3 "$root/tests/e2e/route_test.py" retry "$ROUTER_PORT" || { cat "$tmp/r2"; exit 1; }
kill "$ROUTER_PID"

start_router "$tmp/r5" --replicas "$urls" --load-bound 1
python3 "$root/tests/e2e/route_test.py" load "$ROUTER_PORT" || { cat "$tmp/r5"; exit 1; }
kill "$ROUTER_PID"

# replicas of different models: each request goes where its model is
start_server "$tmp/o" --model "$model" --threads 1 --no-ui --served-model-name other
other=$SERVER_PORT
start_router "$tmp/r4" --replicas "http://127.0.0.1:${ports[0]},http://127.0.0.1:$other"
python3 "$root/tests/e2e/route_test.py" models "$ROUTER_PORT" tiny-chat other || { cat "$tmp/r4"; exit 1; }
kill "$ROUTER_PID"

# the CLI's own errors
for args in "" "--replicas ftp://x" "--replicas http://127.0.0.1:1 --policy nope" \
            "--replicas http://127.0.0.1:1,http://127.0.0.1:1"; do
    # shellcheck disable=SC2086
    if out=$("$bin" route --port 0 $args 2>&1); then echo "FAIL: route $args started"; exit 1; fi
    [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || { echo "FAIL: route $args: $out"; exit 1; }
done
echo "ok   bad flags: one line, non-zero exit"

start_router "$tmp/r3" --replicas "$urls"
pid=$ROUTER_PID
python3 "$root/tests/e2e/route_test.py" drain "$ROUTER_PORT" || { cat "$tmp/r3"; exit 1; }
status=0; timeout 20 tail --pid="$pid" -f /dev/null || status=$?
wait "$pid" || status=$?
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status after the drain"; cat "$tmp/r3"; exit 1; }
echo "ok   the drained router exited 0"
