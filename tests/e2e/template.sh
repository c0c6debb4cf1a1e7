#!/usr/bin/env bash
# hearth template: renders a model directory's chat template like
# transformers' apply_chat_template, and fails cleanly on bad input.
set -euo pipefail
bin=${HEARTH_BIN:?}
root=${HEARTH_ROOT:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A Qwen2.5 model directory: tokenizer_config.json carries the template.
python3 - "$root" "$tmp" <<'PY'
import json, sys
root, tmp = sys.argv[1], sys.argv[2]
src = open(f"{root}/tests/fixtures/chat/templates/Qwen-Qwen2.5-7B-Instruct.jinja").read()
json.dump({"chat_template": src, "bos_token": None,
           "eos_token": {"content": "<|im_end|>", "special": True}},
          open(f"{tmp}/tokenizer_config.json", "w"))
conv = json.load(open(f"{root}/tests/fixtures/chat/conversations.json"))["conversations"]
json.dump(conv["tool_calls"]["messages"], open(f"{tmp}/messages.json", "w"))
json.dump(conv["tool_calls"]["tools"], open(f"{tmp}/tools.json", "w"))
PY

expected() { # case index -> expected output file
    python3 - "$root" "$1" > "$tmp/want" <<'PY'
import json, sys
r = json.load(open(f"{sys.argv[1]}/tests/fixtures/chat/expected/Qwen-Qwen2.5-7B-Instruct.json"))
sys.stdout.write(r[int(sys.argv[2])]["output"])
PY
}

# cases 12/13 of conversations.json: tool_calls with / without the generation prompt
"$bin" template --model "$tmp" --messages "$tmp/messages.json" --tools "$tmp/tools.json" > "$tmp/got"
expected 12
cmp -s "$tmp/want" "$tmp/got" || fail "tool_calls render differs"
"$bin" template --model "$tmp" --messages "$tmp/messages.json" --tools "$tmp/tools.json" \
    --no-generation-prompt > "$tmp/got"
expected 13
cmp -s "$tmp/want" "$tmp/got" || fail "--no-generation-prompt render differs"

# chat_template.jinja wins over tokenizer_config.json; --kwargs reaches the template
printf '%s' '{{ greeting }}, {{ messages[0].content }}{{ eos_token }}' > "$tmp/chat_template.jinja"
out=$("$bin" template --model "$tmp" --messages "$tmp/messages.json" --kwargs '{"greeting":"Hi"}')
[ "$out" = "Hi, You can call tools.<|im_end|>" ] || fail "kwargs/chat_template.jinja: '$out'"

# errors: a clear message and exit status 1, never a crash
printf '%s' '{% if %}' > "$tmp/chat_template.jinja"
if "$bin" template --model "$tmp" --messages "$tmp/messages.json" 2> "$tmp/err"; then
    fail "syntax error accepted"; fi
grep -q "template syntax error at line 1" "$tmp/err" || fail "syntax message: $(cat "$tmp/err")"
printf '%s' "{{ raise_exception('nope') }}" > "$tmp/chat_template.jinja"
if "$bin" template --model "$tmp" --messages "$tmp/messages.json" 2> "$tmp/err"; then
    fail "raise_exception accepted"; fi
grep -q "raise_exception: nope" "$tmp/err" || fail "raise message: $(cat "$tmp/err")"
if "$bin" template --model "$tmp" --messages "$tmp/missing.json" 2> "$tmp/err"; then
    fail "missing messages file accepted"; fi
if "$bin" template --model "$tmp" --messages "$tmp/messages.json" --kwargs '{bad' 2> "$tmp/err"; then
    fail "bad --kwargs accepted"; fi
grep -q -- "--kwargs" "$tmp/err" || fail "kwargs message: $(cat "$tmp/err")"
if "$bin" template --messages "$tmp/messages.json" 2> /dev/null; then fail "--model not required"; fi
"$bin" template --help | grep -- "--no-generation-prompt" >/dev/null || fail "help"
echo "template e2e: ok"
