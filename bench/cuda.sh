#!/usr/bin/env bash
# hearth vs llama.cpp's CUDA build on the GPU machine, side by side in one
# run: the same weights (hearth synth at real shapes; bf16 as safetensors for
# hearth and as a BF16 GGUF for llama.cpp, the GGUF types for both), prefill
# of PROMPT_LEN tokens from an empty cache, decode of GEN_LEN tokens after a
# PROMPT_LEN-token prompt (llama-bench -d), medians of REPEATS runs, and
# hearth's decode as % of the HBM roofline measured in the same run.
#   bench/cuda.sh HEARTH_BIN LLAMACPP_SRC.tar.xz   (docs/gpu.md)
#   env: PROMPT_LEN (512) GEN_LEN (128) REPEATS (3) SHAPES ("llama-3.2-1b
#        llama-3.1-8b") TYPES ("bf16 Q8_0 Q4_0";
#        mlx4/mlx8: MLX affine, hearth alone) DIR (/tmp/hearth-cuda-bench)
#        LLAMACPP_BIN (a finished build's bin/: skips the build)
set -euo pipefail
bin=${1:?usage: bench/cuda.sh HEARTH_BIN LLAMACPP_SRC.tar.xz}
tarball=${2:-}
dir=${DIR:-/tmp/hearth-cuda-bench}
P=${PROMPT_LEN:-512}; G=${GEN_LEN:-128}; R=${REPEATS:-3}
shapes=${SHAPES:-"llama-3.2-1b llama-3.1-8b"}
types=${TYPES:-"bf16 Q8_0 Q4_0"}
mkdir -p "$dir"
llbin=${LLAMACPP_BIN:-}
[ -n "$llbin" ] || llbin=$(bash "$(dirname "$0")/peers/llamacpp-cuda-build.sh" "$tarball" "$dir" llama-bench)
out=$(mktemp); trap 'rm -f "$out" "$out.err"' EXIT
for s in $shapes; do
    [ -f "$dir/$s/config.json" ] || "$bin" synth --shape "$s" --out "$dir/$s" --dtype bf16 >/dev/null
    for t in $types; do
        j1=; j2=
        if [ "${t#mlx}" != "$t" ]; then # MLX affine: hearth alone (llama.cpp reads GGUF only)
            hm=$dir/$s-$t
            [ -f "$hm/config.json" ] || "$bin" convert --model "$dir/$s" --out "$hm" -q --q-bits "${t#mlx}" >/dev/null
        else
            m=$dir/$s-$t.gguf
            [ -f "$m" ] || "$bin" convert --model "$dir/$s" --out "$m" --gguf "$(echo "$t" | tr a-z A-Z)" >/dev/null
            hm=$m; [ "$t" = bf16 ] && hm=$dir/$s
            j1=$("$llbin/llama-bench" -m "$m" -ngl 99 -p "$P" -n 0 -r "$R" -o jsonl 2>"$out.err") ||
                { echo "bench/cuda.sh: llama-bench failed on $m" >&2; tail -5 "$out.err" >&2; exit 1; }
            j2=$("$llbin/llama-bench" -m "$m" -ngl 99 -p 0 -n "$G" -d "$P" -r "$R" -o jsonl 2>"$out.err") ||
                { echo "bench/cuda.sh: llama-bench failed on $m" >&2; tail -5 "$out.err" >&2; exit 1; }
        fi
        h=$("$bin" bench --model "$hm" --device cuda --prompt-len "$P" --gen-len "$G" --repeats "$R" --json)
        python3 - "$s" "$t" "$h" "$j1" "$j2" >>"$out" <<'PY'
import json, statistics, sys
s, t, h = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
med = lambda j: statistics.median(json.loads(j.strip().splitlines()[-1])["samples_ts"]) if j else "-"
print(s, t, h["prefill_tokens_per_s"], med(sys.argv[4]), h["decode_tokens_per_s"], med(sys.argv[5]),
      h["decode_pct_of_roofline"], h["mem_bandwidth_gb_s"])
PY
        tail -1 "$out" >&2
    done
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 - "$out" "$P" "$G" "$R" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"hearth vs llama.cpp (CUDA): prefill {sys.argv[2]} tokens, decode {sys.argv[3]} tokens after "
      f"{sys.argv[2]}, medians of {sys.argv[4]} runs (tokens/s)")
print(f"{'model':14} {'weights':8} {'prefill':>9} {'llama.cpp':>9} {'ratio':>6}  {'decode':>8} "
      f"{'llama.cpp':>9} {'ratio':>6}  {'% roofline':>10} {'llama.cpp':>9} {'(GB/s)':>7}")
for s, t, hp, lp, hd, ld, hr, hb in rows:
    hp, hd, hr, hb = map(float, (hp, hd, hr, hb))
    if lp == "-":
        print(f"{s:14} {t:8} {hp:9.1f} {'-':>9} {'-':>6}  {hd:8.1f} {'-':>9} {'-':>6}  {hr:9.1f}% {'-':>9} {hb:7.0f}")
        continue
    lp, ld = float(lp), float(ld)
    print(f"{s:14} {t:8} {hp:9.1f} {lp:9.1f} {hp/lp:6.2f}  {hd:8.1f} {ld:9.1f} {hd/ld:6.2f}  "
          f"{hr:9.1f}% {hr*ld/hd:8.1f}% {hb:7.0f}")
PY
