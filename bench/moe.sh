#!/usr/bin/env bash
# MoE decode/prefill, hearth vs llama.cpp on the same GGUF, side by side:
# each of REPEATS rounds runs hearth bench once and then llama.cpp's pp/tg
# once (alternating, so both see the same machine load), figures the
# medians of the rounds. Then hearth alone on the MLX 4-bit version of the
# same weights. The model: `hearth synth --shape SHAPE` written straight
# into a TYPE GGUF (`--gguf TYPE`) and an MLX 4-bit directory (`-q`), one
# tensor at a time: the same bytes as the bf16 model converted, with no bf16
# copy on disk (qwen3-30b-a3b: 61 GB in bf16, 17 GB at Q4_K, 17 GB MLX
# 4-bit; about 30 minutes of one core each). The roofline is that of the
# bytes a decoded token reads (hearth bench's bytes_per_token: attention,
# the router, the k routed experts (their mean size times k), shared
# experts, the head, one embedding row, and the KV cache at the mean
# context), printed beside the bandwidth it was held against. Peak memory of
# hearth and of llama.cpp at each round: /usr/bin/time. llama.cpp: llama-bench when
# bench/peers/llamacpp-build.sh has built it (this script does not start
# that build), else node-llama-cpp's prebuilt libllama through
# bench/peers/llamacpp_pp_tg.c (the same tests).
# Prints the machine load (uptime) beside the figures.
#   bench/moe.sh [build/hearth]
#   env: SHAPE (qwen3-moe-mini; qwen3-30b-a3b) TYPE (Q4_K) THREADS (2) PROMPT_LEN (128)
#        GEN_LEN (32) REPEATS (3) HEARTH_BENCH_DIR (/tmp/hearth-bench)
#        LLAMACPP_DIR (.deps/llama.cpp)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/hearth}
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}
shape=${SHAPE:-qwen3-moe-mini}; type=${TYPE:-Q4_K}
threads=${THREADS:-2}; P=${PROMPT_LEN:-128}; G=${GEN_LEN:-32}; R=${REPEATS:-3}
mkdir -p "$dir"
gguf=$dir/$shape-$type.gguf; mlx=$dir/$shape-mlx4
[ -f "$gguf" ] || "$bin" synth --shape "$shape" --out "$gguf" --gguf "$type" >/dev/null
[ -f "$mlx/config.json" ] || "$bin" synth --shape "$shape" --out "$mlx" -q --q-bits 4 >/dev/null
tm=$(mktemp); trap 'rm -f "$tm"' EXIT # /usr/bin/time's peak RSS (KiB)
lldir=${LLAMACPP_DIR:-$root/.deps/llama.cpp}
if [ -x "$lldir/build/bin/llama-bench" ]; then
    ll() { /usr/bin/time -f %M -o "$tm" "$lldir/build/bin/llama-bench" -m "$gguf" -t "$threads" -p "$P" -n "$G" -r 1 -o jsonl; }
    peer="llama-bench"
else
    out=$(bash "$root/bench/peers/llamacpp-prebuilt.sh")
    ll() { /usr/bin/time -f %M -o "$tm" "$(echo "$out" | sed -n 1p)" "$gguf" "$threads" "$P" "$G" 1 "$(echo "$out" | sed -n 2p)"; }
    peer="llama.cpp v0.4.0 prebuilt (llamacpp_pp_tg)"
fi
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
median() { python3 -c "import sys,statistics; print(statistics.median(map(float, sys.argv[1:])))" "$@"; }
hp=(); hd=(); hr=(); hb=(); hw=(); lp=(); ld=(); loads=(); hm=(); lm=()
for r in $(seq "$R"); do
    loads+=("$(cut -d' ' -f1 /proc/loadavg)")
    h=$(/usr/bin/time -f %M -o "$tm" "$bin" bench --model "$gguf" --threads "$threads" \
        --prompt-len "$P" --gen-len "$G" --repeats 1 --json)
    hm+=("$(( $(tail -1 "$tm") / 1024 ))")
    hp+=("$(echo "$h" | field prefill_tokens_per_s)"); hd+=("$(echo "$h" | field decode_tokens_per_s)")
    hr+=("$(echo "$h" | field decode_pct_of_roofline)"); hb+=("$(echo "$h" | field bytes_per_token)")
    hw+=("$(echo "$h" | field mem_bandwidth_gb_s)")
    j=$(ll)
    lm+=("$(( $(tail -1 "$tm") / 1024 ))")
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
HB=$(median "${hb[@]}"); HW=$(median "${hw[@]}")
LP=$(median "${lp[@]}"); LD=$(median "${ld[@]}")
m=$("$bin" bench --model "$mlx" --threads "$threads" --prompt-len "$P" --gen-len "$G" --repeats "$R" --json)
echo "model $shape $type, $threads threads, prompt $P, gen $G, $R rounds; load at each round: ${loads[*]}"
echo "peer: $peer"
printf "%-22s %12s %12s %10s\n" "" "prefill t/s" "decode t/s" "roofline"
printf "%-22s %12.2f %12.2f %9.0f%%\n" "hearth $type" "$HP" "$HD" "$HR"
printf "%-22s %12.2f %12.2f %10s\n" "llama.cpp $type" "$LP" "$LD" "-"
printf "%-22s %12.2f %12.2f\n" "hearth / llama.cpp" "$(python3 -c "print($HP/$LP)")" "$(python3 -c "print($HD/$LD)")"
printf "%-22s %12.2f %12.2f %9.0f%%\n" "hearth mlx 4-bit" "$(echo "$m" | field prefill_tokens_per_s)" \
    "$(echo "$m" | field decode_tokens_per_s)" "$(echo "$m" | field decode_pct_of_roofline)"
mb=$(echo "$m" | field bytes_per_token); mw=$(echo "$m" | field mem_bandwidth_gb_s)
python3 -c "
for n, b, w in (('hearth $type', $HB, $HW), ('hearth mlx 4-bit', $mb, $mw)):
    print(f'roofline {n}: {b/1e6:.1f} MB read per decoded token (attention, router, k routed '
          f'experts, shared, head, embedding row, KV) at {w:.1f} GB/s: {w*1e9/b:.2f} tokens/s')
"
echo "peak RSS MiB: hearth ${hm[*]}; llama.cpp ${lm[*]} (each round)"
echo "rounds: hearth prefill ${hp[*]} decode ${hd[*]} roofline% ${hr[*]}; llama.cpp prefill ${lp[*]} decode ${ld[*]}"
