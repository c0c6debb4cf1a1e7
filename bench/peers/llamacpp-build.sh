#!/usr/bin/env bash
# Builds llama.cpp (CPU only) from the source tree bundled in the npm package
# node-llama-cpp@3.21.1 (llama/gitRelease.bundle, a git bundle): no network.
# Output: $LLAMACPP_DIR/build/bin/{llama-bench,llama-server,llama-quantize,llama-perplexity}
# (default .deps/llama.cpp, gitignored). Idempotent: a finished build is kept.
# About 10 minutes on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${LLAMACPP_DIR:-$root/.deps/llama.cpp}
bundle=$root/.deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle
[ -f "$bundle" ] || bash "$root/tools/deps.sh"
[ -f "$bundle" ] || { echo "llamacpp-build: $bundle not found (npm install node-llama-cpp@3.21.1)" >&2; exit 1; }
# AMX off: on a KVM guest whose CPU has AMX (Xeon, XCR0 tile bits set,
# the kernel grants ARCH_REQ_XCOMP_PERM, a plain ldtilecfg + tilezero
# program runs), llama-bench of this release dies of SIGILL at a tilezero in
# ggml_backend_amx_mul_mat on its first product. Without AMX it takes its
# AVX-512 VNNI kernels, as on a Xeon without AMX. Explicit -mno- flags win
# over -march=native whatever their order.
flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
stamp="GGML_NATIVE=ON $flags"
if [ -x "$dir/build/bin/llama-bench" ] && [ -x "$dir/build/bin/llama-server" ] &&
    [ -x "$dir/build/bin/llama-quantize" ] && [ "$(cat "$dir/build/stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$dir/build/bin"
    exit 0
fi
mkdir -p "$dir"
if [ ! -f "$dir/src/CMakeLists.txt" ]; then
    rm -rf "$dir/src"
    git clone -q "$bundle" "$dir/src" 2>/dev/null
fi
cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$dir/cmake.log" 2>&1 ||
    { tail -30 "$dir/cmake.log" >&2; exit 1; }
ninja -C "$dir/build" llama-bench llama-server llama-quantize llama-perplexity >"$dir/ninja.log" 2>&1 ||
    { tail -30 "$dir/ninja.log" >&2; exit 1; }
echo "$stamp" >"$dir/build/stamp"
echo "$dir/build/bin"
