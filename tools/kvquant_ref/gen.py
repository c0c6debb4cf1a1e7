#!/usr/bin/python3
"""Quantized KV cache reference fixture (numpy; run with a python3 that has
numpy, e.g. Debian's /usr/bin/python3). Writes
tests/fixtures/kvquant/kv_ref.safetensors:

  x                  F32 [R, 128]   K/V rows (one token, one head)
  rec_b{B}_g{G}      U8  [R, row]   hearth's row record of each row
  deq_b{B}_g{G}      F32 [R, 128]   the record dequantized
for B in 2, 3, 4, 6, 8 (mlx-lm's --kv-bits) and G in 32, 64, 128.

Source of truth: mlx-lm's QuantizedKVCache (mlx_lm/models/cache.py) stores
mx.quantize(keys, group_size, bits) of each [.., head_dim] row: the affine
quantizer of mlx/backend/cpu/quantized.cpp, transcribed once in
tools/refgen/quant_ref.py (`quantize`, reused here, not copied). The row
record (src/kernels/cpu/kvquant.h) is the packed quants (mlx's LSB-first
uint32 bit stream, as bytes), then the f32 scales, then the f32 biases.
Dequantized: f32(scale * q) + bias, two f32 roundings (mx.dequantize's
`scale * q + bias` without fusing).
"""
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "refgen"))
from quant_ref import quantize  # noqa: E402

f32 = np.float32
HD = 128


def rows():
    rng = np.random.default_rng(39)
    x = rng.standard_normal((8, HD)).astype(f32)
    x[0, [3, 70, 101]] *= f32(12)     # outlier channels, as keys have
    x[1] = f32(0.75)                  # a constant row: scale eps, q0 branch
    x[2] = f32(0)                     # zeros
    x[3] = -np.abs(x[3])              # one-signed (negative)
    x[4] *= f32(1e-9)                 # below eps * n_bins
    x[5] = np.round(x[5] * 4) / 4     # many exact ties for rint
    x[6] *= f32(300)                  # large magnitudes (values past f16)
    return x


def write_safetensors(path, tensors):
    names = {np.dtype(f32): "F32", np.dtype(np.uint8): "U8"}
    header, blobs, off = {}, [], 0
    for name, arr in tensors:
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": names[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def unpack(packed_u8, bits, n):
    acc, nacc, out, it = 0, 0, [], iter(packed_u8.tolist())
    while len(out) < n:
        while nacc < bits:
            acc |= next(it) << nacc
            nacc += 8
        out.append(acc & ((1 << bits) - 1))
        acc >>= bits
        nacc -= bits
    return np.array(out, dtype=f32)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    x = rows()
    tensors = [("x", x)]
    for bits in (2, 3, 4, 6, 8):
        for group in (32, 64, 128):
            p, s, b = quantize(x, bits, group)
            p8 = p.view(np.uint8).reshape(x.shape[0], -1)
            rec = np.concatenate([p8, s.view(np.uint8), b.view(np.uint8)], axis=1)
            deq = np.zeros_like(x)
            for r in range(x.shape[0]):
                q = unpack(p8[r], bits, HD)
                sc = np.repeat(s[r], group)
                bi = np.repeat(b[r], group)
                deq[r] = (sc * q).astype(f32) + bi
            tensors += [(f"rec_b{bits}_g{group}", rec), (f"deq_b{bits}_g{group}", deq)]
    out = os.path.join(root, "tests", "fixtures", "kvquant", "kv_ref.safetensors")
    write_safetensors(out, tensors)
    print("wrote", out, file=sys.stderr)


if __name__ == "__main__":
    main()
