#!/usr/bin/env bash
# Builds llama.cpp with CUDA for this GPU's architecture only (sm_90 on an
# H200) from a tarball of node-llama-cpp@3.21.1's source
# (bench/peers/llamacpp-cuda-pack.sh makes it), on the GPU machine: about 5
# minutes on 16 cores. Prints the bin directory. Idempotent: a finished
# build that has the targets is kept.
#   bench/peers/llamacpp-cuda-build.sh SRC.tar.xz DIR [TARGET...]
#   (default target llama-bench; llama-server for bench/concurrency.sh)
set -euo pipefail
tarball=$1; dir=$2; shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(llama-bench)
bin=$dir/llama-build/bin
missing=0
for t in "${targets[@]}"; do [ -x "$bin/$t" ] || missing=1; done
if [ $missing = 1 ]; then
    src=$dir/llama-src
    if [ ! -f "$src/CMakeLists.txt" ]; then
        rm -rf "$src"; mkdir -p "$src"; tar -C "$src" -xJf "$tarball"
    fi
    export PATH=/usr/local/cuda/bin:$PATH
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
    cmake -S "$src" -B "$dir/llama-build" -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" \
        -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_NATIVE=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$dir/cmake.log" 2>&1 ||
        { tail -30 "$dir/cmake.log" >&2; exit 1; }
    cmake --build "$dir/llama-build" -j "$(nproc)" --target "${targets[@]}" >"$dir/build.log" 2>&1 ||
        { tail -30 "$dir/build.log" >&2; exit 1; }
fi
echo "$bin"
