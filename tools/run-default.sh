#!/usr/bin/env bash
# make run: run hearth on the default model. Until the server lands this is
# `hearth generate` on the bundled default model directory.
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/.." && pwd)
model=${HEARTH_MODEL:-$root/models/hearth-demo}
if [ ! -d "$model" ]; then
    model=$root/tests/fixtures/models/llama   # a tiny random-weight model
fi
echo "hearth: running $model" >&2
exec "$bin" generate --model "$model" --prompt-tokens 1,2,3,4,5,6,7,8 --max-tokens 32 --top-logprobs 1 --json
