/* The quantized KV cache (kernels/cpu/kvquant.h, model/kv.h):
 *  - hr_kvq_store writes, bit for bit, the record of mx.quantize's numbers
 *    (tests/fixtures/kvquant/kv_ref.safetensors, tools/kvquant_ref/gen.py)
 *    and every ISA's kvq_load reads back the fixture's dequantized values
 *    bit for bit (the scalar reference's bits);
 *  - attention read from the records in place (kvq_dots, kvq_axpys,
 *    hr_kvq_finish: kvquant_attn.c) gives the scalar reference's bits on
 *    every ISA, within 1e-6 of the same over the dequantized rows in double;
 *  - attention over a paged quantized pool is within 1e-5 of attention over
 *    a pool of the dequantized f32 rows and of a double-precision
 *    reference, for GQA groups, head dims, every width;
 *  - a sequence converts into a quantized pool (hr_kv_convert) with its
 *    rows requantized from f32 and its old blocks freed;
 *  - the flags' bad values are errors naming the flag. */
#include "core/pool.h"
#include "io/safetensors.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/ops.h"
#include "model/kv.h"
#include "sample/rng.h"
#include "support/fence.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int BITS[] = {2, 3, 4, 6, 8};
static const int GROUPS[] = {32, 64, 128};
#define NB (int)(sizeof BITS / sizeof BITS[0])

static float frand(hr_rng *r) { return (float)(hr_rng_uniform(r) * 2 - 1); }

/* The AVX-512 loader needs only AVX-512 F/BW/VL, fewer than the AVX-512
 * table (which also wants BF16 and VNNI): it is tested wherever it runs. */
static bool avx512_loader_runs(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

/* ---- the record against mx.quantize ------------------------------------ */

static void test_matches_mlx(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/kvquant/kv_ref.safetensors",
             root ? root : ".");
    hr_st_file *f = NULL;
    hr_error err = {0};
    if (hr_st_open(&f, path, &err))
        fail_msg("%s", err.msg);
    const hr_tensor *x = hr_st_find(f, "x");
    assert_non_null(x);
    int rows = (int)x->shape[0], hd = (int)x->shape[1], checked = 0;
    for (int bi = 0; bi < NB; bi++)
        for (int gi = 0; gi < 3; gi++) {
            int bits = BITS[bi], group = GROUPS[gi];
            char nm[64];
            snprintf(nm, sizeof nm, "rec_b%d_g%d", bits, group);
            const hr_tensor *rec = hr_st_find(f, nm);
            snprintf(nm, sizeof nm, "deq_b%d_g%d", bits, group);
            const hr_tensor *deq = hr_st_find(f, nm);
            assert_non_null(rec);
            assert_non_null(deq);
            size_t rb = hr_kvq_row_bytes(hd, bits, group);
            assert_int_equal(rec->shape[1], (int64_t)rb);
            uint8_t buf[1024];
            float y[128];
            for (int r = 0; r < rows; r++) {
                const uint8_t *want = (const uint8_t *)rec->data + (size_t)r * rb;
                const float *wd = (const float *)deq->data + (size_t)r * hd;
                hr_kvq_store(buf, (const float *)x->data + (size_t)r * hd, hd, bits, group);
                if (memcmp(buf, want, rb))
                    fail_msg("%d-bit group %d row %d: record differs from mx.quantize's", bits,
                             group, r);
                for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
                    const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
                    if (!K)
                        continue;
                    memset(y, 0xff, sizeof y);
                    K->kvq_load(y, want, hd, bits, group);
                    if (memcmp(y, wd, (size_t)hd * sizeof *y))
                        fail_msg("%s: %d-bit group %d row %d dequantizes differently", K->name,
                                 bits, group, r);
                }
                if (avx512_loader_runs()) {
                    hr__kvq_load_avx512(y, want, hd, bits, group);
                    assert_memory_equal(y, wd, (size_t)hd * sizeof *y);
                }
                checked++;
            }
        }
    printf("kv quantize: %d rows bit-identical to mx.quantize, dequantized on every ISA\n",
           checked);
    hr_st_close(f);
}

/* Random rows at other head dims: every ISA's load gives the scalar bits. */
static void test_load_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 7);
    const int hds[] = {32, 64, 96, 256};
    int n512 = 0;
    for (int hi = 0; hi < 4; hi++)
        for (int bi = 0; bi < NB; bi++)
            for (int gi = 0; gi < 3; gi++) {
                int hd = hds[hi], bits = BITS[bi], group = GROUPS[gi];
                if (hd % group)
                    continue;
                float x[256], ref[256], y[256];
                uint8_t rec[2048];
                for (int t = 0; t < 20; t++) {
                    for (int i = 0; i < hd; i++)
                        x[i] = frand(&rng) * (t + 1);
                    hr_kvq_store(rec, x, hd, bits, group);
                    hr__kvq_load_scalar(ref, rec, hd, bits, group);
                    for (int i = 0; i < hd; i++) /* within a step of x */
                        assert_true(fabsf(ref[i] - x[i]) <=
                                    (2.0f * (t + 1)) / (float)((1 << bits) - 1) + 1e-5f);
                    for (int isa = 1; isa < HR_ISA_COUNT; isa++) {
                        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
                        if (!K)
                            continue;
                        K->kvq_load(y, rec, hd, bits, group);
                        assert_memory_equal(y, ref, (size_t)hd * sizeof *y);
                    }
                    if (avx512_loader_runs()) {
                        hr__kvq_load_avx512(y, rec, hd, bits, group);
                        assert_memory_equal(y, ref, (size_t)hd * sizeof *y);
                        n512++;
                    }
                }
            }
    printf("kv loaders: every ISA == scalar; AVX-512 loader run on %d rows\n", n512);
}

/* ---- attention read in place ---------------------------------------------- */

/* kvq_dots / kvq_axpys of every ISA == the scalar reference (bits), and
 * that is within 1e-6 (relative to the sum of magnitudes) of the same
 * products over the dequantized rows in double: query rows 1-11 (passes of
 * 4 and their padding; from 5 the widened runs, their row pairs and the
 * bias sums' groups of 8 rows), runs of records past kvq_axpys' 32. The tolerance
 * is relative to the terms' magnitude before the bias cancels (a value
 * s q + b rounds once dequantized, in place never). */
static double rec_bias(const uint8_t *r, int hd, int bits, int group, int i) {
    float b;
    memcpy(&b, r + (size_t)hd * bits / 8 + 4 * (size_t)(hd / group + i / group), 4);
    return b;
}

static void test_attn_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 11);
    /* rows 1-19: passes of 4 rows, from 5 the runs widened once (every
     * row count of the AVX-512 output pass's blocks of 6), from 16 the
     * AVX-512 score pass with the keys in the lanes (blocks of 3 rows) */
    enum { NR = 19, NK = 37 };
    const int hds[] = {64, 96, 128, 256};
    static uint8_t rec[NK * 2048];
    static float q[NR * 256], qp[NR * 256], qsum[NR * 8], deq[NK * 256], sc[NR * 40],
        ref[NR * 40], o[NR * 256], oref[NR * 256], bias[NR * 8], bref[NR * 8], p[NR * 40];
    int cases = 0;
    for (int hi = 0; hi < 4; hi++)
        for (int bi = 0; bi < NB; bi++)
            for (int gi = 0; gi < 3; gi++) {
                int hd = hds[hi], bits = BITS[bi], group = GROUPS[gi], ng = hd / group;
                if (hd % group)
                    continue;
                size_t rb = hr_kvq_row_bytes(hd, bits, group);
                float x[256];
                for (int j = 0; j < NK; j++) {
                    for (int i = 0; i < hd; i++)
                        x[i] = frand(&rng) * (i % 13 == 5 ? 6.0f : 1.0f) + 0.3f;
                    hr_kvq_store(rec + j * rb, x, hd, bits, group);
                    hr__kvq_load_scalar(deq + j * hd, rec + j * rb, hd, bits, group);
                }
                for (int i = 0; i < NR * hd; i++)
                    q[i] = frand(&rng);
                for (int i = 0; i < NR * 40; i++)
                    p[i] = (float)hr_rng_uniform(&rng);
                for (int nr = 1; nr <= NR; nr += nr < 5 ? 2 : 1) {
                    int nk = nr == 3 ? 7 : NK;
                    hr_kvq_prep(qp, qsum, q, nr, hd, bits, group);
                    hr__kvq_dots_scalar(ref, 40, qp, qsum, nr, rec, rb, nk, hd, bits, group,
                                        0.125f);
                    for (int r = 0; r < nr; r++)
                        for (int j = 0; j < nk; j++) {
                            double d = 0, mag = 0;
                            for (int i = 0; i < hd; i++) {
                                d += (double)q[r * hd + i] * deq[j * hd + i];
                                mag += fabs((double)q[r * hd + i]) *
                                       (fabs(deq[j * hd + i]) + 2 * fabs(rec_bias(rec + j * rb, hd, bits, group, i)));
                            }
                            assert_true(fabs(d * 0.125 - ref[r * 40 + j]) <= 1e-6 * mag);
                        }
                    memset(oref, 0, sizeof oref);
                    memset(bref, 0, sizeof bref);
                    hr__kvq_axpys_scalar(oref, bref, p, 40, nr, rec, rb, nk, hd, bits, group);
                    for (int r = 0; r < nr; r++) {
                        float y[256];
                        memcpy(y, oref + r * hd, (size_t)hd * 4);
                        hr_kvq_finish(y, bref + r * ng, hd, bits, group);
                        for (int i = 0; i < hd; i++) {
                            double d = 0, mag = 0;
                            for (int j = 0; j < nk; j++) {
                                d += (double)p[r * 40 + j] * deq[j * hd + i];
                                mag += p[r * 40 + j] *
                                       (fabs(deq[j * hd + i]) + 2 * fabs(rec_bias(rec + j * rb, hd, bits, group, i)));
                            }
                            assert_true(fabs(d - y[i]) <= 1e-6 * mag);
                        }
                    }
                    /* each input and output ends at an unmapped page */
                    size_t nsc = (size_t)(nr - 1) * 40 + nk, nq = (size_t)nr * hd,
                           nb = (size_t)nr * ng;
                    hr_fence fe = {0};
                    const uint8_t *rec_f = hr_fence_copy(&fe, rec, nk * rb);
                    const float *qp_f = hr_fence_copy(&fe, qp, nq * 4);
                    const float *qsum_f = hr_fence_copy(&fe, qsum, nb * 4);
                    const float *p_f = hr_fence_copy(&fe, p, nsc * 4);
                    float *sc_f = hr_fence_copy(&fe, sc, nsc * 4);
                    float *o_f = hr_fence_copy(&fe, o, nq * 4);
                    float *bias_f = hr_fence_copy(&fe, bias, nb * 4);
                    assert_true(rec_f && qp_f && qsum_f && p_f && sc_f && o_f && bias_f);
                    for (int isa = 1; isa < HR_ISA_COUNT; isa++) {
                        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
                        if (!K)
                            continue;
                        memset(sc_f, 0, nsc * 4);
                        K->kvq_dots(sc_f, 40, qp_f, qsum_f, nr, rec_f, rb, nk, hd, bits, group,
                                    0.125f);
                        for (int r = 0; r < nr; r++)
                            assert_memory_equal(sc_f + r * 40, ref + r * 40, (size_t)nk * 4);
                        memset(o_f, 0, nq * 4);
                        memset(bias_f, 0, nb * 4);
                        K->kvq_axpys(o_f, bias_f, p_f, 40, nr, rec_f, rb, nk, hd, bits, group);
                        assert_memory_equal(o_f, oref, nq * 4);
                        assert_memory_equal(bias_f, bref, nb * 4);
                        cases++;
                    }
                    hr_fence_free(&fe);
                }
            }
    printf("attention read in place: %d ISA cases == the scalar reference\n", cases);
}

/* ---- attention over quantized blocks ------------------------------------- */

#define BS HR_KV_BLOCK
#define NBLK 8

/* One layer of nkv heads over NBLK shuffled blocks, n positions: the
 * quantized pool and the f32 pool of its dequantized rows give the same
 * attention (bits), within 1e-5 of double. */
static void attn_case(hr_rng *rng, int G, int hd, int bits, int group, int n, int nq) {
    int nkv = 2, nh = nkv * G;
    size_t rb = hr_kvq_row_bytes(hd, bits, group);
    size_t qstride = (size_t)nkv * BS * rb, fstride = (size_t)nkv * BS * hd;
    uint8_t *kq = calloc(NBLK, qstride), *vq = calloc(NBLK, qstride);
    float *kf = calloc((size_t)NBLK * fstride, 4), *vf = calloc((size_t)NBLK * fstride, 4);
    int32_t bt[NBLK] = {5, 2, 7, 0, 3, 6, 1, 4};
    float x[1024];
    for (int p = 0; p < n; p++)
        for (int h = 0; h < nkv; h++) {
            size_t r = (size_t)bt[p / BS] * BS * nkv + (size_t)h * BS + p % BS; /* row index */
            for (int w = 0; w < 2; w++) {
                for (int i = 0; i < hd; i++)
                    x[i] = frand(rng) * (i % 17 == 3 ? 8.0f : 1.0f);
                uint8_t *rec = (w ? vq : kq) + r * rb;
                hr_kvq_store(rec, x, hd, bits, group);
                hr__kvq_load_scalar((w ? vf : kf) + r * hd, rec, hd, bits, group);
            }
        }
    float *q = malloc((size_t)nq * nh * hd * 4), *oq = malloc((size_t)nq * nh * hd * 4),
          *of = malloc((size_t)nq * nh * hd * 4);
    for (int i = 0; i < nq * nh * hd; i++)
        q[i] = frand(rng);
    int32_t pos[8];
    const int32_t *tabs[8];
    for (int t = 0; t < nq; t++) {
        pos[t] = n - nq + t;
        tabs[t] = bt;
    }
    float *scratch = aligned_alloc(64, ((size_t)HR_ATTN_TILE * G * n * 4 + 63) / 64 * 64);
    hr_attn_args a = {.q = q, .out = oq, .n_tok = nq, .n_heads = nh, .n_kv_heads = nkv,
                      .head_dim = hd, .k = kq, .v = vq, .kv_dtype = HR_DTYPE_AFFINE,
                      .kv_bits = bits, .kv_group = group, .block_stride = qstride,
                      .block_size = BS, .pos = pos, .blocks = tabs,
                      .scale = 1.0f / sqrtf((float)hd), .scratch = scratch, .max_ctx = n};
    hr_attention(NULL, &a);
    hr_attn_args b = a;
    b.out = of;
    b.k = kf;
    b.v = vf;
    b.kv_dtype = HR_DTYPE_F32;
    b.block_stride = fstride;
    hr_attention(NULL, &b);
    for (int i = 0; i < nq * nh * hd; i++)
        if (fabsf(oq[i] - of[i]) > 1e-5f)
            fail_msg("G %d hd %d %d-bit g%d n %d: quantized %g, dequantized f32 %g (%s)", G, hd,
                     bits, group, n, oq[i], of[i], hr_cpu()->name);
    /* double reference over the dequantized rows */
    double sc[1024];
    for (int t = 0; t < nq; t++)
        for (int h = 0; h < nh; h++) {
            int kvh = h / G, np = pos[t] + 1;
            const float *qr = q + ((size_t)t * nh + h) * hd;
            double mx = -INFINITY, sum = 0;
            for (int p = 0; p < np; p++) {
                const float *kr = kf + ((size_t)bt[p / BS] * BS * nkv + (size_t)kvh * BS + p % BS) * hd;
                double d = 0;
                for (int i = 0; i < hd; i++)
                    d += (double)qr[i] * kr[i];
                sc[p] = d / sqrt((double)hd);
                mx = sc[p] > mx ? sc[p] : mx;
            }
            for (int p = 0; p < np; p++)
                sum += sc[p] = exp(sc[p] - mx);
            for (int i = 0; i < hd; i++) {
                double o = 0;
                for (int p = 0; p < np; p++)
                    o += sc[p] / sum *
                         vf[((size_t)bt[p / BS] * BS * nkv + (size_t)kvh * BS + p % BS) * hd + i];
                assert_true(fabs(o - oq[((size_t)t * nh + h) * hd + i]) <= 1e-5);
            }
        }
    free(scratch);
    free(q);
    free(oq);
    free(of);
    free(kq);
    free(vq);
    free(kf);
    free(vf);
}

static void test_attention(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 39);
    int cases = 0;
    for (int bi = 0; bi < NB; bi++) {
        attn_case(&rng, 1, 64, BITS[bi], 64, 77, 1);
        attn_case(&rng, 4, 128, BITS[bi], 32, 200, 1);
        attn_case(&rng, 2, 128, BITS[bi], 128, 150, 5); /* prefill rows */
        cases += 3;
    }
    /* a GQA group past 4096 query values a KV head (multi-query models):
     * the rows are loaded, not read in place */
    attn_case(&rng, 33, 128, 4, 64, 70, 2);
    cases++;
    printf("attention over quantized KV within 1e-5 of the dequantized rows: %d cases (%s)\n", cases,
           hr_cpu()->name);
}

/* ---- the pool ------------------------------------------------------------- */

static hr_hparams shape(int head_dim) {
    hr_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layers = 2;
    hp.n_kv_heads = 2;
    hp.head_dim = head_dim;
    return hp;
}

static void test_convert(void **state) {
    (void)state;
    hr_hparams hp = shape(64);
    hr_kv src, dst;
    hr_error err = {0};
    assert_int_equal(hr_kv_init(&src, &hp, HR_DTYPE_F32, 4, &err), 0);
    hr_kv_fmt qf = {.dtype = HR_DTYPE_AFFINE, .bits = 4, .group = 64};
    assert_int_equal(hr_kv_init_fmt(&dst, hr_backend_cpu(), &hp, &qf, 4, &err), 0);
    assert_int_equal(dst.row_bytes, 32 + 8);
    assert_int_equal(hr_kv_fmt_block_bytes(&hp, &qf), 2 * 2 * 2 * 32 * 40);
    hr_rng rng;
    hr_rng_seed(&rng, 3);
    int32_t blocks[2] = {hr_kv_alloc(&src), hr_kv_alloc(&src)};
    int rows[2] = {32, 9};
    float k[64], v[64], want[64], got[64];
    uint8_t rec[64];
    for (int l = 0; l < 2; l++)
        for (int b = 0; b < 2; b++)
            for (int h = 0; h < 2; h++)
                for (int s = 0; s < rows[b]; s++) {
                    for (int i = 0; i < 64; i++) {
                        k[i] = frand(&rng);
                        v[i] = frand(&rng) * 3;
                    }
                    hr_kv_store(&src, l, blocks[b], h, s, k, v);
                }
    float before[2][2][2][32][64]; /* [layer][block][head][slot] K rows */
    for (int l = 0; l < 2; l++)
        for (int b = 0; b < 2; b++)
            for (int h = 0; h < 2; h++)
                for (int s = 0; s < rows[b]; s++)
                    hr_kv_load_row(&src, l, blocks[b], h, s, false, before[l][b][h][s]);
    int32_t old[2] = {blocks[0], blocks[1]};
    assert_int_equal(hr_kv_convert(&dst, &src, blocks, rows, 2, blocks, &err), 0);
    assert_int_equal(src.n_free, 4); /* the old blocks went back */
    assert_int_equal(dst.n_free, 2);
    (void)old;
    for (int l = 0; l < 2; l++)
        for (int b = 0; b < 2; b++)
            for (int h = 0; h < 2; h++)
                for (int s = 0; s < rows[b]; s++) {
                    hr_kvq_store(rec, before[l][b][h][s], 64, 4, 64);
                    hr__kvq_load_scalar(want, rec, 64, 4, 64);
                    hr_kv_load_row(&dst, l, blocks[b], h, s, false, got);
                    assert_memory_equal(got, want, sizeof got);
                }
    /* too few free blocks: an error, nothing moved */
    int32_t three[3] = {hr_kv_alloc(&src), hr_kv_alloc(&src), hr_kv_alloc(&src)};
    int r3[3] = {1, 1, 1};
    assert_int_not_equal(hr_kv_convert(&dst, &src, three, r3, 3, three, &err), 0);
    assert_int_equal(src.n_free, 1);
    hr_kv_deinit(&src);
    hr_kv_deinit(&dst);
}

static void expect_err(int rc, const hr_error *err, const char *flag) {
    assert_int_not_equal(rc, 0);
    if (!strstr(err->msg, flag))
        fail_msg("error \"%s\" does not name %s", err->msg, flag);
}

static void test_bad_flags(void **state) {
    (void)state;
    hr_error err = {0};
    assert_int_equal(hr_kv_quant_check(0, 64, 5000, &err), 0);
    assert_int_equal(hr_kv_quant_check(4, 32, 0, &err), 0);
    expect_err(hr_kv_quant_check(5, 64, 0, &err), &err, "--kv-bits");
    expect_err(hr_kv_quant_check(7, 64, 0, &err), &err, "--kv-bits");
    expect_err(hr_kv_quant_check(16, 64, 0, &err), &err, "--kv-bits");
    expect_err(hr_kv_quant_check(4, 48, 0, &err), &err, "--kv-group-size");
    expect_err(hr_kv_quant_check(4, 0, 0, &err), &err, "--kv-group-size");
    expect_err(hr_kv_quant_check(4, 64, -1, &err), &err, "--quantized-kv-start");
    hr_hparams hp = shape(64);
    hr_kv kv;
    hr_kv_fmt f = {.dtype = HR_DTYPE_AFFINE, .bits = 4, .group = 128}; /* does not divide head_dim 64 */
    expect_err(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 2, &err), &err, "--kv-group-size");
    f = (hr_kv_fmt){.dtype = HR_DTYPE_AFFINE, .bits = 5, .group = 64};
    expect_err(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 2, &err), &err, "--kv-bits");
    hp = shape(96); /* 96 % 64 */
    f = (hr_kv_fmt){.dtype = HR_DTYPE_AFFINE, .bits = 8, .group = 64};
    expect_err(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 2, &err), &err, "--kv-group-size");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_mlx),
        cmocka_unit_test(test_load_isas),
        cmocka_unit_test(test_attn_isas),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_convert),
        cmocka_unit_test(test_bad_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
