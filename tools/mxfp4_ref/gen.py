#!/usr/bin/env python3
"""Reference values for hearth's MXFP4 dequantization (tests/kernels/test_mxfp4.c).

Two layouts of the same OCP MX FP4 format, each decoded here with numpy from
its own definition:
  hub:  gpt-oss on the Hugging Face hub (transformers' mxfp4 integration):
        `*_blocks` [rows, cols/32, 16] u8, element 2i the low nibble of byte i
        and 2i+1 the high one; `*_scales` [rows, cols/32] u8 E8M0;
        w = FP4_VALUES[code] * 2^(scale - 127)
  ggml: llama.cpp's block_mxfp4 (ggml-common.h): e (u8) then qs[16]; element j
        the low nibble of qs[j], j+16 the high one;
        w = kvalues_mxfp4[code] * 2^(e - 128) (the doubled values, half scale)
Writes tests/fixtures/mxfp4/ref.json. Deterministic (seeded)."""
import json
import os

import numpy as np

FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)
KVAL = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def hub_dequant(blocks, scales):
    rows, groups, _ = blocks.shape
    out = np.empty((rows, groups, 32), dtype=np.float32)
    out[:, :, 0::2] = FP4[blocks & 0xF]
    out[:, :, 1::2] = FP4[blocks >> 4]
    out = np.ldexp(out, (scales.astype(np.int32) - 127)[:, :, None]).astype(np.float32)
    return out.reshape(rows, groups * 32)


def ggml_dequant(raw, rows, groups):
    b = raw.reshape(rows, groups, 17)
    e, qs = b[:, :, 0], b[:, :, 1:]
    out = np.empty((rows, groups, 32), dtype=np.float32)
    out[:, :, :16] = KVAL[qs & 0xF]
    out[:, :, 16:] = KVAL[qs >> 4]
    out = np.ldexp(out, (e.astype(np.int32) - 128)[:, :, None]).astype(np.float32)
    return out.reshape(rows, groups * 32)


def main():
    rng = np.random.default_rng(31)
    rows, groups = 4, 3
    blocks = rng.integers(0, 256, size=(rows, groups, 16), dtype=np.uint8)
    # exponents around 1.0, plus the edges: the denormal range and the top
    scales = rng.integers(118, 136, size=(rows, groups), dtype=np.uint8)
    scales[0, 0], scales[1, 1], scales[2, 2], scales[3, 0] = 0, 1, 160, 127
    raw = rng.integers(0, 256, size=(rows, groups, 17), dtype=np.uint8)
    raw[:, :, 0] = rng.integers(118, 136, size=(rows, groups), dtype=np.uint8)
    raw[0, 1, 0], raw[1, 0, 0] = 0, 160
    x = rng.standard_normal(groups * 32).astype(np.float32)
    hub = hub_dequant(blocks, scales)
    ref = {
        "rows": rows, "cols": groups * 32,
        "hub_blocks": blocks.reshape(-1).tolist(), "hub_scales": scales.reshape(-1).tolist(),
        "hub_values": [float(v) for v in hub.reshape(-1)],
        "ggml_blocks": raw.reshape(-1).tolist(),
        "ggml_values": [float(v) for v in ggml_dequant(raw.reshape(-1), rows, groups).reshape(-1)],
        "x": [float(v) for v in x],
        "hub_y": [float(v) for v in (hub.astype(np.float64) @ x.astype(np.float64))],
    }
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    out = os.path.join(root, "tests", "fixtures", "mxfp4", "ref.json")
    with open(out, "w") as f:
        json.dump(ref, f, indent=0)
        f.write("\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
