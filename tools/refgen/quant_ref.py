#!/usr/bin/python3
"""MLX affine quantization reference fixtures (numpy; run with a python3
that has numpy, e.g. Debian's /usr/bin/python3). Writes
tests/fixtures/quant/affine_ref.safetensors:

  x                  F32 [4, 256]   input rows
  b{B}_g{G}.weight   U32 [4, 256*B/32]  packed quants
  b{B}_g{G}.scales   F32 [4, 256/G]
  b{B}_g{G}.biases   F32 [4, 256/G]
for B in 2,3,4,5,6,8 and G in 32,64,128.

Source of truth: ml-explore/mlx, mlx/backend/cpu/quantized.cpp, function
`quantize` (what mx.quantize / mlx-lm's convert run on CPU): per group,
float32 math,
  n_bins = 2^B - 1, eps = 1e-7
  scale = max((w_max - w_min) / n_bins, eps), negated unless |w_min| > |w_max|
  edge = w_min if |w_min| > |w_max| else w_max
  q0 = rint(edge / scale); if q0 != 0: scale = edge / q0, bias = edge else bias = 0
  q = clip(rint((w - bias) / scale), 0, n_bins)
packed as one LSB-first bit stream per row (2/4/8 bits: uint32 words with
element k at bits k*B; 3/5/6 bits: 8 (or 4) elements per 3/5-byte pack,
extract_bits in the same file reads them back).
"""
import json
import os
import struct
import sys

import numpy as np

f32 = np.float32


def quantize(w, bits, group):
    rows, cols = w.shape
    n_bins = f32((1 << bits) - 1)
    eps = f32(1e-7)
    qs = np.zeros((rows, cols), dtype=np.uint64)
    scales = np.zeros((rows, cols // group), dtype=f32)
    biases = np.zeros((rows, cols // group), dtype=f32)
    for r in range(rows):
        for g in range(cols // group):
            x = w[r, g * group:(g + 1) * group].astype(f32)
            w_min, w_max = f32(x.min()), f32(x.max())
            mask = abs(w_min) > abs(w_max)
            scale = max(f32(f32(w_max - w_min) / n_bins), eps)
            scale = scale if mask else f32(-scale)
            edge = w_min if mask else w_max
            q0 = np.rint(f32(edge / scale))
            bias = f32(0)
            if q0 != 0:
                scale = f32(edge / q0)
                bias = edge
            q = np.rint(((x - bias) / scale).astype(f32))
            q = np.clip(q, 0, n_bins)
            qs[r, g * group:(g + 1) * group] = q.astype(np.uint64)
            scales[r, g] = scale
            biases[r, g] = bias
    packed = np.zeros((rows, cols * bits // 8), dtype=np.uint8)
    for r in range(rows):
        acc, nacc, out = 0, 0, []
        for v in qs[r]:
            acc |= int(v) << nacc
            nacc += bits
            while nacc >= 8:
                out.append(acc & 0xFF)
                acc >>= 8
                nacc -= 8
        packed[r] = np.array(out, dtype=np.uint8)
    return packed.view(np.uint32).reshape(rows, -1), scales, biases


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, arr in tensors:
        dt = {np.dtype(f32): "F32", np.dtype(np.uint32): "U32"}[arr.dtype]
        b = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((4, 256)).astype(f32)
    x[1] *= f32(0.01)           # small magnitudes
    x[2] = np.abs(x[2])         # one-signed rows: q0 == 0 branch
    x[3, :64] = f32(0.5)        # a constant group
    tensors = [("x", x)]
    for bits in (2, 3, 4, 5, 6, 8):
        for group in (32, 64, 128):
            p, s, b = quantize(x, bits, group)
            tensors += [(f"b{bits}_g{group}.weight", p), (f"b{bits}_g{group}.scales", s),
                        (f"b{bits}_g{group}.biases", b)]
    out = os.path.join(root, "tests", "fixtures", "quant", "affine_ref.safetensors")
    write_safetensors(out, tensors)
    print("wrote", out, file=sys.stderr)


if __name__ == "__main__":
    main()
