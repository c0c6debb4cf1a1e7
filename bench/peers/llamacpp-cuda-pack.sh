#!/usr/bin/env bash
# Packs llama.cpp's source (the tree bundled in node-llama-cpp@3.21.1, as
# bench/peers/llamacpp-build.sh uses) for the GPU machine, which has nvcc
# but no network: the CPU-only backends' and the web UI's sources left out,
# about 3.5 MB as xz. bench/cuda.sh builds it there.
#   bench/peers/llamacpp-cuda-pack.sh OUT.tar.xz
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: llamacpp-cuda-pack.sh OUT.tar.xz}
src=${LLAMACPP_DIR:-$root/.deps/llama.cpp}/src
bundle=$root/.deps/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [ ! -f "$src/CMakeLists.txt" ]; then
    [ -f "$bundle" ] || bash "$root/tools/deps.sh"
    rm -rf "$src"; mkdir -p "$(dirname "$src")"
    git clone -q "$bundle" "$src" 2>/dev/null
fi
ex=()
for b in vulkan sycl metal opencl hexagon et cann openvino webgpu virtgpu musa zdnn zendnn rpc; do
    ex+=(--exclude="ggml/src/ggml-$b")
done
tar -C "$src" "${ex[@]}" --exclude=tools/ui/src --exclude=tools/ui/tests --exclude=tools/server/tests \
    --exclude=tools/ui/package-lock.json --exclude='*.png' --exclude='*.gguf' \
    -cf - CMakeLists.txt cmake common ggml include src tools vendor licenses LICENSE scripts/ui-assets.cmake | xz -6 -T2 >"$out"
ls -la "$out" >&2
