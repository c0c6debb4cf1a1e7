#!/usr/bin/env bash
# --isolate: the engine in a child process (tests/e2e/isolate_test.py kills
# it mid-stream), a load failure reported by the parent, the routes through
# the relay (the server test's client checks), and a clean SIGTERM.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
model=$tmp/tiny-chat
tiny_chat_model "$model"

# the child cannot load: the parent says why, exits 1
status=0; "$bin" serve --port 0 --isolate --model "$tmp/nope" 2>"$tmp/fail" || status=$?
[ "$status" -ne 0 ] && grep -q "nope" "$tmp/fail" || { echo "FAIL: load error"; cat "$tmp/fail"; exit 1; }
echo "isolate: a child that cannot load: exit $status, $(tail -1 "$tmp/fail")"

start_server "$tmp/log" --model "$model" --threads 1 --max-body-mb 1 --isolate --engine-timeout 2 --ssd-cache "$tmp/ssd"
pid=$SERVER_PID; port=$SERVER_PORT
python3 "$root/tests/e2e/isolate_test.py" "$port" "$pid" "$tmp/log" || { cat "$tmp/log"; exit 1; }
node "$root/tests/e2e/server_test.mjs" "http://127.0.0.1:$port" "$bin" "$model" "$root" ||
    { cat "$tmp/log"; exit 1; }
kill -TERM "$pid"
status=0; wait "$pid" || status=$?
[ "$status" -eq 0 ] || { echo "FAIL: exit status $status after SIGTERM"; cat "$tmp/log"; exit 1; }
if pgrep -f "engine-fd.*$tmp" >/dev/null; then echo "FAIL: the engine child outlived the server"; exit 1; fi
echo "isolate: clean exit on SIGTERM, no child left"
