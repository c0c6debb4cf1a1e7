#!/usr/bin/env bash
# hearth vs llama.cpp, side by side, in one run: the same GGUF files (made by
# `hearth convert --gguf TYPE` from `hearth synth` models at real shapes),
# the same thread count, prefill of PROMPT_LEN tokens and decode of GEN_LEN
# tokens, each the median of REPEATS runs (llama-bench's per-run samples).
# Also hearth on the MLX 4-bit version of the same weights (24-bit
# activations, f32-grade; and with HEARTH_QUANT_ACT=int8 int8 ones) and the
# MLX 8-bit version, and hearth's decode as % of the memory roofline
# measured in the same run (before and after each repeat's decode, the
# higher reading; the % is the median of the repeats' own, the GB/s column
# the median reading: on a shared machine it moves from second to second).
#   bench/llamacpp.sh [build/hearth]
#   env: THREADS (2) PROMPT_LEN (512) GEN_LEN (128) REPEATS (3)
#        SHAPES ("llama-3.2-1b qwen3-0.6b") TYPES ("Q8_0 Q4_0 Q4_K")
#        HEARTH_BENCH_DIR (/tmp/hearth-bench)  LLAMACPP_DIR (.deps/llama.cpp)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/hearth}
dir=${HEARTH_BENCH_DIR:-/tmp/hearth-bench}
threads=${THREADS:-2}; P=${PROMPT_LEN:-512}; G=${GEN_LEN:-128}; R=${REPEATS:-3}
shapes=${SHAPES:-"llama-3.2-1b qwen3-0.6b"}
types=${TYPES:-"Q8_0 Q4_0 Q4_K"}
llbin=$(bash "$root/bench/peers/llamacpp-build.sh" | tail -1)
mkdir -p "$dir"
out=$(mktemp); trap 'rm -f "$out" "$out.err"' EXIT

median() { python3 -c "import sys,statistics; print(statistics.median(map(float, sys.argv[1:])))" "$@"; }

for s in $shapes; do
    [ -f "$dir/$s/config.json" ] || "$bin" synth --shape "$s" --out "$dir/$s" --dtype bf16 >/dev/null
    for t in $types mlx4 mlx4-int8 mlx8; do
        act=${HEARTH_QUANT_ACT:-}
        [ "$t" = mlx4-int8 ] && act=int8
        if [ "${t#mlx}" != "$t" ]; then
            bits=${t#mlx}; bits=${bits%-int8}
            m=$dir/$s-mlx$bits
            [ -f "$m/config.json" ] || "$bin" convert --model "$dir/$s" --out "$m" -q --q-bits "$bits" >/dev/null
        else
            m=$dir/$s-$t.gguf
            [ -f "$m" ] || "$bin" convert --model "$dir/$s" --out "$m" --gguf "$t" >/dev/null
        fi
        h=$(HEARTH_QUANT_ACT=$act "$bin" bench --model "$m" --threads "$threads" --prompt-len "$P" --gen-len "$G" \
            --repeats "$R" --json)
        hp=$(echo "$h" | python3 -c "import json,sys; print(json.load(sys.stdin)['prefill_tokens_per_s'])")
        hd=$(echo "$h" | python3 -c "import json,sys; print(json.load(sys.stdin)['decode_tokens_per_s'])")
        hr=$(echo "$h" | python3 -c "import json,sys; print(json.load(sys.stdin)['decode_pct_of_roofline'])")
        hb=$(echo "$h" | python3 -c "import json,sys; print(json.load(sys.stdin)['mem_bandwidth_gb_s'])")
        lp=-; ld=-
        if [ "${t#mlx}" = "$t" ]; then
            j=$("$llbin/llama-bench" -m "$m" -t "$threads" -p "$P" -n "$G" -r "$R" -o jsonl 2>"$out.err") ||
                { rc=$?; echo "bench/llamacpp.sh: llama-bench failed on $m (exit $rc)" >&2
                  tail -5 "$out.err" >&2; exit 1; }
            lp=$(echo "$j" | python3 -c "
import json,sys,statistics
for l in sys.stdin:
    o=json.loads(l)
    if o['n_prompt']>0: print(statistics.median(o['samples_ts']))")
            ld=$(echo "$j" | python3 -c "
import json,sys,statistics
for l in sys.stdin:
    o=json.loads(l)
    if o['n_gen']>0: print(statistics.median(o['samples_ts']))")
        fi
        echo "$s $t $hp $lp $hd $ld $hr $hb" >>"$out"
    done
done

python3 - "$out" "$threads" "$P" "$G" "$R" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"hearth vs llama.cpp: {sys.argv[2]} threads, prefill {sys.argv[3]} tokens, "
      f"decode {sys.argv[4]} tokens, medians of {sys.argv[5]} runs (tokens/s)")
print(f"{'model':14} {'weights':14} {'prefill':>9} {'llama.cpp':>9} {'ratio':>6}  "
      f"{'decode':>8} {'llama.cpp':>9} {'ratio':>6}  {'% roofline':>10} {'(GB/s)':>7}")
for s, t, hp, lp, hd, ld, hr, hb in rows:
    r1 = f"{float(hp)/float(lp):6.2f}" if lp != "-" else "     -"
    r2 = f"{float(hd)/float(ld):6.2f}" if ld != "-" else "     -"
    lpf = f"{float(lp):9.1f}" if lp != "-" else "        -"
    ldf = f"{float(ld):9.2f}" if ld != "-" else "        -"
    name = {"mlx4": "MLX 4-bit", "mlx4-int8": "MLX 4-bit int8", "mlx8": "MLX 8-bit"}.get(t, t)
    print(f"{s:14} {name:14} {float(hp):9.1f} {lpf} {r1}  {float(hd):8.2f} {ldf} {r2}  "
          f"{float(hr):9.1f}% {float(hb):7.1f}")
PY
