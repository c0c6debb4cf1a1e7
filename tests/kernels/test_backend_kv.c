/* The KV cache's formats through a backend's qkv and attention ops (the seam,
 * kernels/backend.h): on the CPU, and on the GPU with --device cuda
 * (tools/cuda-check.sh). For q8_0, q4_0, K and V of different types
 * (--cache-type-k / -v) and mlx's affine records at 2..8 bits in groups of
 * 32, 64 and 128 (--kv-bits), a prefill step of 40 tokens and a decode step
 * over a table of two blocks:
 *  - every K/V row the qkv op stored is byte for byte the record the CPU's
 *    quantizer writes for the same floats (hr_kv_row_store): the prompt
 *    cache and the SSD tier move these bytes between backends;
 *  - attention over them is within 1e-5 of attention over the dequantized
 *    rows (hr_kv_row_load), computed here in double;
 *  - on a GPU, bit for bit the attention the same op computes over an f32
 *    cache that holds the dequantized rows (kernels/cuda/kvq.cuh reads a
 *    record as its floats, in the order of an f32 row). */
#include "core/error.h"
#include "core/pool.h"
#include "kernels/backend.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"
#include "sample/rng.h"

#include "../device_arg.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NH = 4, NKV = 2, BS = 32, NB = 2, T1 = 40, NPOS = T1 + 1, MAXHD = 256 };
static const int32_t TABLE[NB] = {1, 0}; /* positions 0..31 in block 1 */

static const char *g_device;
static hr_backend *g_be;
static hr_pool *g_pool;

typedef struct kv_case {
    hr_dtype k, v;
    int bits, group, hd;
    int vbits; /* TURBO: V's rate (0: K's) */
} kv_case;

enum { LAYER = 5 }; /* TURBO: the rows' rotations are the layer's */

typedef struct side {
    hr_dtype t;
    size_t rb;     /* a row's bytes */
    size_t stride; /* a block's: bytes for records, elements otherwise (hr_qkv_args) */
    size_t block;  /* a block's bytes */
} side;

static int bits_of(const kv_case *c, bool v) { return v && c->vbits ? c->vbits : c->bits; }

/* hr_kv_row_store's group: TURBO's rotation of head h */
static int group_of(const kv_case *c, hr_dtype t, int h, bool v) {
    return t == HR_DTYPE_TURBO ? hr_turbo_kv_rot(LAYER, h, v) : c->group;
}

static side side_of(hr_dtype t, const kv_case *c, bool v) {
    side s = {.t = t, .rb = hr_kv_row_size(t, c->hd, bits_of(c, v), c->group)};
    s.block = (size_t)NKV * BS * s.rb;
    s.stride = hr_kv_is_rec(t) ? s.block : (size_t)NKV * BS * c->hd;
    return s;
}

static size_t row_off(const side *s, int pos, int h) {
    return (size_t)TABLE[pos / BS] * s->block + ((size_t)h * BS + pos % BS) * s->rb;
}

/* one step of n tokens at positions p0.. on ctx: (qkv: the rows stored)
 * then attention into out (host, n * NH * hd) */
static void step(hr_bctx *ctx, const kv_case *c, const side *ks, const side *vs, void *kc,
                 void *vc, float *dq, float *dk, float *dv, float *dout, int p0, int n,
                 bool qkv, float *out) {
    int32_t tok[T1] = {0}, pos[T1], seq[T1] = {0}, tab_off[1] = {0};
    uint8_t logits[T1] = {0};
    float freq[2] = {0, 1};
    for (int t = 0; t < n; t++)
        pos[t] = p0 + t;
    hr_step_in in = {.n_tokens = n, .n_seqs = 1, .token = tok, .pos = pos, .seq = seq,
                     .logits = logits, .tables = TABLE, .tab_off = tab_off, .n_tables = NB,
                     .freq = freq, .rot_dim = 0, .kv_split = -1};
    hr_error err = {0};
    const hr_backend_ops *ops = g_be->ops;
    if (ops->begin(ctx, &in, &err))
        fail_msg("begin: %s", err.msg);
    size_t vstride = ks->t != vs->t || ks->rb != vs->rb ? vs->stride : 0;
    if (qkv)
        ops->qkv(ctx, &(hr_qkv_args){
            .q = dq, .k = dk, .v = dv, .n_heads = NH, .n_kv_heads = NKV, .head_dim = c->hd,
            .qk_norm = HR_BQK_NONE, .rope = false, .k_cache = kc, .v_cache = vc,
            .kv_dtype = ks->t, .kv_bits = c->bits, .kv_group = c->group,
            .block_stride = ks->stride, .block_size = BS, .v_dtype = vs->t,
            .v_block_stride = vstride, .v_bits = c->vbits, .layer = LAYER});
    ops->attention(ctx, &(hr_attn_in){
        .q = dq, .out = dout, .n_heads = NH, .n_kv_heads = NKV, .head_dim = c->hd,
        .k_cache = kc, .v_cache = vc, .kv_dtype = ks->t, .kv_bits = c->bits,
        .kv_group = c->group, .block_stride = ks->stride, .block_size = BS, .v_dtype = vs->t,
        .v_block_stride = vstride, .v_bits = c->vbits, .layer = LAYER,
        .scale = 1.0f / sqrtf((float)c->hd),
        .max_ctx = p0 + n});
    if (ops->end(ctx, &err))
        fail_msg("end: %s", err.msg);
    if (ops->download(g_be, out, dout, (size_t)n * NH * c->hd * sizeof(float), &err))
        fail_msg("download: %s", err.msg);
}

static void *dev_alloc(size_t n) {
    void *p = g_be->ops->alloc(g_be, n);
    assert_non_null(p);
    return p;
}

static void up(void *dst, const void *src, size_t n) {
    hr_error err = {0};
    if (g_be->ops->upload(g_be, dst, src, n, &err))
        fail_msg("upload: %s", err.msg);
}

static hr_bctx *ctx_for(int hd) {
    hr_bctx_dims dm = {.max_tokens = T1, .max_seqs = 1, .max_ctx = 64, .n_heads = NH,
                       .n_kv_heads = NKV, .head_dim = hd, .rot_dim = 0};
    hr_bctx *ctx;
    hr_error err = {0};
    if (g_be->ops->ctx_new(g_be, g_pool, &dm, &ctx, &err))
        fail_msg("ctx_new: %s", err.msg);
    return ctx;
}

/* the two steps of case c on the cache (kc, vc) in the formats ks, vs;
 * out: NPOS * NH * hd */
static void run(const kv_case *c, const side *ks, const side *vs, void *kc, void *vc,
                const float *q, const float *k, const float *v, bool qkv, float *out) {
    int hd = c->hd, qd = NH * hd, kvd = NKV * hd;
    float *dq = dev_alloc((size_t)T1 * qd * 4), *dk = dev_alloc((size_t)T1 * kvd * 4);
    float *dv = dev_alloc((size_t)T1 * kvd * 4), *dout = dev_alloc((size_t)T1 * qd * 4);
    hr_bctx *ctx = ctx_for(hd);
    up(dq, q, (size_t)T1 * qd * 4);
    up(dk, k, (size_t)T1 * kvd * 4);
    up(dv, v, (size_t)T1 * kvd * 4);
    step(ctx, c, ks, vs, kc, vc, dq, dk, dv, dout, 0, T1, qkv, out);
    up(dq, q + (size_t)T1 * qd, (size_t)qd * 4); /* the decode step: position 40 */
    up(dk, k + (size_t)T1 * kvd, (size_t)kvd * 4);
    up(dv, v + (size_t)T1 * kvd, (size_t)kvd * 4);
    step(ctx, c, ks, vs, kc, vc, dq, dk, dv, dout, T1, 1, qkv, out + (size_t)T1 * qd);
    g_be->ops->ctx_free(ctx);
    g_be->ops->free(g_be, dq, 0);
    g_be->ops->free(g_be, dk, 0);
    g_be->ops->free(g_be, dv, 0);
    g_be->ops->free(g_be, dout, 0);
}

/* attention of position p's query head h over the dequantized rows, in double */
static void reference(const kv_case *c, const float *q, const float *kd, const float *vd, int p,
                      int h, double *o) {
    int hd = c->hd, kvh = h / (NH / NKV);
    double s[NPOS], m = -INFINITY, l = 0;
    const float *qr = q + ((size_t)p * NH + h) * hd;
    for (int j = 0; j <= p; j++) {
        const float *kr = kd + ((size_t)j * NKV + kvh) * hd;
        double d = 0;
        for (int i = 0; i < hd; i++)
            d += (double)qr[i] * kr[i];
        s[j] = d / sqrt((double)hd);
        m = fmax(m, s[j]);
    }
    for (int i = 0; i < hd; i++)
        o[i] = 0;
    for (int j = 0; j <= p; j++) {
        double e = exp(s[j] - m);
        l += e;
        for (int i = 0; i < hd; i++)
            o[i] += e * vd[((size_t)j * NKV + kvh) * hd + i];
    }
    for (int i = 0; i < hd; i++)
        o[i] /= l;
}

static void one_case(const kv_case *c, uint64_t seed) {
    int hd = c->hd, qd = NH * hd, kvd = NKV * hd;
    side ks = side_of(c->k, c, false), vs = side_of(c->v, c, true);
    char name[96];
    snprintf(name, sizeof name, "%s/%s bits %d/%d group %d hd %d", hr_dtype_name(c->k),
             hr_dtype_name(c->v), c->bits, bits_of(c, true), c->group, hd);
    hr_rng rng;
    hr_rng_seed(&rng, seed);
    float *q = malloc((size_t)NPOS * qd * 4), *k = malloc((size_t)NPOS * kvd * 4);
    float *v = malloc((size_t)NPOS * kvd * 4);
    for (size_t i = 0; i < (size_t)NPOS * qd; i++)
        q[i] = (float)(hr_rng_uniform(&rng) * 4 - 2);
    for (size_t i = 0; i < (size_t)NPOS * kvd; i++) {
        k[i] = (float)(hr_rng_uniform(&rng) * 2 - 1);
        v[i] = (float)(hr_rng_uniform(&rng) * 2 - 1);
    }
    for (int i = 0; i < hd; i++) /* a row of zeros, a row with one large value */
        k[i] = v[kvd + i] = 0.0f;
    k[2 * kvd + 5] = -7.5f;
    /* the records the CPU's quantizer writes, and their floats */
    uint8_t *ke = calloc(NB, ks.block), *ve = calloc(NB, vs.block);
    uint8_t *kg = malloc(NB * ks.block), *vg = malloc(NB * vs.block);
    float *kd = malloc((size_t)NPOS * kvd * 4), *vd = malloc((size_t)NPOS * kvd * 4);
    for (int p = 0; p < NPOS; p++)
        for (int h = 0; h < NKV; h++) {
            size_t at = (size_t)p * kvd + (size_t)h * hd;
            int kb = bits_of(c, false), vb = bits_of(c, true);
            int kg = group_of(c, ks.t, h, false), vg = group_of(c, vs.t, h, true);
            hr_kv_row_store(ke + row_off(&ks, p, h), k + at, hd, ks.t, kb, kg);
            hr_kv_row_store(ve + row_off(&vs, p, h), v + at, hd, vs.t, vb, vg);
            hr_kv_row_load(kd + at, ke + row_off(&ks, p, h), hd, ks.t, kb, kg);
            hr_kv_row_load(vd + at, ve + row_off(&vs, p, h), hd, vs.t, vb, vg);
        }
    void *kc = dev_alloc(NB * ks.block), *vc = dev_alloc(NB * vs.block);
    float *out = malloc((size_t)NPOS * qd * 4);
    run(c, &ks, &vs, kc, vc, q, k, v, true, out);
    hr_error err = {0};
    assert_int_equal(g_be->ops->download(g_be, kg, kc, NB * ks.block, &err), 0);
    assert_int_equal(g_be->ops->download(g_be, vg, vc, NB * vs.block, &err), 0);
    for (int p = 0; p < NPOS; p++)
        for (int h = 0; h < NKV; h++) {
            if (memcmp(kg + row_off(&ks, p, h), ke + row_off(&ks, p, h), ks.rb))
                fail_msg("%s: K row of position %d head %d differs from the CPU's record",
                         name, p, h);
            if (memcmp(vg + row_off(&vs, p, h), ve + row_off(&vs, p, h), vs.rb))
                fail_msg("%s: V row of position %d head %d differs from the CPU's record",
                         name, p, h);
        }
    double worst = 0, o[MAXHD];
    for (int p = 0; p < NPOS; p++)
        for (int h = 0; h < NH; h++) {
            reference(c, q, kd, vd, p, h, o);
            for (int i = 0; i < hd; i++)
                worst = fmax(worst, fabs(o[i] - out[((size_t)p * NH + h) * hd + i]));
        }
    if (!(worst <= 1e-5))
        fail_msg("%s: attention %g from the dequantized rows' (1e-5)", name, worst);
    /* the same op over f32 rows of the dequantized floats (TurboQuant's
     * attention is in the rotated basis: another order) */
    if (g_be->device_mem && c->k != HR_DTYPE_TURBO) {
        kv_case f = *c;
        side fs = side_of(HR_DTYPE_F32, &f, false);
        float *kf = calloc(NB, fs.block), *vf = calloc(NB, fs.block);
        for (int p = 0; p < NPOS; p++)
            for (int h = 0; h < NKV; h++) {
                memcpy((char *)kf + row_off(&fs, p, h), kd + (size_t)p * kvd + (size_t)h * hd,
                       fs.rb);
                memcpy((char *)vf + row_off(&fs, p, h), vd + (size_t)p * kvd + (size_t)h * hd,
                       fs.rb);
            }
        void *kcf = dev_alloc(NB * fs.block), *vcf = dev_alloc(NB * fs.block);
        up(kcf, kf, NB * fs.block);
        up(vcf, vf, NB * fs.block);
        float *outf = malloc((size_t)NPOS * qd * 4);
        run(c, &fs, &fs, kcf, vcf, q, k, v, false, outf);
        for (size_t i = 0; i < (size_t)NPOS * qd; i++)
            if (memcmp(&out[i], &outf[i], 4))
                fail_msg("%s: attention value %zu %.9g, over the f32 rows %.9g", name, i,
                         out[i], outf[i]);
        g_be->ops->free(g_be, kcf, 0);
        g_be->ops->free(g_be, vcf, 0);
        free(kf);
        free(vf);
        free(outf);
    }
    printf("%s: records equal, attention within %.2g\n", name, worst);
    g_be->ops->free(g_be, kc, 0);
    g_be->ops->free(g_be, vc, 0);
    free(q);
    free(k);
    free(v);
    free(ke);
    free(ve);
    free(kg);
    free(vg);
    free(kd);
    free(vd);
    free(out);
}

/* llama.cpp's cache types, K and V alike or apart */
static void test_ggml_types(void **state) {
    (void)state;
    static const kv_case cases[] = {
        {HR_DTYPE_Q8_0, HR_DTYPE_Q8_0, 0, 0, 64, 0},  {HR_DTYPE_Q4_0, HR_DTYPE_Q4_0, 0, 0, 64, 0},
        {HR_DTYPE_Q8_0, HR_DTYPE_F16, 0, 0, 64, 0},   {HR_DTYPE_F32, HR_DTYPE_Q4_0, 0, 0, 64, 0},
        {HR_DTYPE_Q4_0, HR_DTYPE_Q8_0, 0, 0, 128, 0}, {HR_DTYPE_BF16, HR_DTYPE_Q8_0, 0, 0, 96, 0},
        {HR_DTYPE_F16, HR_DTYPE_F32, 0, 0, 64, 0},    {HR_DTYPE_F16, HR_DTYPE_F16, 0, 0, 64, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        one_case(&cases[i], 100 + i);
}

/* mlx-lm's affine records: every bit width, groups 32, 64, 128 */
static void test_affine(void **state) {
    (void)state;
    static const int bits[] = {2, 3, 4, 6, 8};
    for (int b = 0; b < 5; b++)
        for (int g = 32; g <= 128; g *= 2) {
            kv_case c = {HR_DTYPE_AFFINE, HR_DTYPE_AFFINE, bits[b], g, g == 128 ? 128 : 64, 0};
            one_case(&c, 200 + (uint64_t)(b * 8 + g / 32));
        }
}

/* TurboQuant's records (rates x 2: 8 = 4 bits, 7 = 3.5, 5 = 2.5 with an
 * outlier half; K and V at rates of their own) */
static void test_turbo(void **state) {
    (void)state;
    static const kv_case cases[] = {
        {HR_DTYPE_TURBO, HR_DTYPE_TURBO, 8, 0, 64, 0},  {HR_DTYPE_TURBO, HR_DTYPE_TURBO, 7, 0, 64, 0},
        {HR_DTYPE_TURBO, HR_DTYPE_TURBO, 5, 0, 64, 0},  {HR_DTYPE_TURBO, HR_DTYPE_TURBO, 6, 0, 128, 0},
        {HR_DTYPE_TURBO, HR_DTYPE_TURBO, 8, 0, 128, 4}, {HR_DTYPE_TURBO, HR_DTYPE_TURBO, 7, 0, 128, 5},
        {HR_DTYPE_TURBO, HR_DTYPE_TURBO, 4, 0, 256, 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        one_case(&cases[i], 300 + i);
}

int main(int argc, char **argv) {
    if (!hr_test_device(argc, argv, &g_device))
        return 0;
    hr_error err = {0};
    if (hr_backend_get(g_device, &g_be, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    g_pool = hr_pool_new(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ggml_types),
        cmocka_unit_test(test_affine),
        cmocka_unit_test(test_turbo),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    hr_pool_free(g_pool);
    return rc;
}
