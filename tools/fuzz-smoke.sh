#!/usr/bin/env bash
# Runs every libFuzzer target for a short while over its seed corpus
# (tests/fuzz/corpus/<target>/ when present). Any crash fails the run.
set -euo pipefail
build=$1
secs=${FUZZ_SECONDS:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
n=0
for bin in "$build"/fuzz_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    corpus=$(mktemp -d)
    [ -d "$root/tests/fuzz/corpus/$name" ] && cp -r "$root/tests/fuzz/corpus/$name/." "$corpus/"
    echo "fuzz: $name for ${secs}s"
    "$bin" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 "$corpus" >"$corpus.log" 2>&1 || {
        tail -40 "$corpus.log"; echo "fuzz: $name FAILED"; exit 1; }
    rm -rf "$corpus" "$corpus.log"
    n=$((n+1))
done
echo "fuzz: $n targets clean"
