#!/usr/bin/env bash
# GET /metrics end to end: Prometheus' text format line by line, promtool's
# lint (Debian package prometheus), counters that move as requests are
# served, and an answer that never waits on a running generation
# (tests/e2e/metrics_test.mjs).
set -euo pipefail
: "${HEARTH_BIN:?}" "${HEARTH_ROOT:?}"
. "$HEARTH_ROOT/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
tiny_chat_model "$tmp/tiny-chat"
start_server "$tmp/err" --model "$tmp/tiny-chat" --threads 1
base=http://127.0.0.1:$SERVER_PORT
node "$HEARTH_ROOT/tests/e2e/metrics_test.mjs" "$base"
# the SSD tier's bytes: a server writes the prompt's blocks, the next one
# (same --ssd-cache) reads them back
metric() { curl -sf "$1/metrics" | awk -v k="$2" '$1 == k {print $2}'; }
long=$(python3 -c 'print("In the beginning God created the heaven and the earth. " * 8)')
body=$(python3 -c 'import json, sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 2}))' "$long")
for run in 1 2; do
    nw=; [ $run = 2 ] && nw=--no-warmup # (either way: the blocks come back)
    start_server "$tmp/err$run" --model "$tmp/tiny-chat" --threads 1 --ssd-cache "$tmp/ssd" $nw
    b=http://127.0.0.1:$SERVER_PORT
    curl -sf "$b/v1/completions" -d "$body" >/dev/null
    for _ in $(seq 100); do # written in the background
        [ "$(metric "$b" 'hearth_ssd_cache_written_bytes_total{model="tiny-chat"}')" != 0 ] || [ $run = 2 ] && break
        sleep 0.05
    done
    w=$(metric "$b" 'hearth_ssd_cache_written_bytes_total{model="tiny-chat"}'); r=$(metric "$b" 'hearth_ssd_cache_read_bytes_total{model="tiny-chat"}')
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
    if [ $run = 1 ]; then
        awk -v w="$w" 'BEGIN { exit !(w > 0) }' || { echo "FAIL: SSD written bytes $w"; exit 1; }
    else
        awk -v r="$r" 'BEGIN { exit !(r > 0) }' || { echo "FAIL: SSD read bytes $r"; exit 1; }
    fi
done
echo "metrics: SSD tier bytes move (written, then read back by the next server)"
if command -v promtool >/dev/null; then
    curl -sf "$base/metrics" >"$tmp/metrics"
    promtool check metrics <"$tmp/metrics" || { echo "FAIL: promtool check metrics"; exit 1; }
    echo "metrics: promtool check metrics passes"
else
    echo "FAIL: promtool not found (Debian package prometheus, tools/apt-packages.txt)"
    exit 1
fi
