#!/usr/bin/env bash
# For a GPU machine that receives the working tree as a copy of at most 64
# MiB (the device tool of this project's workplace, docs/gpu.md): packs
# .device/ (tools/cuda-bundle.sh's output) as .devpack/device.tar.xz and
# takes out of the tree what that run does not need; `in` puts it back.
#   tools/cuda-stage.sh out tests   the test fixtures stay; the demo model's weights go
#   tools/cuda-stage.sh out demo    the demo model stays (its draft's weights go); the
#                                   fixtures go (but llama's); bench_cuda_mv travels
#   tools/cuda-stage.sh in          the tracked files back (git checkout)
# There: tar -xJf .devpack/device.tar.xz, then tools/cuda-check.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
case "${1:-}" in
out)
    mkdir -p .devpack
    grep -qx '/.devpack/' .git/info/exclude 2>/dev/null || echo '/.devpack/' >>.git/info/exclude
    # the binaries the other set's tests need stay behind
    case "${2:-tests}" in
    tests) skip=(.device/tokenizer-qwen3) ;;
    *) skip=(.device/test_parity .device/test_quant_parity
             .device/test_backend_kv .device/test_embed_parity .device/test_engine_vision
             .device/bench_kernels) ;;
    esac
    # xz -9: a 64 MiB window, so the binaries' common code (the device kernels
    # each of them links) is stored once
    XZ_OPT=-9 tar -cJf .devpack/device.tar.xz "${skip[@]/#/--exclude=}" .device
    git diff --quiet -- tests models docs/ui || { echo "cuda-stage: uncommitted changes under tests/, models/ or docs/ui/" >&2; exit 1; }
    rm -f docs/ui/*.png # the UI's screenshots: nothing on the GPU reads them
    case "${2:-tests}" in
    tests) rm -rf models/hearth-demo/*.safetensors tests/fixtures/tokenizer tests/fixtures/grammar \
               tests/fixtures/chat tests/fixtures/lora tests/fixtures/train ;;
    demo) find tests/fixtures -mindepth 1 -maxdepth 1 ! -name demo ! -name models -exec rm -rf {} +
          find tests/fixtures/models -mindepth 1 -maxdepth 1 ! -name llama -exec rm -rf {} +
          rm -f models/hearth-demo-draft/*.safetensors ;; # test_spec's cases need the fixtures anyway
    *) echo "usage: tools/cuda-stage.sh out [tests|demo] | in" >&2; exit 2 ;;
    esac
    echo "cuda-stage: $(git ls-files | xargs du -cb 2>/dev/null | tail -1 | cut -f1) bytes tracked + $(du -sb .devpack | cut -f1) in .devpack" ;;
in) git checkout -- tests models docs/ui ;;
*) echo "usage: tools/cuda-stage.sh out [tests|demo] | in" >&2; exit 2 ;;
esac
