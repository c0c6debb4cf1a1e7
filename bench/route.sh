#!/usr/bin/env bash
# The router's acceptance figure (docs/routing.md): an agent-like workload
# (many conversations sharing a system prompt, each growing turn by turn,
# interleaved, a few in flight at once) against
#   1. one server alone,
#   2. 4 replicas behind `hearth route` (--policy prefix),
#   3. 4 replicas behind `hearth route --policy round-robin`,
# each arm on fresh servers; prints the prompt-cache hit rate of each
# (replicas' tokens.cached / tokens.prompt from /stats, summed) from one run.
#   bench/route.sh build/hearth [CONVERSATIONS] [TURNS] [CONCURRENCY]
#   defaults 32 conversations, 6 turns, 4 in flight. env MODEL: a chat
#   model directory (default: the tiny llama fixture with the test
#   tokenizer and ChatML template, tests/e2e/lib/serve.sh).
set -euo pipefail
bin=$(realpath "$1"); convs=${2:-32}; turns=${3:-6}; conc=${4:-4}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=${MODEL:-}
if [ -z "$model" ]; then
    export HEARTH_ROOT=$root HEARTH_BIN=$bin
    . "$root/tests/e2e/lib/serve.sh"
    model=$tmp/tiny-chat
    tiny_chat_model "$model"
fi
node "$root/bench/route.mjs" "$bin" "$model" "$convs" "$turns" "$conc"
