/* The residual window (--kv-residual, docs/kv-quant.md) in the CPU
 * attention (kernels/cpu/attention.c): a token at position p reads the
 * keys and values of its own window, [p / R * R, p / R * R + R), from a
 * full-precision pool (F32 or F16 rows) and every other position from the
 * quantized pool (TurboQuant, mlx-lm's affine records, llama.cpp's q8_0):
 *  - each token's output is within 1e-5 of attention over an f32 pool
 *    that holds, for that token, its window's rows at full precision and
 *    the other rows dequantized;
 *  - a tile of several tokens (a prefill, across a window's edge) gives
 *    each token the bits it gets alone (so a prompt's chunking does not
 *    change them);
 *  - without a window (resid 0) the output is the quantized pool's. */
#include "core/tensor.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/turbo.h"
#include "model/kv.h"
#include "sample/rng.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS HR_KV_BLOCK
#define NBLK 8

static float frand(hr_rng *r) { return (float)(hr_rng_uniform(r) * 2 - 1); }

/* A quantized format of the case */
typedef struct fmt {
    hr_dtype t;
    int bits, group; /* AFFINE: bits, group; TURBO: the rate (group: the rotation) */
} fmt;

static int group_of(const fmt *f, int layer, int h, bool v) {
    return f->t == HR_DTYPE_TURBO ? hr_turbo_kv_rot(layer, h, v) : f->group;
}

/* One layer of 2 KV heads over NBLK shuffled blocks holding n positions,
 * K and V in format f and at full precision in rt; nq tokens at positions
 * [p0, p0 + nq) with a window of R. */
static void residual_case(hr_rng *rng, fmt f, hr_dtype rt, int G, int hd, int n, int R, int p0,
                          int nq) {
    int nkv = 2, nh = nkv * G, layer = 1;
    size_t rb = hr_kv_row_size(f.t, hd, f.bits, f.group), frb = (size_t)hd * hr_dtype_size(rt);
    size_t qstride = (size_t)nkv * BS * rb, rstride = (size_t)nkv * BS * hd; /* elements */
    size_t fstride = (size_t)nkv * BS * hd;
    uint8_t *kq = calloc(NBLK, qstride), *vq = calloc(NBLK, qstride);
    size_t rbytes = rstride * hr_dtype_size(rt);
    uint8_t *kr = calloc(NBLK, rbytes), *vr = calloc(NBLK, rbytes);
    /* dequantized and full-precision rows as f32, and the reference's pool */
    float *kd = calloc((size_t)NBLK * fstride, 4), *vd = calloc((size_t)NBLK * fstride, 4);
    float *ke = calloc((size_t)NBLK * fstride, 4), *ve = calloc((size_t)NBLK * fstride, 4);
    float *km = calloc((size_t)NBLK * fstride, 4), *vm = calloc((size_t)NBLK * fstride, 4);
    int32_t bt[NBLK] = {5, 2, 7, 0, 3, 6, 1, 4}, rbt[NBLK] = {3, 6, 0, 4, 7, 1, 5, 2};
    float x[256];
    for (int p = 0; p < n; p++)
        for (int h = 0; h < nkv; h++) {
            size_t r = (size_t)bt[p / BS] * BS * nkv + (size_t)h * BS + p % BS;
            size_t rr = (size_t)rbt[p / BS] * BS * nkv + (size_t)h * BS + p % BS;
            for (int w = 0; w < 2; w++) {
                for (int i = 0; i < hd; i++)
                    x[i] = frand(rng) * (i % 13 == 5 ? 6.0f : 1.0f);
                int g = group_of(&f, layer, h, w);
                uint8_t *rec = (w ? vq : kq) + r * rb;
                hr_kv_row_store(rec, x, hd, f.t, f.bits, g);
                hr_kv_row_load((w ? vd : kd) + r * hd, rec, hd, f.t, f.bits, g);
                char *full = (char *)(w ? vr : kr) + rr * frb;
                hr_store_row(full, x, hd, rt);
                hr_kv_row_load((w ? ve : ke) + r * hd, full, hd, rt, 0, 0);
            }
        }
    size_t qn = (size_t)nq * nh * hd;
    float *q = malloc(qn * 4), *out = malloc(qn * 4), *one = malloc((size_t)nh * hd * 4),
          *ref = malloc((size_t)nh * hd * 4);
    for (size_t i = 0; i < qn; i++)
        q[i] = frand(rng);
    int32_t pos[16];
    const int32_t *tabs[16], *rtabs[16];
    for (int t = 0; t < nq; t++) {
        pos[t] = p0 + t;
        tabs[t] = bt;
        rtabs[t] = rbt;
    }
    int ctx = p0 + nq;
    float *scratch = aligned_alloc(64, ((size_t)HR_ATTN_TILE * G * ctx * 4 + 63) / 64 * 64);
    hr_attn_args a = {.q = q, .out = out, .n_tok = nq, .n_heads = nh, .n_kv_heads = nkv,
                      .head_dim = hd, .k = kq, .v = vq, .kv_dtype = f.t, .kv_bits = f.bits,
                      .kv_group = f.group, .block_stride = qstride, .v_dtype = f.t,
                      .v_bits = f.bits, .layer = layer, .block_size = BS, .pos = pos,
                      .blocks = tabs, .scale = 1.0f / sqrtf((float)hd), .scratch = scratch,
                      .max_ctx = ctx, .r_k = kr, .r_v = vr, .r_dtype = rt, .r_stride = rstride,
                      .rblocks = rtabs, .resid = R};
    hr_attention(NULL, &a);
    for (int t = 0; t < nq; t++) {
        /* alone: the same bits */
        hr_attn_args b = a;
        b.q = q + (size_t)t * nh * hd;
        b.out = one;
        b.n_tok = 1;
        b.pos = pos + t;
        b.blocks = tabs + t;
        b.rblocks = rtabs + t;
        hr_attention(NULL, &b);
        if (memcmp(one, out + (size_t)t * nh * hd, (size_t)nh * hd * 4))
            fail_msg("%s R %d: token at %d in a tile of %d (from %d) differs from it alone",
                     hr_dtype_name(f.t), R, pos[t], nq, p0);
        /* the reference: its window's rows exact, the others dequantized */
        int w0 = pos[t] / R * R;
        for (int p = 0; p <= pos[t]; p++)
            for (int h = 0; h < nkv; h++) {
                size_t r = ((size_t)bt[p / BS] * BS * nkv + (size_t)h * BS + p % BS) * hd;
                bool in = p >= w0 && p < w0 + R;
                memcpy(km + r, (in ? ke : kd) + r, (size_t)hd * 4);
                memcpy(vm + r, (in ? ve : vd) + r, (size_t)hd * 4);
            }
        b.out = ref;
        b.k = km;
        b.v = vm;
        b.kv_dtype = b.v_dtype = HR_DTYPE_F32;
        b.block_stride = fstride;
        b.r_k = NULL;
        b.resid = 0;
        hr_attention(NULL, &b);
        for (int i = 0; i < nh * hd; i++)
            if (fabsf(ref[i] - one[i]) > 1e-5f)
                fail_msg("%s R %d hd %d G %d: token at %d: %g, the mixed f32 pool's %g (%s)",
                         hr_dtype_name(f.t), R, hd, G, pos[t], one[i], ref[i], hr_cpu()->name);
    }
    free(scratch);
    free(q);
    free(out);
    free(one);
    free(ref);
    free(kq);
    free(vq);
    free(kr);
    free(vr);
    free(kd);
    free(vd);
    free(ke);
    free(ve);
    free(km);
    free(vm);
}

static void test_residual(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 77);
    const fmt fmts[] = {{HR_DTYPE_TURBO, 7, 0}, {HR_DTYPE_TURBO, 5, 0},
                        {HR_DTYPE_AFFINE, 4, 32}, {HR_DTYPE_Q8_0, 0, 0}};
    int cases = 0;
    for (size_t fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++)
        for (int r = 0; r < 2; r++) {
            hr_dtype rt = r ? HR_DTYPE_F16 : HR_DTYPE_F32;
            residual_case(&rng, fmts[fi], rt, 3, 64, 200, 64, 199, 1);  /* decode */
            residual_case(&rng, fmts[fi], rt, 1, 128, 130, 32, 129, 1); /* window of a block */
            residual_case(&rng, fmts[fi], rt, 3, 64, 140, 64, 120, 16); /* a tile across 128 */
            residual_case(&rng, fmts[fi], rt, 4, 64, 100, 96, 90, 10);  /* across 96 */
            residual_case(&rng, fmts[fi], rt, 2, 64, 40, 64, 0, 16);    /* the first window */
            cases += 5;
        }
    printf("attention with a residual window: %d cases, each token within 1e-5 of its mixed "
           "f32 pool and equal to itself alone (%s)\n", cases, hr_cpu()->name);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_residual),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
