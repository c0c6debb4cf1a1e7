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
if command -v promtool >/dev/null; then
    curl -sf "$base/metrics" >"$tmp/metrics"
    promtool check metrics <"$tmp/metrics" || { echo "FAIL: promtool check metrics"; exit 1; }
    echo "metrics: promtool check metrics passes"
else
    echo "FAIL: promtool not found (Debian package prometheus, tools/apt-packages.txt)"
    exit 1
fi
