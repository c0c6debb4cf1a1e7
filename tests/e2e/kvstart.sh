#!/usr/bin/env bash
# --quantized-kv-start with --kv-bits on serve, bench and perplexity (the
# demo model: head_dim 64): serve with mlx-lm's default start (5000) starts
# and answers; serve at start 40 answers a request that crosses the start,
# and one that stays below it exactly as a server without --kv-bits, a long
# prompt re-sent reuses its quantized blocks, and /stats shows both pools; bench
# and perplexity take a start inside the sequence; --kv-residual over
# TurboQuant answers and resumes a re-sent prompt (at a window's start after
# a restart through the SSD tier), and over --kv-bits with a start inside
# the sequence; bad values get one line.
set -euo pipefail
bin=${HEARTH_BIN:?}; root=${HEARTH_ROOT:?}
. "$root/tests/e2e/lib/serve.sh"
tmp=$(mktemp -d)
trap 'stop_servers; rm -rf "$tmp"' EXIT
demo=$root/models/hearth-demo
pass=0; fail=0
ok()  { pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }

complete() { # PORT PROMPT MAX_TOKENS -> the completion's text
    curl -sf "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"$2\", \"max_tokens\": $3, \"temperature\": 0}" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
}
short="Once upon a time"
long="The little dog ran to the park and saw a big red ball. He wanted to play with it, so he ran"

start_server "$tmp/default.log" --model "$demo" --threads 1 --kv-bits 4
t=$(complete "$SERVER_PORT" "$short" 8) && [ -n "$t" ] && ok || bad "--kv-bits 4 (start 5000): no answer"
start_server "$tmp/plain.log" --model "$demo" --threads 1
plain=$SERVER_PORT
start_server "$tmp/start.log" --model "$demo" --threads 1 --kv-bits 4 --quantized-kv-start 40
conv=$SERVER_PORT
a=$(complete "$plain" "$short" 8); b=$(complete "$conv" "$short" 8)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "below the start: '$b', without --kv-bits '$a'"
b=$(complete "$conv" "$long" 40) && [ -n "$b" ] && ok || bad "crossing the start: no answer"
curl -sf "http://127.0.0.1:$conv/health" >/dev/null && ok || bad "server gone after a conversion"
# the same long prompt again: it starts converted on the first one's quantized
# blocks (cached_tokens past the start) and answers as the first time
usage() { # PORT PROMPT MAX_TOKENS -> "cached_tokens text"
    curl -sf "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"$2\", \"max_tokens\": $3, \"temperature\": 0}" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["usage"]["prompt_tokens_details"]["cached_tokens"], d["choices"][0]["text"])'
}
longer="$long $long"
u1=$(usage "$conv" "$longer" 12); u2=$(usage "$conv" "$longer" 12)
[ -n "$u1" ] && [ "${u2#* }" = "${u1#* }" ] && [ "${u2%% *}" -ge 40 ] && ok ||
    bad "re-sent past the start: '$u2', the first time '$u1'"
# /stats: the pool sequences start in (f32) and the quantized one, all of it
# free again or held by the prompt cache (the converted sequences' blocks)
curl -sf "http://127.0.0.1:$conv/stats" | python3 -c '
import json, sys
k = json.load(sys.stdin)["kv_cache"]; q = k["quantized"]
assert k["bytes_per_token"] == 10240 and q["bytes_per_token"] == 1600, k
assert q["blocks_cached"] > 0 and q["blocks_free"] + q["blocks_cached"] == q["blocks_total"] > 0, q' && ok || bad "/stats kv_cache: $(curl -s "http://127.0.0.1:$conv/stats")"

out=$("$bin" bench --model "$demo" --threads 1 --prompt-len 48 --gen-len 8 --repeats 1 \
      --kv-bits 4 --quantized-kv-start 32)
grep -q "kv cache .* bytes/token (4-bit, group 64; F32, 10240 bytes/token, until the step that passes 32 tokens)" <<<"$out" &&
    ok || bad "bench: $out"
p=$("$bin" perplexity --model "$demo" --file "$root/tests/fixtures/demo/valid.txt" --context 128 \
    --max-windows 2 --threads 1 --kv-bits 4 --quantized-kv-start 64 | awk '/^perplexity/{print $2}')
python3 -c "import math; v=float('$p'); assert 1 < v < 1e4 and math.isfinite(v)" && ok || bad "perplexity: $p"

# --kv-residual over TurboQuant: answers; the long prompt re-sent reuses its
# cached blocks and the first one's last window, and answers as the first time
start_server "$tmp/resid.log" --model "$demo" --threads 1 --kv-quant turbo --kv-residual 32
u1=$(usage "$SERVER_PORT" "$longer" 12); u2=$(usage "$SERVER_PORT" "$longer" 12)
[ -n "$u1" ] && [ "${u2#* }" = "${u1#* }" ] && [ "${u2%% *}" -ge 32 ] && ok ||
    bad "--kv-residual 32, re-sent: '$u2', the first time '$u1'"
curl -sf "http://127.0.0.1:$SERVER_PORT/stats" | python3 -c '
import json, sys
k = json.load(sys.stdin)["kv_cache"]
assert k["bytes_per_token"] == 1280 and k["residual"]["tokens"] == 32 and k["residual"]["bytes"] > 0, k' &&
    ok || bad "/stats with --kv-residual: $(curl -s "http://127.0.0.1:$SERVER_PORT/stats")"
# ... and through the SSD tier across a restart: the kept windows are in RAM
# only, so the prefix resumes at its window's start and answers the same
start_server "$tmp/rs1.log" --model "$demo" --threads 1 --kv-quant turbo --kv-residual 32 \
    --ssd-cache "$tmp/ssd"
u1=$(usage "$SERVER_PORT" "$longer $longer" 12)
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
start_server "$tmp/rs2.log" --model "$demo" --threads 1 --kv-quant turbo --kv-residual 32 \
    --ssd-cache "$tmp/ssd"
u2=$(usage "$SERVER_PORT" "$longer $longer" 12)
[ -n "$u1" ] && [ "${u2#* }" = "${u1#* }" ] && [ "${u2%% *}" -gt 0 ] &&
    [ $(( ${u2%% *} % 32 )) -eq 0 ] && ok || bad "--kv-residual 32 after a restart: '$u2', before '$u1'"
# ... and over --kv-bits 4 from position 40: the re-sent prompt starts
# converted on the first one's blocks and window, and answers the same
start_server "$tmp/rstart.log" --model "$demo" --threads 1 --kv-bits 4 --quantized-kv-start 40 \
    --kv-residual 32
u1=$(usage "$SERVER_PORT" "$longer" 12); u2=$(usage "$SERVER_PORT" "$longer" 12)
[ -n "$u1" ] && [ "${u2#* }" = "${u1#* }" ] && [ "${u2%% *}" -ge 40 ] && ok ||
    bad "--kv-residual 32 from a start of 40, re-sent: '$u2', the first time '$u1'"
p=$("$bin" perplexity --model "$demo" --file "$root/tests/fixtures/demo/valid.txt" --context 128 \
    --max-windows 2 --threads 1 --kv-bits 4 --quantized-kv-start 64 --kv-residual 32 |
    awk '/^perplexity/{print $2}')
python3 -c "import math; v=float('$p'); assert 1 < v < 1e4 and math.isfinite(v)" && ok ||
    bad "perplexity with --kv-residual from a start of 64: $p"


# generate takes them too (mlx_lm.generate's flags): below the start (5000)
# the text is plain generate's; quantized from the first token it answers
g0=$("$bin" generate --model "$demo" --prompt "$long" --max-tokens 16 --threads 1 2>/dev/null)
g1=$("$bin" generate --model "$demo" --prompt "$long" --max-tokens 16 --threads 1 --kv-bits 4 \
     2>/dev/null)
g2=$("$bin" generate --model "$demo" --prompt "$long" --max-tokens 16 --threads 1 --kv-bits 4 \
     --kv-group-size 32 --quantized-kv-start 0 2>/dev/null)
[ -n "$g0" ] && [ "$g1" = "$g0" ] && [ -n "$g2" ] && ok ||
    bad "generate --kv-bits: '$g1' / '$g2', plain '$g0'"

expect_err() { local want=$1; shift
    if "$bin" "$@" >"$tmp/out" 2>"$tmp/err"; then bad "$* succeeded"; return; fi
    if [ "$(wc -l < "$tmp/err")" -ne 1 ] || ! grep -q "^hearth: .*$want" "$tmp/err"; then
        bad "$*: stderr was: $(cat "$tmp/err")"; return; fi
    ok; }
expect_err "quantized-kv-start -1" serve --model "$demo" --kv-bits 4 --quantized-kv-start -1
expect_err "kv-bits 5" serve --model "$demo" --kv-bits 5
expect_err "kv-bits 5" generate --model "$demo" --prompt hi --kv-bits 5
expect_err "kv-group-size 48" serve --model "$demo" --kv-bits 4 --kv-group-size 48
expect_err "quantized-kv-start -3" bench --model "$demo" --kv-bits 4 --quantized-kv-start -3
expect_err "quantized-kv-start -2" perplexity --model "$demo" --file "$root/tests/fixtures/demo/valid.txt" \
    --kv-bits 4 --quantized-kv-start -2

expect_err "kv-residual keeps a window of a quantized" bench --model "$demo" --kv-residual 64
expect_err "kv-residual 48: a multiple of 32" generate --model "$demo" --prompt hi \
    --kv-quant turbo --kv-residual 48
expect_err "kv-residual keeps a window of a quantized.*within the context" perplexity \
    --model "$demo" --file "$root/tests/fixtures/demo/valid.txt" --context 128 --kv-bits 4 \
    --kv-residual 64

echo "kvstart: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
