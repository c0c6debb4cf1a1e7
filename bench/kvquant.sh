#!/usr/bin/env bash
# KV cache formats side by side (docs/kv-quant.md's speed table): `hearth
# bench` prefill of a PROMPT_LEN-token prompt and decode of GEN_LEN tokens
# after it, medians of REPEATS, for each KV format of KVS, each run of a
# format right after the others' (one round after another, so that a shared
# machine's slow seconds fall on every format alike), and each format's
# ratio to the first. The model is the demo model with its positions raised
# to the context (a copy whose config says max_position_embeddings =
# PROMPT_LEN + GEN_LEN, the weights linked): speed, not quality.
#   bench/kvquant.sh [build/hearth]
#   env: THREADS (2) PROMPT_LEN (4096) GEN_LEN (32) REPEATS (3)
#        KVS ("f32 f16 8 4") (f32/f16/bf16: --kv-dtype; B: --kv-bits B;
#        B@N: --kv-bits B --quantized-kv-start N (f32 until N tokens);
#        turbo, turbo:B, turbo:K,V: --kv-quant)
#        MODEL (models/hearth-demo)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/hearth}
threads=${THREADS:-2}; P=${PROMPT_LEN:-4096}; G=${GEN_LEN:-32}; R=${REPEATS:-3}
kvs=${KVS:-"f32 f16 8 4"}
src=${MODEL:-$root/models/hearth-demo}
model=$(mktemp -d); trap 'rm -rf "$model"' EXIT
for f in "$src"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$model/"; done
rm "$model/config.json"
python3 - "$src/config.json" "$model/config.json" $((P + G)) <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = max(int(sys.argv[3]), c["max_position_embeddings"])
json.dump(c, open(sys.argv[2], "w"))
PY

declare -A pre dec bpt
for r in $(seq "$R"); do
    for kv in $kvs; do
        case $kv in
        f32 | f16 | bf16) flags=(--kv-dtype "$kv") ;;
        turbo*) flags=(--kv-quant "$kv") ;;
        *@*) flags=(--kv-bits "${kv%@*}" --quantized-kv-start "${kv#*@}") ;;
        *) flags=(--kv-bits "$kv" --quantized-kv-start 0) ;;
        esac
        j=$("$bin" bench --model "$model" --prompt-len "$P" --gen-len "$G" --repeats 1 \
            --threads "$threads" --json "${flags[@]}")
        read -r p d b < <(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["prefill_tokens_per_s"], j["decode_tokens_per_s"], j["kv_bytes_per_token"])' "$j")
        pre[$kv]="${pre[$kv]:-} $p"; dec[$kv]="${dec[$kv]:-} $d"; bpt[$kv]=$b
    done
done
median() { python3 -c "import sys,statistics; print(round(statistics.median(map(float, sys.argv[1:])), 1))" "$@"; }
echo "| KV cache | prefill tok/s | vs first | decode tok/s | vs first | KV bytes/token |"
echo "|---|---|---|---|---|---|"
first=""
for kv in $kvs; do
    mp=$(median ${pre[$kv]}); md=$(median ${dec[$kv]})
    [ -n "$first" ] || { fp=$mp; fd=$md; first=$kv; }
    printf '| %s | %s | %.2f | %s | %.2f | %s |\n' "$kv" "$mp" "$(python3 -c "print($mp/$fp)")" \
        "$md" "$(python3 -c "print($md/$fd)")" "${bpt[$kv]}"
done
echo "($P-token prompt, $G decoded tokens, $threads threads, medians of $R, isa $(python3 -c "import json,sys; print(json.loads(sys.argv[1])[\"isa\"])" "$j"))"
