#!/usr/bin/env bash
# Parity with transformers through the server: each tiny random-weight media
# fixture (tests/fixtures/vision/gemma3, vision/qwen2_5_vl, audio/qwen2_audio;
# tools/refgen) served by `hearth serve` as a model directory made here: the
# fixture's own weights, config and preprocessor config (symlinks), a made-up
# WordPiece tokenizer with one word "wN" per id and the family's media tokens,
# and a chat template that writes a user message's parts in order
# (tests/e2e/lib/parity_model.py). The openai client sends the fixture's
# images as data: URLs (the server decodes and resizes the PNG bytes itself)
# or its WAV clips as input_audio parts, with text parts chosen so that the
# server's prompt is ref.json's; greedy, 8 tokens, logprobs: the tokens equal
# transformers', each logprob within 1e-4, usage.prompt_tokens the ref
# prompt's length (tests/e2e/media_parity_test.mjs); the prompt's ids, which
# the server does not report, are ref.json's through `hearth generate
# --json` on the same message and model directory. A fixture directory
# that is absent is reported as skipped; any difference fails.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
ran=0
for spec in gemma3:vision/gemma3 qwen2_5_vl:vision/qwen2_5_vl qwen2_audio:audio/qwen2_audio; do
    fam=${spec%%:*}
    fx=$root/tests/fixtures/${spec#*:}
    if [ ! -f "$fx/ref.json" ]; then
        echo "media_parity: $fam skipped: no fixture at $fx (tools/refgen, GPU machine)"
        continue
    fi
    python3 "$root/tests/e2e/lib/parity_model.py" "$fam" "$fx" "$tmp/$fam" "$tmp/$fam.json" ||
        fail "$fam: could not build the model directory"
    start_server "$tmp/$fam.log" --model "$tmp/$fam" --threads 2 ||
        fail "$fam: server did not start: $(tail -3 "$tmp/$fam.log")"
    node "$root/tests/e2e/media_parity_test.mjs" "http://127.0.0.1:$SERVER_PORT" "$tmp/$fam.json" "$root" ||
        fail "$fam: differs from transformers (server log: $(tail -3 "$tmp/$fam.log"))"
    stop_servers
    SERVER_PIDS=()
    # the prompt's ids themselves (the server reports only their count):
    # `hearth generate --json` renders the same message through the same
    # template, tokenizer and placement (src/api/images.c) and lists them
    mapfile -t args < <(python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))["generate"]))' "$tmp/$fam.json")
    "$bin" generate --model "$tmp/$fam" "${args[@]}" --max-tokens 8 --temp 0 --json --threads 2 \
        >"$tmp/$fam.gen" 2>"$tmp/$fam.err" || fail "$fam: generate: $(cat "$tmp/$fam.err")"
    python3 - "$tmp/$fam.gen" "$tmp/$fam.json" <<'PY' || fail "$fam: the prompt's ids are not ref.json's"
import json, sys
g, r = (json.load(open(p)) for p in sys.argv[1:])
assert g["prompt_tokens"] == r["prompt"], (g["prompt_tokens"], r["prompt"])
assert g["tokens"] == [x["token"] for x in r["greedy"]], (g["tokens"], r["greedy"])
PY
    ran=$((ran + 1))
done
echo "media_parity: $ran of 3 fixtures equal to transformers through the server"
