#!/usr/bin/env bash
# A long fuzzing run (not CI: `make fuzz` runs tools/fuzz-smoke.sh): every
# libFuzzer target in BUILD (make fuzz's build-fuzz) for SECONDS of wall
# time each, JOBS at a time, at nice 19, from a copy of its committed seed
# corpus (tests/fuzz/corpus/<target>/). The CPU each one really got
# (user + sys, from /usr/bin/time) goes to OUT/cpu.tsv; crashes, leaks and
# timeouts leave their input as OUT/<target>/crash-* (timeout-*, leak-*, oom-*).
# libFuzzer's -timeout is wall time: at nice 19 on a loaded machine an input
# can wait minutes for the CPU, so it is 900 s; slow inputs (over 20 s)
# are kept as slow-unit-* to measure their CPU time one by one.
#   tools/fuzz-long.sh BUILD SECONDS OUT [JOBS] [TARGET...]
set -uo pipefail
build=${1:?usage: fuzz-long.sh BUILD SECONDS OUT [JOBS] [TARGET...]}
secs=${2:?}; out=${3:?}; jobs=${4:-2}
shift 4 2>/dev/null || shift $#
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for bin in "$build"/fuzz_*; do
        [ -x "$bin" ] && [ -f "$bin" ] && targets+=("$(basename "$bin")")
    done
fi
[ -f "$out/cpu.tsv" ] || printf 'target\twall_s\tuser_s\tsys_s\texit\truns\n' >"$out/cpu.tsv"

one() {
    local name=$1 dir=$out/$1
    mkdir -p "$dir/corpus"
    [ -d "$root/tests/fuzz/corpus/$name" ] && cp -rn "$root/tests/fuzz/corpus/$name/." "$dir/corpus/"
    local t0 rc
    t0=$(date +%s)
    /usr/bin/time -f '%U %S' -o "$dir/time" nice -n 19 "$build/$name" -max_total_time="$secs" \
        -max_len=65536 -rss_limit_mb=2048 -timeout=900 -report_slow_units=20 -print_final_stats=1 \
        -artifact_prefix="$dir/" "$dir/corpus" >"$dir/log" 2>&1
    rc=$?
    local runs
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
    read -r u s < <(tail -1 "$dir/time") || { u=0; s=0; }
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$(($(date +%s) - t0))" "$u" "$s" "$rc" "${runs:-?}" \
        >>"$out/cpu.tsv"
}

running=0
for name in "${targets[@]}"; do
    one "$name" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
done
wait
awk -F'\t' 'NR > 1 { cpu += $3 + $4 } END { printf "fuzz: %.0f CPU-seconds (%.2f CPU-hours) in all\n", cpu, cpu / 3600 }' \
    "$out/cpu.tsv"
