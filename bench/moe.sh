#!/usr/bin/env bash
# MoE decode/prefill, hearth vs llama.cpp on the same GGUF, side by side:
# each of REPEATS rounds runs hearth bench once and then llama.cpp's pp/tg
# once (alternating, so both see the same machine load), figures the
# medians of the rounds. Then hearth alone on the MLX 4-bit version of the
# same weights. The model: `hearth synth --shape SHAPE` (bf16), written as
# a TYPE GGUF and an MLX 4-bit directory. llama.cpp: llama-bench when
# bench/peers/llamacpp-build.sh has built it (this script does not start
# that build), else node-llama-cpp's prebuilt libllama through
# bench/peers/llamacpp_pp_tg.c (the same tests).
# Prints the machine load (uptime) beside the figures.
#   bench/moe.sh [build/hearth]
#   env: SHAPE (qwen3-moe-mini) TYPE (Q4_K) THREADS (2) PROMPT_LEN (128)
#        GEN_LEN (32) REPEATS (3) HEARTH_BENCH_DIR (/tmp/hearth-bench)
#        LLAMACPP_DIR (.deps/llama.cpp)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/hearth}
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}
shape=${SHAPE:-qwen3-moe-mini}; type=${TYPE:-Q4_K}
threads=${THREADS:-2}; P=${PROMPT_LEN:-128}; G=${GEN_LEN:-32}; R=${REPEATS:-3}
mkdir -p "$dir"
src=$dir/$shape; gguf=$dir/$shape-$type.gguf; mlx=$dir/$shape-mlx4
[ -f "$src/config.json" ] || "$bin" synth --shape "$shape" --out "$src" --dtype bf16 >/dev/null
[ -f "$gguf" ] || "$bin" convert --model "$src" --out "$gguf" --gguf "$type" >/dev/null 2>&1
[ -f "$mlx/config.json" ] || "$bin" convert --model "$src" --out "$mlx" -q --q-bits 4 >/dev/null 2>&1
lldir=${LLAMACPP_DIR:-$root/.deps/llama.cpp}
if [ -x "$lldir/build/bin/llama-bench" ]; then
    ll() { "$lldir/build/bin/llama-bench" -m "$gguf" -t "$threads" -p "$P" -n "$G" -r 1 -o jsonl; }
    peer="llama-bench"
else
    out=$(bash "$root/bench/peers/llamacpp-prebuilt.sh")
    ll() { "$(echo "$out" | sed -n 1p)" "$gguf" "$threads" "$P" "$G" 1 "$(echo "$out" | sed -n 2p)"; }
    peer="llama.cpp v0.4.0 prebuilt (llamacpp_pp_tg)"
fi
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
median() { python3 -c "import sys,statistics; print(statistics.median(map(float, sys.argv[1:])))" "$@"; }
hp=(); hd=(); hr=(); lp=(); ld=(); loads=()
for r in $(seq "$R"); do
    loads+=("$(cut -d' ' -f1 /proc/loadavg)")
    h=$("$bin" bench --model "$gguf" --threads "$threads" --prompt-len "$P" --gen-len "$G" --repeats 1 --json)
    hp+=("$(echo "$h" | field prefill_tokens_per_s)"); hd+=("$(echo "$h" | field decode_tokens_per_s)")
    hr+=("$(echo "$h" | field decode_pct_of_roofline)")
    j=$(ll)
    lp+=("$(echo "$j" | python3 -c "
import json,sys
for l in sys.stdin:
    l=l.strip()
    if l.startswith('{'):
        o=json.loads(l)
        if o['n_prompt']>0: print(o['samples_ts'][0])")")
    ld+=("$(echo "$j" | python3 -c "
import json,sys
for l in sys.stdin:
    l=l.strip()
    if l.startswith('{'):
        o=json.loads(l)
        if o['n_gen']>0: print(o['samples_ts'][0])")")
done
HP=$(median "${hp[@]}"); HD=$(median "${hd[@]}"); HR=$(median "${hr[@]}")
LP=$(median "${lp[@]}"); LD=$(median "${ld[@]}")
m=$("$bin" bench --model "$mlx" --threads "$threads" --prompt-len "$P" --gen-len "$G" --repeats "$R" --json)
echo "model $shape $type, $threads threads, prompt $P, gen $G, $R rounds; load at each round: ${loads[*]}"
echo "peer: $peer"
printf "%-22s %12s %12s %10s\n" "" "prefill t/s" "decode t/s" "roofline"
printf "%-22s %12.2f %12.2f %9s%%\n" "hearth $type" "$HP" "$HD" "$HR"
printf "%-22s %12.2f %12.2f %10s\n" "llama.cpp $type" "$LP" "$LD" "-"
printf "%-22s %12.2f %12.2f\n" "hearth / llama.cpp" "$(python3 -c "print($HP/$LP)")" "$(python3 -c "print($HD/$LD)")"
printf "%-22s %12.2f %12.2f %9s%%\n" "hearth mlx 4-bit" "$(echo "$m" | field prefill_tokens_per_s)" \
    "$(echo "$m" | field decode_tokens_per_s)" "$(echo "$m" | field decode_pct_of_roofline)"
echo "rounds: hearth prefill ${hp[*]} decode ${hd[*]} roofline% ${hr[*]}; llama.cpp prefill ${lp[*]} decode ${ld[*]}"
