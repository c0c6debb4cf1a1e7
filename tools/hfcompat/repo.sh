#!/usr/bin/env bash
# The repo tests/e2e/hub.sh serves from its stand-in hub, at DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1/sub"
cp "$root/tests/fixtures/models/llama/config.json" "$root/tests/fixtures/models/llama/model.safetensors" \
   "$root/tests/fixtures/serve/tokenizer.json" "$root/tests/fixtures/serve/tokenizer_config.json" "$1/"
echo "a nested file" > "$1/sub/notes.txt"
