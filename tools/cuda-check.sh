#!/usr/bin/env bash
# Every GPU test and benchmark, in one call on the GPU machine (one H200):
# run from the repository root after tools/cuda-bundle.sh packed .device/
# here (docs/gpu.md). Prints each test's own lines and a closing summary;
# exits non-zero when a test fails. With --bench, then the decode/prefill
# benchmark on random weights at real shapes (hearth synth), bf16 and the
# GGUF types, each printed with the HBM roofline measured in the same run,
# then a mixture-of-experts shape (BENCH_MOE_SHAPES). ONLY=REGEX runs the
# checks whose command line matches (e.g. ONLY='same_text|served').
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dev=$root/.device
export LD_LIBRARY_PATH=$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export HEARTH_ROOT=$root HEARTH_BIN=$dev/hearth
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
pass=0 fail=0
run() {
    # ONLY (an extended regex): the checks whose command line matches it
    if [ -n "${ONLY:-}" ] && ! grep -qE -- "$ONLY" <<<"$*"; then return 0; fi
    echo "== $*"
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: $*"; fi
}
run "$dev/test_parity" --device cuda
run "$dev/test_engine" --device cuda
run "$dev/test_quant_parity" --device cuda
# the GGUF block products with x in three bf16 parts (f32-grade, as
# HEARTH_QUANT_ACT=f32 asks; the default takes x as one bf16 part)
run env HEARTH_QUANT_ACT=f32 "$dev/test_quant_parity" --device cuda
run "$dev/test_spec" --device cuda
# the attention op against the CPU's: sinks, bidirectional, image spans, M-RoPE
run "$dev/test_backend_attn" --device cuda
# embeddings (BERT's bidirectional attention, hidden-state rows) and images
# (Gemma-3's bidirectional spans, Qwen2.5-VL's M-RoPE) against their oracles
run "$dev/test_embed_parity" --device cuda
run "$dev/test_engine_vision" --device cuda
# the KV cache's formats (q8_0, q4_0, K/V apart, affine): the records the
# qkv op stores equal the CPU quantizer's bytes; attention over them
run "$dev/test_backend_kv" --device cuda
# the public API on the device "auto" picks (the GPU here): sessions,
# requests, prompt scoring, the quantized KV refused or served
run "$dev/test_api"
# the verbs through the engine on the GPU: the same greedy text as the CPU,
# perplexity within float noise of the CPU's, a served completion
demo=$root/models/hearth-demo
same_text() {
    local a b
    a=$("$dev/hearth" generate --model "$demo" --device cuda --prompt "The lighthouse" --max-tokens 24 --temp 0 2>/dev/null)
    b=$("$dev/hearth" generate --model "$demo" --device cpu --prompt "The lighthouse" --max-tokens 24 --temp 0 2>/dev/null)
    echo "cuda: $a"; echo "cpu:  $b"; [ -n "$a" ] && [ "$a" = "$b" ]
}
run same_text
close_ppl() {
    local a b
    a=$("$dev/hearth" perplexity --model "$demo" --device cuda --file "$root/tests/fixtures/demo/valid.txt" --context 256 --max-windows 8 | awk '/^perplexity/{print $2}')
    b=$("$dev/hearth" perplexity --model "$demo" --device cpu --file "$root/tests/fixtures/demo/valid.txt" --context 256 --max-windows 8 | awk '/^perplexity/{print $2}')
    echo "perplexity cuda $a cpu $b"
    python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(a-b)>1e-3*b)" "$a" "$b"
}
run close_ppl
# the quantized KV cache on the GPU: perplexity within 0.5% of the CPU's under
# the same cache type (the rows differ by float noise before they are
# quantized), a window's cache converted at 100 tokens too
close_ppl_kv() {
    local a b rc=0 kv
    for kv in "--cache-type-k q8_0 --cache-type-v q8_0" "--cache-type-k q4_0 --cache-type-v f16" \
              "--kv-bits 8 --quantized-kv-start 0" "--kv-bits 4 --kv-group-size 32 --quantized-kv-start 0" \
              "--kv-bits 4 --quantized-kv-start 100" "--kv-quant turbo" "--kv-quant turbo:4,2"; do
        # shellcheck disable=SC2086
        a=$("$dev/hearth" perplexity --model "$demo" --device cuda $kv --file "$root/tests/fixtures/demo/valid.txt" --context 256 --max-windows 8 | awk '/^perplexity/{print $2}')
        # shellcheck disable=SC2086
        b=$("$dev/hearth" perplexity --model "$demo" --device cpu $kv --file "$root/tests/fixtures/demo/valid.txt" --context 256 --max-windows 8 | awk '/^perplexity/{print $2}')
        echo "perplexity $kv: cuda $a cpu $b"
        python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(a-b)>5e-3*b)" "$a" "$b" || rc=1
    done
    return $rc
}
run close_ppl_kv
# one greedy completion of "The lighthouse" (16 tokens) from the server on
# PORT once /health answers: prints the HTTP status, then the body
complete() {
    python3 - "$1" <<'PY'
import json, sys, time, urllib.error, urllib.request
u = "http://127.0.0.1:%s" % sys.argv[1]
for _ in range(300):
    try:
        urllib.request.urlopen(u + "/health", timeout=1); break
    except Exception:
        time.sleep(0.1)
req = urllib.request.Request(u + "/v1/completions", data=json.dumps(
    {"prompt": "The lighthouse", "max_tokens": 16, "temperature": 0}).encode(),
    headers={"Content-Type": "application/json"})
try:
    o = urllib.request.urlopen(req, timeout=60); body, code = o.read().decode(), o.status
except urllib.error.HTTPError as e:
    body, code = e.read().decode(), e.code
print(code); print(body)
PY
}
served() {
    local port=18431 pid rc out
    "$dev/hearth" serve --model "$demo" --device cuda --port $port 2>"${TMPDIR:-/tmp}/serve.err" & pid=$!
    out=$(complete $port)
    python3 -c '
import json, sys
code, body = sys.argv[1].split("\n", 1)
o = json.loads(body)
print("served:", repr(o["choices"][0]["text"]), o["usage"])
assert code == "200" and o["usage"]["completion_tokens"] == 16' "$out"
    rc=$?; kill $pid; wait $pid 2>/dev/null; tail -3 "${TMPDIR:-/tmp}/serve.err"; return $rc
}
run served
# a kernel that faults (HEARTH_FAULT=device:3, the third forward step):
# the request fails naming the lost context, and the server exits 1 by itself
lost_context() {
    local port=18432 pid rc out err=${TMPDIR:-/tmp}/lost.err
    HEARTH_FAULT=device:3 "$dev/hearth" serve --model "$demo" --device cuda --port $port 2>"$err" & pid=$!
    out=$(complete $port)
    echo "lost context: HTTP ${out:0:200}"
    [ "$(head -1 <<<"$out")" -ge 500 ] && grep -q lost <<<"$out"; rc=$?
    for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    kill $pid 2>/dev/null; wait $pid; local code=$?
    tail -2 "$err"; echo "serve exited $code"
    [ $rc -eq 0 ] && [ $code -eq 1 ] && grep -q "lost" "$err"
}
run lost_context
echo "cuda-check: $pass passed, $fail failed"
if [ "${1:-}" = "--bench" ]; then
    tmp=${TMPDIR:-/tmp}/hearth-cuda-bench
    mkdir -p "$tmp"
    # the products alone: decode (GB/s beside the copy's) and prefill
    # (TFLOP/s, k_mma's tiles against k_mma_tiled), each checking the bits
    run "$dev/bench_cuda_mv"
    run "$dev/bench_cuda_mv" prefill 512 2048
    # prefill attention: a block per (token, head) against the tiled kernel
    run "$dev/bench_cuda_attn"
    for shape in ${BENCH_SHAPES:-llama-3.2-1b llama-3.1-8b}; do
        [ -d "$tmp/$shape" ] || "$dev/hearth" synth --shape "$shape" --out "$tmp/$shape" >/dev/null
        echo "== bench $shape bf16"
        "$dev/hearth" bench --model "$tmp/$shape" --device cuda --prompt-len 512 --gen-len 128 --repeats 3
        for q in ${BENCH_GGUF:-Q8_0 Q4_0}; do
            f=$tmp/$shape-$q.gguf
            [ -f "$f" ] || "$dev/hearth" convert --model "$tmp/$shape" --out "$f" --gguf "$q" >/dev/null
            echo "== bench $shape $q"
            "$dev/hearth" bench --model "$f" --device cuda --prompt-len 512 --gen-len 128 --repeats 3
        done
    done
    # experts (moe.cuh): Qwen3-30B-A3B's widths and k (8 of 32 experts), 8 layers
    # (BENCH_MOE_SHAPES="" skips it)
    for shape in ${BENCH_MOE_SHAPES-qwen3-moe-mini}; do
        [ -d "$tmp/$shape" ] || "$dev/hearth" synth --shape "$shape" --out "$tmp/$shape" >/dev/null
        echo "== bench $shape bf16"
        "$dev/hearth" bench --model "$tmp/$shape" --device cuda --prompt-len 512 --gen-len 128 --repeats 3
    done
fi
[ "$fail" -eq 0 ]
