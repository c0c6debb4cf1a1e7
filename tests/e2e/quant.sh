#!/usr/bin/env bash
# convert / perplexity / GGUF end to end: an MLX 4-bit conversion and a GGUF
# export of the llama fixture run through generate; a GGUF export carries
# the tokenizer (or warns that it cannot); perplexity on a model
# with a byte-level tokenizer is finite, thread-independent and honours
# --stride; bad input gets a one-line error.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
fx=$root/tests/fixtures/models/llama
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

"$bin" convert --model "$fx" --out "$tmp/q4" -q --q-bits 4 --q-group-size 32 >/dev/null
python3 -c "import json; q=json.load(open('$tmp/q4/config.json'))['quantization']; assert q=={'group_size':32,'bits':4,'mode':'affine'}, q" && ok || bad "quantization block"
"$bin" generate --model "$tmp/q4" --prompt-tokens 1,2,3 --max-tokens 4 >/dev/null 2>&1 && ok || bad "MLX 4-bit model does not run"
out=$("$bin" convert --model "$fx" --out "$tmp/mix" -q --target-bpw 5.5)
grep -q "target 5.50 bpw" <<<"$out" && grep -q "6-bit" <<<"$out" && ok || bad "target-bpw report: $out"
"$bin" convert --model "$fx" --out "$tmp/m.gguf" --gguf Q8_0 >/dev/null
a=$("$bin" generate --model "$fx" --prompt-tokens 5,6,7 --max-tokens 8 --ignore-eos 2>/dev/null)
b=$("$bin" generate --model "$tmp/m.gguf" --prompt-tokens 5,6,7 --max-tokens 8 --ignore-eos 2>/dev/null)
[ -n "$b" ] && ok || bad "GGUF model does not run"

# a byte-level tokenizer (256 byte tokens, no merges) over the 512-token model
mkdir "$tmp/ppl"; cp "$fx/config.json" "$fx/model.safetensors" "$tmp/ppl/"
python3 - "$tmp/ppl/tokenizer.json" <<'PY'
import json, sys
bs = list(range(ord("!"), ord("~")+1)) + list(range(ord("¡"), ord("¬")+1)) + list(range(ord("®"), ord("ÿ")+1))
cs = bs[:]; n = 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): i for i, c in enumerate(cs)}
json.dump({"version": "1.0", "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": vocab, "merges": []}}, open(sys.argv[1], "w"))
PY
python3 -c "print('The quick brown fox jumps over the lazy dog. ' * 12)" > "$tmp/text.txt"
p1=$("$bin" perplexity --model "$tmp/ppl" --file "$tmp/text.txt" --context 128 --threads 1)
p2=$("$bin" perplexity --model "$tmp/ppl" --file "$tmp/text.txt" --context 128 --threads 2)
v1=$(echo "$p1" | awk '/^perplexity/{print $2}'); v2=$(echo "$p2" | awk '/^perplexity/{print $2}')
python3 -c "import math; v=float('$v1'); assert 1 < v < 1e4 and math.isfinite(v)" && [ "$v1" = "$v2" ] && ok || bad "perplexity $v1 / $v2"
grep -q "scored 508 tokens in 4 windows of 128" <<<"$p1" && ok || bad "window count: $p1"
p3=$("$bin" perplexity --model "$tmp/ppl" --file "$tmp/text.txt" --context 128 --stride 64)
grep -q "stride 64" <<<"$p3" && ok || bad "stride: $p3"

# GGUF export carries the tokenizer (llama.cpp keys): the byte-level one plus
# merges and a special token tokenizes the same from the GGUF
mkdir "$tmp/tok"; cp "$fx/config.json" "$fx/model.safetensors" "$tmp/tok/"
python3 - "$tmp/ppl/tokenizer.json" "$tmp/tok/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); v = t["model"]["vocab"]
for a, b in [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("o", "x")]:
    t["model"]["merges"].append(a + " " + b); v[a + b] = len(v)
t["added_tokens"] = [{"id": len(v), "content": "<|end|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}]
json.dump(t, open(sys.argv[2], "w"))
PY
out=$("$bin" convert --model "$tmp/tok" --out "$tmp/tok.gguf" --gguf Q8_0)
grep -q "tokenizer gpt2/gpt-2" <<<"$out" && ok || bad "tokenizer not exported: $out"
"$bin" convert --model "$fx" --out "$tmp/none.gguf" --gguf F16 >/dev/null 2>"$tmp/err"
grep -q "tokenizer not exported" "$tmp/err" && ok || bad "no warning without tokenizer.json: $(cat "$tmp/err")"
text='the fox, then the box<|end|> the end'
a=$("$bin" tokenize --model "$tmp/tok" --text "$text"); b=$("$bin" tokenize --model "$tmp/tok.gguf" --text "$text")
[ "$a" = "$b" ] && grep -qw 258 <<<"$a" && grep -qw 260 <<<"$a" && ok || bad "GGUF tokenizer: '$a' vs '$b'"
a=$("$bin" generate --model "$tmp/tok" --prompt "the fox" --max-tokens 4 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['prompt_tokens'])")
b=$("$bin" generate --model "$tmp/tok.gguf" --prompt "the fox" --max-tokens 4 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['prompt_tokens'])")
[ -n "$b" ] && [ "$a" = "$b" ] && ok || bad "GGUF generate --prompt: prompt tokens '$b', want '$a'"
"$bin" generate --model "$tmp/none.gguf" --prompt-tokens 5,6 --max-tokens 2 >/dev/null 2>&1 && ok || bad "GGUF without tokenizer does not run token ids"

expect_err() { local want=$1; shift
    if "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; then bad "$* succeeded"; return; fi
    if [ "$(wc -l < "$tmp/err")" -ne 1 ] || ! grep -q "^hearth: .*$want" "$tmp/err"; then
        bad "$*: stderr was: $(cat "$tmp/err")"; return; fi
    ok; }
expect_err "already exists" convert --model "$fx" --out "$tmp/q4" -q
expect_err "q-bits must be" convert --model "$fx" --out "$tmp/x" -q --q-bits 7
expect_err "unknown type" convert --model "$fx" --out "$tmp/x.gguf" --gguf Q9
expect_err "fewer than one window" perplexity --model "$tmp/ppl" --file "$tmp/text.txt" --context 4000
expect_err "stride" perplexity --model "$tmp/ppl" --file "$tmp/text.txt" --context 64 --stride 65
[ ! -e "$tmp/x" ] && ok || bad "failed convert left $tmp/x"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
