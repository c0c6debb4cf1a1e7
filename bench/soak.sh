#!/usr/bin/env bash
# The 30-minute soak of docs/operations.md ("Soak"): bench/soak.py's 8
# clients against `hearth serve` on the tiny test model, on loopback.
#   bench/soak.sh HEARTH_BIN [SECONDS] [OUT_DIR]
# OUT_DIR gets the server's log and the RSS curve (soak-rss.tsv).
set -euo pipefail
bin=$(realpath "${1:?usage: soak.sh HEARTH_BIN [SECONDS] [OUT_DIR]}")
secs=${2:-1800}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${3:-$(mktemp -d)}
mkdir -p "$out"
export HEARTH_BIN=$bin HEARTH_ROOT=$root
. "$root/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
tiny_chat_model "$tmp/tiny-chat"
start_server "$out/server.log" --model "$tmp/tiny-chat" --threads 1 --max-body-mb 1 --timeout 5 \
    --ssd-cache "$tmp/ssd"
python3 "$root/bench/soak.py" "$SERVER_PORT" "$SERVER_PID" "$secs" "$out/soak-rss.tsv"
