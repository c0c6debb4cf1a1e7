#!/usr/bin/env bash
# Long contexts, hearth's KV formats vs llama.cpp's cache types on ONE GGUF
# file (issue 39's speed acceptance; docs/kv-quant.md's table at 16k):
# prefill of a PROMPT_LEN-token prompt and decode of GEN_LEN tokens after
# it (a PROMPT_LEN-token context), for hearth f16 / q8_0 / 4-bit affine /
# TurboQuant 3.5 (`hearth bench`, one repeat a run) and llama.cpp f16 / q8_0
# caches (bench/peers/llamacpp_pp_tg.c over node-llama-cpp's prebuilt
# libllama: llama-bench's pp test at depth 0 and its tg test at depth
# PROMPT_LEN, `-d 16384`'s context, taken from the pp run's cache instead of
# a second prefill; flash attention auto as llama-bench's default). Every
# round runs each row once, one after another (a shared machine's slow
# seconds fall on every row alike), the figures are the medians of REPEATS
# rounds, each row's ratio to llama.cpp's f16 row and TurboQuant 3.5's
# decode over hearth f16's, with the load (1-minute average) at each run.
# Memory: KV bytes per token and the 16384-token sequences whose KV fits
# BUDGET GB (`hearth bench --kv-budget`'s figure;
# llama.cpp's rows: the same bytes as hearth's row of that format).
# The model: the demo model (10 layers, 6 heads over 2 KV heads of 64, 19M
# parameters) with its positions raised to PROMPT_LEN + GEN_LEN, written as
# an F16 GGUF by `hearth convert --gguf F16`: small enough that a 16k
# prefill is a minute or two on 2 cores, so the attention over the 16k
# context is most of the work (the long-context part under test), and a
# model hearth and llama.cpp both read as the same llama GGUF.
#   bench/long.sh [build/hearth]
#   env: THREADS (2) PROMPT_LEN (16384) GEN_LEN (32) REPEATS (3) BUDGET (8)
#        HEARTH_ROWS ("f16 q8_0 a4 turbo3.5"; turbo3.5r128: with --kv-residual 128)
#        LLAMA_ROWS ("f16 q8_0"; "" for none)
#        MODEL (models/hearth-demo) HEARTH_BENCH_DIR (/tmp/hearth-bench)
#        LLAMACPP_DIR (.deps/llama.cpp)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/hearth}
threads=${THREADS:-2}; P=${PROMPT_LEN:-16384}; G=${GEN_LEN:-32}; R=${REPEATS:-3}
budget=${BUDGET:-8}
hrows=${HEARTH_ROWS-"f16 q8_0 a4 turbo3.5"}; lrows=${LLAMA_ROWS-"f16 q8_0"}
src=${MODEL:-$root/models/hearth-demo}
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}
ctx=$((P + G))
gguf=$dir/$(basename "$src")-ctx$ctx-F16.gguf
mkdir -p "$dir"
if [ ! -f "$gguf" ]; then
    m=$(mktemp -d)
    for f in "$src"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$m/"; done
    rm "$m/config.json"
    python3 - "$src/config.json" "$m/config.json" "$ctx" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = max(int(sys.argv[3]), c["max_position_embeddings"])
json.dump(c, open(sys.argv[2], "w"))
PY
    "$bin" convert --model "$m" --out "$gguf" --gguf F16 >/dev/null
    rm -rf "$m"
fi
out=$(bash "$root/bench/peers/llamacpp-prebuilt.sh")
ll=$(echo "$out" | sed -n 1p); llback=$(echo "$out" | sed -n 2p)
res=$(mktemp); trap 'rm -f "$res" "$res.err"' EXIT

hflags() {
    case $1 in
    f16 | bf16 | f32) echo --kv-dtype "$1" ;;
    q8_0 | q4_0) echo --cache-type-k "$1" --cache-type-v "$1" ;;
    a*) echo --kv-bits "${1#a}" --quantized-kv-start 0 ;;
    turbo*r*) k=${1#turbo}; echo --kv-quant "turbo:${k%r*}" --kv-residual "${k#*r}" ;;
    turbo*) echo --kv-quant "turbo:${1#turbo}" ;;
    esac
}
load() { cut -d' ' -f1 /proc/loadavg; }
for r in $(seq "$R"); do
    for k in $hrows; do
        l=$(load)
        # shellcheck disable=SC2046
        j=$("$bin" bench --model "$gguf" --prompt-len "$P" --gen-len "$G" --repeats 1 \
            --threads "$threads" --kv-budget "$budget" --json $(hflags "$k"))
        echo "$j" | python3 -c "
import json, sys
j = json.load(sys.stdin)
print('hearth', '$k', j['prefill_tokens_per_s'], j['decode_tokens_per_s'], j['kv_bytes_per_token'],
      j['seqs_16k_in_kv_budget'], '$l')" >>"$res"
    done
    for k in $lrows; do
        l=$(load)
        j=$("$ll" -dg "$P" -ctk "$k" -ctv "$k" "$gguf" "$threads" "$P" "$G" 1 "$llback" 2>"$res.err") ||
            { echo "bench/long.sh: llamacpp_pp_tg failed ($k)" >&2; tail -5 "$res.err" >&2; exit 1; }
        echo "$j" | python3 -c "
import json, sys
pp = tg = None
for line in sys.stdin:
    if line.startswith('{'):
        o = json.loads(line)
        if o['n_prompt'] > 0: pp = o['samples_ts'][0]
        else: tg = o['samples_ts'][0]
print('llama.cpp', '$k', pp, tg, '-', '-', '$l')" >>"$res"
    done
done

python3 - "$res" "$threads" "$P" "$G" "$R" "$budget" <<'PY'
import statistics, sys
rows, order = {}, []
for line in open(sys.argv[1]):
    who, k, pp, tg, bpt, seqs, load = line.split()
    key = (who, k)
    if key not in rows:
        rows[key] = {"pp": [], "tg": [], "load": [], "bpt": bpt, "seqs": seqs}
        order.append(key)
    rows[key]["pp"].append(float(pp)); rows[key]["tg"].append(float(tg))
    rows[key]["load"].append(load)
budget = float(sys.argv[6])
for (who, k), r in rows.items():  # llama.cpp's formats: hearth's bytes of the same format
    if who == "llama.cpp" and ("hearth", k) in rows:
        r["bpt"], r["seqs"] = rows[("hearth", k)]["bpt"], rows[("hearth", k)]["seqs"]
med = {key: (statistics.median(r["pp"]), statistics.median(r["tg"])) for key, r in rows.items()}
base = med.get(("llama.cpp", "f16"))
names = {"f16": "f16", "q8_0": "q8_0", "a4": "4-bit affine (group 64)", "a8": "8-bit affine",
         "turbo3.5": "TurboQuant 3.5", "turbo4": "TurboQuant 4", "turbo3": "TurboQuant 3",
         "turbo2.5": "TurboQuant 2.5", "turbo3.5r128": "TurboQuant 3.5, --kv-residual 128"}
print(f"{sys.argv[3]}-token prompt: prefill tokens/s; decode of {sys.argv[4]} tokens after it, tokens/s; "
      f"{sys.argv[2]} threads, medians of {sys.argv[5]} rounds")
print(f"| engine | KV cache | prefill | vs llama.cpp f16 | decode | vs llama.cpp f16 | "
      f"KV bytes/token | 16k seqs in {budget:g} GB | load (each round) |")
print("|---|---|---|---|---|---|---|---|---|")
for key in order:
    who, k = key
    pp, tg = med[key]
    r = rows[key]
    rp = f"{pp / base[0]:.2f}" if base else "-"
    rt = f"{tg / base[1]:.2f}" if base else "-"
    bpt = r["bpt"] if r["bpt"] == "-" else f"{float(r['bpt']):.0f}"
    print(f"| {who} | {names.get(k, k)} | {pp:.1f} | {rp} | {tg:.2f} | {rt} | {bpt} | {r['seqs']} | "
          f"{' '.join(r['load'])} |")
if ("hearth", "turbo3.5") in med and ("hearth", "f16") in med:
    print(f"TurboQuant 3.5 decode / hearth f16 decode: "
          f"{med[('hearth', 'turbo3.5')][1] / med[('hearth', 'f16')][1]:.2f}")
print("rounds (prefill / decode):")
for key in order:
    r = rows[key]
    print(f"  {key[0]} {key[1]}: " + ", ".join(f"{p:.1f} / {t:.2f}" for p, t in zip(r["pp"], r["tg"])))
PY
