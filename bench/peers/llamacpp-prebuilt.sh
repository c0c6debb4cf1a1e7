#!/usr/bin/env bash
# llama.cpp's CPU peer without building libllama: node-llama-cpp@3.21.1's
# prebuilt libllama / libggml (release v0.4.0, every x86-64 CPU variant of
# ggml-cpu, the best one picked at load) and bench/peers/llamacpp_pp_tg.c
# (llama-bench's pp and tg tests over the C API), compiled against the
# headers of the same release (the git bundle llamacpp-build.sh builds
# from). For a loaded machine where llamacpp-build.sh (~10 min idle) would
# take hours. Output: the path of the llamacpp_pp_tg binary.
#   bench/peers/llamacpp-prebuilt.sh; then: BIN MODEL THREADS P G R BACKEND_DIR
# (BACKEND_DIR: printed on the second line)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${LLAMACPP_DIR:-$root/.deps/llama.cpp}
npm=$root/.deps/npm/node_modules
bins=$npm/@node-llama-cpp/linux-x64/bins/linux-x64
bundle=$npm/node-llama-cpp/llama/gitRelease.bundle
[ -f "$bins/libllama.v0.4.0.so" ] && [ -f "$bundle" ] || bash "$root/tools/deps.sh"
[ -f "$bins/libllama.v0.4.0.so" ] || { echo "llamacpp-prebuilt: $bins/libllama.v0.4.0.so not found" >&2; exit 1; }
mkdir -p "$dir"
[ -f "$dir/src/include/llama.h" ] || { rm -rf "$dir/src"; git clone -q "$bundle" "$dir/src" 2>/dev/null; }
out=$dir/llamacpp_pp_tg
if [ ! -x "$out" ] || [ "$root/bench/peers/llamacpp_pp_tg.c" -nt "$out" ]; then
    cc -O2 -std=c11 -I"$dir/src/include" -I"$dir/src/ggml/include" \
        "$root/bench/peers/llamacpp_pp_tg.c" "$bins/libllama.v0.4.0.so" "$bins/libggml.v0.4.0.so" \
        "$bins/libggml-base.so" -lm -Wl,-rpath,"$bins" -o "$out"
fi
echo "$out"
echo "$bins"
