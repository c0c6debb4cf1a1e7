#!/usr/bin/env bash
# Speculative decoding, side by side with plain decoding in one run
# (`hearth bench --draft-model / --spec`: each repeat runs plain then
# speculative, output checked identical; figures are medians):
#   1. the demo model with its draft (models/hearth-demo-draft), greedy, on
#      held-out chat prompts (bench/spec/chats.txt), one client: decode tokens/s
#   2. prompt lookup (--spec ngram) on input-grounded rewrites of a given
#      ~500-token text: a C file (bench/spec/rewrite.txt) and a held-out KJV
#      chapter (bench/spec/rewrite-kjv.txt)
#   3. 4 concurrent clients with the draft model: aggregate tokens/s
#   bench/spec.sh build/hearth
#   env: THREADS (2) REPEATS (3) MAX_TOKENS (128) K (3: --num-draft-tokens)
#        NGRAM_K (8)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:?usage: bench/spec.sh build/hearth}
threads=${THREADS:-2}; reps=${REPEATS:-3}; n=${MAX_TOKENS:-128}; k=${K:-3}; nk=${NGRAM_K:-8}
demo=$root/models/hearth-demo; draft=$root/models/hearth-demo-draft
common=(--model "$demo" --threads "$threads" --repeats "$reps")

echo "== 1. draft model, greedy, held-out chat prompts, 1 client"
"$bin" bench "${common[@]}" --draft-model "$draft" --num-draft-tokens "$k" \
    --chat-file "$root/bench/spec/chats.txt" --max-tokens "$n"
echo "== 2a. prompt lookup: rewrite a C file (~500 tokens) with one change"
"$bin" bench "${common[@]}" --spec ngram --num-draft-tokens "$nk" \
    --prompt-file "$root/bench/spec/rewrite.txt" --max-tokens 256 --ignore-eos
echo "== 2b. prompt lookup: rewrite a KJV chapter (~360 tokens) with one change"
"$bin" bench "${common[@]}" --spec ngram --num-draft-tokens "$nk" \
    --prompt-file "$root/bench/spec/rewrite-kjv.txt" --max-tokens 256 --ignore-eos
echo "== 3. draft model, 4 concurrent clients"
"$bin" bench "${common[@]}" --draft-model "$draft" --num-draft-tokens "$k" \
    --chat-file "$root/bench/spec/chats.txt" --max-tokens "$n" --clients 4
