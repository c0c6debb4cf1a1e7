#!/usr/bin/env bash
# A GGUF written by `hearth convert --gguf` serves chat like its source
# directory: the exported tokenizer and tokenizer.chat_template give the same
# prompt tokens and (F32 weights) the same greedy answer, and `hearth
# template` renders the same prompt from either.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
tiny_chat_model "$tmp/tiny"
"$bin" convert --model "$tmp/tiny" --out "$tmp/tiny.gguf" --gguf F32 | grep "tokenizer gpt2/gpt-2" >/dev/null ||
    { echo "FAIL: tokenizer not exported"; exit 1; }
ask() {
    curl -sf "http://127.0.0.1:$1/v1/chat/completions" -H 'Content-Type: application/json' -d '{
      "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there, how are you?"}],
      "max_tokens": 12, "temperature": 0}' |
        python3 -c "import json,sys; o=json.load(sys.stdin); print(o['usage']['prompt_tokens'], repr(o['choices'][0]['message']['content']), o['choices'][0]['finish_reason'])"
}
start_server "$tmp/dir.log" --model "$tmp/tiny" --threads 1
a=$(ask "$SERVER_PORT")
start_server "$tmp/gguf.log" --model "$tmp/tiny.gguf" --threads 1
b=$(ask "$SERVER_PORT")
echo "directory: $a"
echo "gguf:      $b"
[ "$a" = "$b" ] || { echo "FAIL: the GGUF answers differently"; cat "$tmp/gguf.log"; exit 1; }
# `hearth template` renders the GGUF's own template like the directory's
echo '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]' >"$tmp/m.json"
"$bin" template --model "$tmp/tiny" --messages "$tmp/m.json" >"$tmp/t_dir.txt"
"$bin" template --model "$tmp/tiny.gguf" --messages "$tmp/m.json" >"$tmp/t_gguf.txt"
cmp -s "$tmp/t_dir.txt" "$tmp/t_gguf.txt" || { echo "FAIL: template of the GGUF differs"; exit 1; }
echo "gguf_serve: ok"
