/* TurboQuant's MSE quantizer of one row (Zandieh et al. 2025, "TurboQuant:
 * Online Vector Quantization with Near-optimal Distortion Rate", arXiv
 * 2504.19874, Algorithm 1), the building block of a TurboQuant KV cache:
 *
 *   rotate:   y = H D x / sqrt(hd): D a random diagonal of signs (one per
 *             KV head and layer: hr_turbo_signs), H the Walsh-Hadamard
 *             matrix (hd a power of two, 64 .. 256), so y is x in a random
 *             orthonormal basis (the paper's random rotation Pi, as a
 *             randomized fast Walsh-Hadamard transform);
 *   quantize: n = |x|, z_i = sqrt(hd) y_i / n, each z_i to the nearest of
 *             the 2^bits Lloyd-Max centroids of z's density
 *             (turbo_codebooks.h, made by tools/turboquant/codebooks.py);
 *   record:   [f32 n][codes: hd * bits / 8 bytes, an LSB-first bit stream].
 *
 * Read back in the rotated basis (attention's: the query is rotated once,
 * <q, x> = <H D q / sqrt(hd), y>) or rotated back. The expected squared
 * error of z is hr_turbo_mse[dim][bits - 1] per coordinate (the paper's
 * D_mse of a unit vector, within its bound sqrt(3) pi / 2 * 4^-bits).
 *
 * The KV pool's format (`--kv-quant turbo`) and attention over it: below.
 * The KV rows below store an unbiased scale instead of n. No QJL residual
 * bit for keys (TurboQuant_prod): measured worse, docs/kv-quant.md. */
#ifndef HR_KERNELS_TURBO_H
#define HR_KERNELS_TURBO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether hd (32, 64, 128, 256) and bits (1-4) have a codebook */
bool hr_turbo_ok(int hd, int bits);
static inline size_t hr_turbo_row_bytes(int hd, int bits) {
    return 4 + (size_t)hd * (size_t)bits / 8;
}
/* hd signs (+1.0f / -1.0f) of the rotation `seed` names (splitmix64 bits) */
void hr_turbo_signs(float *signs, int hd, uint64_t seed);
/* y = H D x / sqrt(hd) (y may be x) */
void hr_turbo_rotate(float *y, const float *x, const float *signs, int hd);
/* x = D H y / sqrt(hd), the inverse (x may be y) */
void hr_turbo_unrotate(float *x, const float *y, const float *signs, int hd);
/* The record of x at dst (hr_turbo_row_bytes) */
void hr_turbo_store(void *dst, const float *x, int hd, int bits, const float *signs);
/* The record's row in the rotated basis: y_i = n c(code_i) / sqrt(hd) */
void hr_turbo_load_rotated(float *y, const void *src, int hd, int bits);
/* The record's row: the rotated row rotated back */
void hr_turbo_load(float *x, const void *src, int hd, int bits, const float *signs);
/* The codebook: 2^bits centroids of z, ascending (hr_turbo_ok's shapes) */
const float *hr_turbo_codebook(int hd, int bits);
/* The codebook's MSE per coordinate of z (hr_turbo_ok's shapes) */
double hr_turbo_codebook_mse(int hd, int bits);

/* ---- the KV pool's rows (--kv-quant turbo[:K_BITS,V_BITS]) -------------------------
 * A rate r2 is bits x 2: 4, 6, 8 (2, 3, 4 bits a channel) are one segment
 * of hd channels at r2 / 2 bits; 5 and 7 (2.5, 3.5) split the channels as
 * the paper's fractional rates do, into an outlier segment at one bit more
 * and the rest, each its own TurboQuant instance (norm, rotation,
 * codebook). hearth's segments are halves (hd / 2 channels each, so both
 * rotations stay Walsh-Hadamard transforms; the paper splits a quarter,
 * 32 of 128, which would need a rotation of 96): the outlier half is the
 * channels of RoPE's low-frequency pairs, [hd/4, hd/2) and [3hd/4, hd)
 * (hr_turbo_kv_chan), where keys carry their large, slowly rotating values.
 * Record: [f16 scale per segment][segment 0's codes][segment 1's codes],
 * each an LSB-first bit stream (a chunk of 8 codes is `bits` whole bytes).
 * A segment's scale is not its norm n but w = n d / <z, c> (z its rotated,
 * normalized coordinates, c their centroids): the row read back, x^ =
 * Pi^T (w / sqrt(d)) c, then has <x^, x> = |x|^2, so x^ and every inner
 * product <q, x^> are unbiased over the random rotation. With n (the
 * paper's MSE-optimal point, hr_turbo_store) x^ is shrunk by the
 * codebook's 1 - D_mse on average, which scales every attention score
 * down (a softmax at a higher temperature) and every attention output
 * (docs/kv-quant.md measures both). The unbiased scale is the paper's
 * TurboQuant_prod objective met without its 1-bit QJL residual, whose
 * variance cost more than the bias on the demo model (docs/kv-quant.md).
 * The scale is an f16, as q8_0's and q4_0's scales (an f16 KV cache's
 * range: a row of norm past 65504 saturates there): its rounding, 2^-11
 * relative, is far below a row's quantization error (9.6% at 4 bits), and
 * it keeps 2 bytes a segment, so a fractional rate costs fewer bytes than
 * the next integer one at head_dim 64 too.
 * Segment s of the head `head` of layer `layer`, K (v false) or V, rotates
 * by two rounds of the randomized Walsh-Hadamard transform, y = H D2 H D1
 * g / dim, D1 and D2 the signs of hr_turbo_kv_seed's rounds 0 and 1: one
 * round maps a row dominated by a few channels (RoPE's slow pairs in keys)
 * to coordinates of a few magnitudes only, far from the density the
 * codebooks are made for; two mix them (docs/kv-quant.md measures it; the
 * paper's rotation is a uniformly random one). Attention works in the rotated
 * basis: a row's rotated vector is its segments' rotated vectors end to
 * end (segment s at [s * dim, (s + 1) * dim)). */
typedef struct hr_turbo_kv {
    int hd, r2, nseg, dim; /* segments of dim channels each */
    int bits[2];
    size_t code_off[2];    /* bytes into the record of each segment's codes */
    size_t bytes;          /* the record */
    float rinv;            /* 1 / sqrt(dim) */
    const float *cb[2];    /* each segment's centroids (2^bits, ascending) */
} hr_turbo_kv;

/* Whether hd (64, 128, 256) and r2 (4 .. 8) make a KV row format */
bool hr_turbo_kv_ok(int hd, int r2);
void hr_turbo_kv_layout(hr_turbo_kv *L, int hd, int r2);
static inline size_t hr_turbo_kv_bytes(int hd, int r2) {
    return (r2 % 2 ? 4u : 2u) + (size_t)hd * (size_t)r2 / 16;
}
/* The chunks (8 codes of `bits` bits each) of a segment's codes at byte
 * off of a record of `bytes` whose 4 bytes from the chunk's first lie
 * inside the record: the kernels' one-load chunks (past them, the last
 * chunk at 2 or 3 bits loads the 4 bytes that end with its own) */
static inline int hr_turbo_kv_safe_chunks(size_t bytes, size_t off, int bits) {
    return (int)(((long)bytes - (long)off - 4) / bits) + 1;
}
/* The channel of position e of segment s */
static inline int hr_turbo_kv_chan(const hr_turbo_kv *L, int s, int e) {
    if (L->nseg == 1)
        return e;
    int q = L->hd / 4;
    return e + (e >= q ? q : 0) + (s == 0 ? q : 0);
}
/* The signs of round `round` (0, 1) of one segment's rotation: splitmix64's seed */
static inline uint64_t hr_turbo_kv_seed(int layer, int head, int seg, bool v, int round) {
    return 0x7475726271756174ull ^ ((uint64_t)layer << 24 | (uint64_t)head << 4 |
                                     (uint64_t)round << 2 | (uint64_t)seg << 1 | (uint64_t)v);
}
/* A row's rotation as one int (hr_kv_row_store's `group` for TURBO) */
static inline int hr_turbo_kv_rot(int layer, int head, bool v) {
    return layer << 16 | head << 1 | (int)v;
}
/* The rotations' 2 hd signs (HR_TURBO_KV_SIGNS floats at most): round r's
 * of segment s at [r hd + s dim, r hd + (s + 1) dim) */
#define HR_TURBO_KV_SIGNS 512
void hr_turbo_kv_signs(float *signs, const hr_turbo_kv *L, int layer, int head, bool v);
/* y (hd) = x's segments rotated, end to end; x = the inverse (x != y) */
void hr_turbo_kv_rotate(float *y, const float *x, const hr_turbo_kv *L, const float *signs);
void hr_turbo_kv_unrotate(float *x, const float *y, const hr_turbo_kv *L, const float *signs);
/* The record of x (hd floats) at dst (L->bytes): codes, and the unbiased scales */
void hr_turbo_kv_store(void *dst, const float *x, const hr_turbo_kv *L, const float *signs);
/* The record's rotated vector: y[s dim + e] = c_s(code) * (w_s * rinv) */
void hr_turbo_kv_load_rotated(float *y, const void *src, const hr_turbo_kv *L);
/* Code e of a segment's bit stream q */
static inline unsigned hr_turbo_code(const uint8_t *q, int e, int bits) {
    size_t bit = (size_t)e * (size_t)bits;
    unsigned v = q[bit >> 3];
    if ((bit & 7) + (unsigned)bits > 8)
        v |= (unsigned)q[(bit >> 3) + 1] << 8;
    return (v >> (bit & 7)) & ((1u << bits) - 1);
}

/* Attention over records in place, in the rotated basis (turbo_attn.c is
 * the definition; cpu.h's turbo_dots and turbo_axpys give its bits on
 * every ISA): with c the codes' centroids, n_s a segment's scale (w),
 *   score(q, row) = hsum8(T) * scale,  T[l] = fma chain over the segments s
 *                   of fma(n_s * rinv, A_s[l], T[l]),  A_s[l] = fma chain
 *                   over the segment's positions e = l, l + 8, ... of
 *                   fma(q[s dim + e], c_s[e], A_s[l])
 *   out[s dim + e] = fma(p_j * (n_js * rinv), c_js[e], out[s dim + e]), key j by key
 * q and out rows are hd apart, in the rotated basis (hsum8:
 * hr__kvq_hsum8's order). */
void hr__turbo_dots_scalar(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                           size_t rb, int nk, const hr_turbo_kv *L, float scale);
void hr__turbo_dots_avx2(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                         size_t rb, int nk, const hr_turbo_kv *L, float scale);
void hr__turbo_axpys_scalar(float *o, const float *p, size_t ldp, int nr, const void *rec,
                            size_t rb, int nv, const hr_turbo_kv *L);
void hr__turbo_axpys_avx2(float *o, const float *p, size_t ldp, int nr, const void *rec,
                          size_t rb, int nv, const hr_turbo_kv *L);
void hr__turbo_dots_avx512(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                           size_t rb, int nk, const hr_turbo_kv *L, float scale);
void hr__turbo_axpys_avx512(float *o, const float *p, size_t ldp, int nr, const void *rec,
                            size_t rb, int nv, const hr_turbo_kv *L);
/* hr_turbo_rotate and hr_turbo_unrotate's bodies (cpu.h's turbo_rotate,
 * turbo_unrotate), and the codes of a rotated row (turbo_encode): y's dim
 * floats times s, each its nearest of the 2^bits centroids c, packed at q
 * (LSB first); returns sum_i z_i c[code_i] in double, in order. The scalar
 * bodies are the definition; turbo_avx2.c and turbo_avx512.c give their
 * bits. */
void hr__turbo_rotate_scalar(float *y, const float *x, const float *signs, int hd);
void hr__turbo_unrotate_scalar(float *x, const float *y, const float *signs, int hd);
double hr__turbo_encode_scalar(uint8_t *q, const float *y, float s, const float *c, int dim,
                               int bits);
void hr__turbo_rotate_avx2(float *y, const float *x, const float *signs, int hd);
void hr__turbo_unrotate_avx2(float *x, const float *y, const float *signs, int hd);
double hr__turbo_encode_avx2(uint8_t *q, const float *y, float s, const float *c, int dim,
                             int bits);
void hr__turbo_rotate_avx512(float *y, const float *x, const float *signs, int hd);
void hr__turbo_unrotate_avx512(float *x, const float *y, const float *signs, int hd);
double hr__turbo_encode_avx512(uint8_t *q, const float *y, float s, const float *c, int dim,
                               int bits);

/* The vector bodies' end of turbo_encode: the codes of z (dim, a multiple
 * of 8) packed at q, and <z, c> in the scalar's order */
static inline double hr__turbo_pack(uint8_t *q, const float *z, const int32_t *code,
                                    const float *c, int dim, int bits) {
    double zc = 0;
    for (int i = 0; i < dim; i++)
        zc += (double)z[i] * c[code[i]];
    for (int i = 0; i < dim; i += 8) { /* 8 codes: `bits` whole bytes, LSB first */
        uint64_t w = 0;
        for (int j = 0; j < 8; j++)
            w |= (uint64_t)code[i + j] << (j * bits);
        for (int b = 0; b < bits; b++)
            q[(size_t)i / 8 * (size_t)bits + (size_t)b] = (uint8_t)(w >> (8 * b));
    }
    return zc;
}

#endif
