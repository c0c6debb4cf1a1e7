#!/usr/bin/env bash
# Runs every libFuzzer target for a short while over its seed corpus
# (tests/fuzz/corpus/<target>/ when present), one target per core at a
# time (libFuzzer runs one thread: each target still gets its seconds of
# a core). Any crash fails the run.
#   tools/fuzz-smoke.sh BUILD_DIR   env: FUZZ_SECONDS (20), FUZZ_JOBS (nproc)
set -euo pipefail
build=$1
secs=${FUZZ_SECONDS:-20}
jobs=${FUZZ_JOBS:-$(nproc)}
root=$(cd "$(dirname "$0")/.." && pwd)

# one target: its log's tail and exit 1 on a crash
one() {
    local bin=$1 name corpus
    name=$(basename "$bin")
    corpus=$(mktemp -d)
    [ -d "$root/tests/fuzz/corpus/$name" ] && cp -r "$root/tests/fuzz/corpus/$name/." "$corpus/"
    echo "fuzz: $name for ${secs}s"
    if ! "$bin" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 "$corpus" >"$corpus.log" 2>&1; then
        tail -40 "$corpus.log"
        echo "fuzz: $name FAILED"
        return 1
    fi
    rm -rf "$corpus" "$corpus.log"
}
export -f one
export root secs

bins=()
for bin in "$build"/fuzz_*; do
    [ -x "$bin" ] && bins+=("$bin")
done
[ ${#bins[@]} -gt 0 ] || { echo "fuzz: no targets under $build"; exit 1; }
printf '%s\n' "${bins[@]}" | xargs -P "$jobs" -I{} bash -c 'one "$1"' _ {} || exit 1
echo "fuzz: ${#bins[@]} targets clean"
