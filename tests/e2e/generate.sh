#!/usr/bin/env bash
# hearth generate / synth end to end: the greedy tokens of the llama fixture
# equal the oracle's, and bad input gets a one-line error and exit 1.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
fx=$root/tests/fixtures/models/llama
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

# greedy parity through the CLI
read -r prompt want < <(python3 -c "
import json; c=json.load(open('$fx/ref.json'))['cases'][1]
print(','.join(map(str,c['prompt_tokens'])), ','.join(map(str,c['greedy_tokens'])))")
got=$("$bin" generate --model "$fx" --prompt-tokens "$prompt" --max-tokens 16 --ignore-eos --json --top-logprobs 3 |
      python3 -c "import json,sys; o=json.load(sys.stdin); assert len(o['top_logprobs'])==16; assert o['decode_tokens_per_s']>0; print(','.join(map(str,o['tokens'])))")
[ "$got" = "$want" ] && ok || bad "greedy tokens $got != oracle $want"
# the same without the warm-up token, which caches nothing: a fresh SSD
# cache serves no token of the prompt either way
for w in "" --no-warmup; do
    got=$("$bin" generate --model "$fx" --prompt-tokens "$prompt" --max-tokens 16 --ignore-eos --json \
          --ssd-cache "$tmp/ssd$w" $w |
          python3 -c "import json,sys; o=json.load(sys.stdin); assert o['usage']['cached_tokens']==0, o['usage']; print(','.join(map(str,o['tokens'])))")
    [ "$got" = "$want" ] && ok || bad "greedy tokens ($w) $got != oracle $want"
done

# bench: one bandwidth reading per repeat, the % the median of the repeats' own
"$bin" bench --model "$fx" --prompt-len 8 --gen-len 4 --repeats 3 --threads 1 --json | python3 -c "
import json, statistics, sys
o = json.load(sys.stdin); r = o['runs']
assert len(r) == 3 and all(x['mem_bandwidth_gb_s'] > 0 for x in r), r
for x in r:
    want = 100 * x['decode_tokens_per_s'] * o['bytes_per_token'] / (x['mem_bandwidth_gb_s'] * 1e9)
    assert abs(x['decode_pct_of_roofline'] - want) < 1e-6 * want, (x, want)
for k in ('decode_pct_of_roofline', 'decode_tokens_per_s', 'mem_bandwidth_gb_s'):
    assert o[k] == statistics.median(x[k] for x in r), k
" && ok || bad "bench's per-repeat roofline"

# bench: KV bytes per token and the 16k-token sequences a --kv-budget holds
"$bin" bench --model "$fx" --prompt-len 8 --gen-len 4 --repeats 1 --threads 1 --json --kv-budget 2 \
    --kv-dtype bf16 | python3 -c "
import json, sys
o = json.load(sys.stdin); c = json.load(open('$fx/config.json'))
hd = c.get('head_dim') or c['hidden_size'] // c['num_attention_heads']
row = hd * 2  # bf16
want = c['num_hidden_layers'] * c['num_key_value_heads'] * 2 * row
assert o['kv_bytes_per_token'] == want, (o['kv_bytes_per_token'], want)
assert o['seqs_16k_in_kv_budget'] == int(2e9 // (want * 16384)), o
" && ok || bad "bench's KV bytes per token and budget"

# seeded sampling is reproducible
a=$("$bin" generate --model "$fx" --prompt-tokens 1,2,3 --max-tokens 20 --temp 0.8 --top-p 0.9 --seed 42 --ignore-eos 2>/dev/null)
b=$("$bin" generate --model "$fx" --prompt-tokens 1,2,3 --max-tokens 20 --temp 0.8 --top-p 0.9 --seed 42 --ignore-eos 2>/dev/null)
c=$("$bin" generate --model "$fx" --prompt-tokens 1,2,3 --max-tokens 20 --temp 0.8 --top-p 0.9 --seed 43 --ignore-eos 2>/dev/null)
[ "$a" = "$b" ] && [ "$a" != "$c" ] && ok || bad "seeded sampling not reproducible"

# errors: exit 1, one line on stderr starting with 'hearth: '
expect_err() { # expected-substring args...
    local want=$1; shift
    if "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; then bad "$* succeeded"; return; fi
    if [ "$(wc -l < "$tmp/err")" -ne 1 ] || ! grep -q "^hearth: .*$want" "$tmp/err"; then
        bad "$*: stderr was: $(cat "$tmp/err")"; return; fi
    ok
}
expect_err "unknown flag '--bogus'" generate --model "$fx" --bogus 1
expect_err "needs a value" generate --model
expect_err "expected an integer" generate --model "$fx" --prompt-tokens 1 --max-tokens x
expect_err "kv-budget must be > 0" bench --model "$fx" --kv-budget 0
expect_err "bad token list" generate --model "$fx" --prompt-tokens 1,a
expect_err "outside the vocabulary" generate --model "$fx" --prompt-tokens 1,99999
expect_err "no such model directory" generate --model /nonexistent --prompt-tokens 1
expect_err "context limit is 8 tokens" generate --model "$fx" --prompt-tokens 1,2,3,4,5,6,7,8,9 --ctx 8
expect_err "unknown shape" synth --shape nope --out "$tmp/x"
"$bin" bogus-verb 2>/dev/null && bad "unknown verb accepted" || ok

# synth writes a model generate can run
"$bin" synth --shape tiny-llama --out "$tmp/tiny" --seed 3 >/dev/null
"$bin" generate --model "$tmp/tiny" --prompt-tokens 1,2 --max-tokens 4 >/dev/null 2>&1 && ok || bad "synth model does not run"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
