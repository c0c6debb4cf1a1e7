#!/usr/bin/python3
"""TurboQuant reference fixture (numpy; Debian's /usr/bin/python3 has it):
the paper's MSE quantizer (Zandieh et al. 2025, "TurboQuant", arXiv
2504.19874, Algorithm 1) written with dense matrices, independently of
hearth's C (src/kernels/cpu/turbo.c), for hearth's KV row format. Writes
tests/fixtures/turboquant/turbo_ref.safetensors:

  cb_d{D}_b{B}        F32 [2^B]        Lloyd-Max centroids of z = sqrt(D) y_i,
                                       y uniform on the sphere of dimension D
                                       (numpy's own Lloyd iteration to 1e-14,
                                       trapezoid rule on a 400001-point grid,
                                       cell edges between grid points)
  x_hd{H}, q_hd{H}    F32 [R, H]       K rows and query rows
  z_hd{H}_r{R2}       F32 [R, H]       the rows' normalized rotated coordinates,
                                       segment after segment (rate R2 = bits x 2)
  rec_hd{H}_r{R2}     U8  [R, bytes]   hearth's record of each row
  ip_hd{H}_r{R2}      F32 [R]          <q, x^>: the inner product of the query
                                       with the dequantized row (float64)

Every row is head 1 of layer 3's K (hr_turbo_kv_rot(3, 1, false)). The
algorithm, per segment s of the row (turbo.h: rate R2 odd splits the head
into the outlier half, channels [H/4, H/2) and [3H/4, H), at one bit more,
and the rest; even: one segment of all channels):
  D1, D2 = diag(signs): splitmix64 of hr_turbo_kv_seed(layer, head, s, v, round)
           for rounds 0 and 1
  Pi     = H_d D2 H_d D1 / d, H_d the Sylvester Walsh-Hadamard matrix: two
           rounds of the randomized Hadamard transform
  n      = |x_s|,  z = sqrt(d) Pi x_s / n,  code_i = argmin_k |z_i - c_k|
           (c: the committed codebook src/kernels/cpu/turbo_codebooks.h, so
           the test compares codes; cb_* checks that table on its own)
  w      = n d / <z, c[code]>: the scale that makes <x^_s, x_s> = |x_s|^2,
           so x^ is unbiased (E over the rotation of x^_s is x_s, and of
           <q, x^> is <q, x>) where the paper's n (x^ = the MSE-optimal
           point) shrinks it by the codebook's 1 - D_mse
  x^_s   = Pi^T (w / sqrt(d)) c[code]
The record: f16 w per segment (w rounded to f32, then to f16, as hearth's
C), then each segment's codes as an LSB-first bit stream.

    python3 tools/turboquant/ref.py --out tests/fixtures/turboquant
"""
import argparse
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kvquant_ref"))
from gen import write_safetensors  # noqa: E402

f32 = np.float32
M64 = (1 << 64) - 1
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def signs(d, seed):
    """hr_turbo_signs: bit i % 64 of the (i / 64)-th splitmix64 output"""
    out, s = [], seed
    for i in range(d):
        if i % 64 == 0:
            s = (s + 0x9E3779B97F4A7C15) & M64
            z = s
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            z ^= z >> 31
        out.append(-1.0 if (z >> (i % 64)) & 1 else 1.0)
    return np.array(out)


def seed_of(layer, head, seg, v, rnd):
    return 0x7475726271756174 ^ (layer << 24 | head << 4 | rnd << 2 | seg << 1 | int(v))


def hadamard(d):
    h = np.array([[1.0]])
    while h.shape[0] < d:
        h = np.kron(np.array([[1.0, 1.0], [1.0, -1.0]]), h)
    return h


def header_codebooks():
    """The committed table: {(d, b): centroids}"""
    text = open(os.path.join(ROOT, "src/kernels/cpu/turbo_codebooks.h")).read()
    body = text[text.index("hr_turbo_centroids"):text.index("hr_turbo_mse")]
    rows = re.findall(r"\{([-0-9.e, f]+)\}", body)
    out, dims = {}, (32, 64, 128, 256)
    for i, r in enumerate(rows):
        out[(dims[i // 4], i % 4 + 1)] = np.array([float(v.rstrip("f")) for v in r.split(",")],
                                                  dtype=f32)
    return out


def lloyd(d, b):
    s = math.sqrt(d)
    z = np.linspace(-s, s, 400001)
    lc = math.lgamma(d / 2) - 0.5 * math.log(math.pi) - math.lgamma((d - 1) / 2)
    t = np.clip(z / s, -1 + 1e-15, 1 - 1e-15)
    g = np.exp(lc + (d - 3) / 2 * np.log1p(-t * t)) / s
    # cumulative integrals of g and z g (trapezoid), read between grid points
    # by linear interpolation, so a cell's edges need not sit on the grid
    h = z[1] - z[0]
    P = np.concatenate([[0.0], np.cumsum((g[1:] + g[:-1]) / 2 * h)])
    zg = z * g
    M = np.concatenate([[0.0], np.cumsum((zg[1:] + zg[:-1]) / 2 * h)])
    k = 1 << b
    c = np.interp((np.arange(k) + 0.5) / k, P / P[-1], z)
    for _ in range(1000000):
        e = np.concatenate([[-s], (c[1:] + c[:-1]) / 2, [s]])
        pe, me = np.interp(e, z, P), np.interp(e, z, M)
        nc = np.diff(me) / np.diff(pe)
        moved = np.abs(nc - c).max()
        c = nc
        if moved < 1e-14:
            break
    return (c - c[::-1]) / 2


def segments(hd, r2):
    if r2 % 2 == 0:
        return [(list(range(hd)), r2 // 2)]
    q = hd // 4
    out_ch = [e + (q if e >= q else 0) + q for e in range(hd // 2)]
    rest = [e + (q if e >= q else 0) for e in range(hd // 2)]
    return [(out_ch, (r2 + 1) // 2), (rest, r2 // 2)]


def pack(codes, bits):
    nbytes = len(codes) * bits // 8
    v = 0
    for i, c in enumerate(codes):
        v |= int(c) << (i * bits)
    return list(v.to_bytes(nbytes, "little"))


def row(x, q, hd, r2, cbs, layer=3, head=1):
    segs = segments(hd, r2)
    norms, codes_b, zs, ip = [], [], [], 0.0
    for s, (ch, bits) in enumerate(segs):
        d = len(ch)
        h = hadamard(d)
        pi = ((h * signs(d, seed_of(layer, head, s, False, 1))[None, :])
              @ (h * signs(d, seed_of(layer, head, s, False, 0))[None, :])) / d
        xs = x[ch].astype(np.float64)
        n = float(np.float32(np.sqrt((xs * xs).sum())))
        z = math.sqrt(d) * (pi @ xs) / n
        c = cbs[(d, bits)].astype(np.float64)
        code = np.abs(z[:, None] - c[None, :]).argmin(axis=1)
        zc = float(z @ c[code])
        w = float(np.float16(np.float32(n * d / zc))) if zc > 0 else 0.0
        xhat = pi.T @ (w / math.sqrt(d) * c[code])
        ip += float(q[ch].astype(np.float64) @ xhat)
        norms.append(w)
        codes_b += pack(code, bits)
        zs.append(z)
    rec = list(np.array(norms, dtype=np.float16).tobytes()) + codes_b
    return np.array(rec, dtype=np.uint8), np.concatenate(zs).astype(f32), ip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cbs = header_codebooks()
    tensors = []
    for d in (32, 64, 128):
        for b in (1, 2, 3, 4):
            tensors.append(("cb_d%d_b%d" % (d, b), lloyd(d, b).astype(f32)))
    rng = np.random.default_rng(2504)
    for hd in (64, 128):
        R = 12
        x = rng.standard_normal((R, hd)).astype(f32)
        x[0, [5, hd // 2 + 7]] *= f32(15)          # outlier channels
        x[1] += f32(0.8)                           # an offset
        x[2] *= f32(1e-3)                          # small
        x[3] *= f32(40)                            # large
        q = rng.standard_normal((R, hd)).astype(f32)
        tensors += [("x_hd%d" % hd, x), ("q_hd%d" % hd, q)]
        for r2 in (4, 5, 6, 7, 8):
            out = [row(x[i], q[i], hd, r2, cbs) for i in range(R)]
            tensors.append(("rec_hd%d_r%d" % (hd, r2), np.stack([o[0] for o in out])))
            tensors.append(("z_hd%d_r%d" % (hd, r2), np.stack([o[1] for o in out])))
            tensors.append(("ip_hd%d_r%d" % (hd, r2), np.array([o[2] for o in out], dtype=f32)))
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "turbo_ref.safetensors")
    write_safetensors(path, tensors)
    print("wrote", path, file=sys.stderr)


if __name__ == "__main__":
    main()
