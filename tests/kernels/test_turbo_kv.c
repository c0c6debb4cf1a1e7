/* TurboQuant KV rows (--kv-quant turbo: kernels/cpu/turbo.h, model/kv.h):
 *  - against tools/turboquant/ref.py's numpy reference of the paper's
 *    quantizer (tests/fixtures/turboquant/turbo_ref.safetensors): the
 *    committed codebooks equal numpy's own Lloyd-Max codebooks within 1e-6,
 *    a row's record is numpy's (f16 scales equal or one step apart, codes equal except
 *    where numpy's rotated coordinate lies within 1e-4 of a cell edge), and
 *    the inner product of a query with the row read back (attention's
 *    turbo_dots, the query rotated once) is numpy's <q, x^> within 1e-5;
 *  - the rotation of a row's segments (two randomized Hadamard rounds) is
 *    inverted by hr_turbo_kv_unrotate; the codes' distortion at the paper's
 *    n is the codebook's within 5% (at the fractional rates between the
 *    segments' codebooks'), the row read back at the unbiased scale has
 *    <x^, x> = |x|^2 and a distortion within [0.9 D, 1.1 D / (1 - D)];
 *  - attention read from the records in place (turbo_dots, turbo_axpys)
 *    gives the scalar reference's bits on every ISA, within 1e-6 of the
 *    same sums over the rotated rows read back, in double;
 *  - attention over a paged pool of these rows (every rate, K and V at
 *    rates of their own, GQA groups 1, 3, 4, decode and 5-token prefill
 *    rows) is within 1e-5 of attention over an f32 pool of the dequantized
 *    rows;
 *  - the pool's format: row bytes, K and V apart, refusals naming the flag,
 *    and --kv-quant's parser. */
#include "core/tensor.h"
#include "io/safetensors.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/turbo.h"
#include "model/kv.h"
#include "sample/rng.h"
#include "support/rows_attn.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int RATES[] = {4, 5, 6, 7, 8};

static float frand(hr_rng *r) { return (float)(hr_rng_uniform(r) * 2 - 1); }

/* ---- the numpy reference ---------------------------------------------------- */

static const hr_tensor *need(hr_st_file *f, const char *fmt, ...) {
    char nm[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nm, sizeof nm, fmt, ap);
    va_end(ap);
    const hr_tensor *t = hr_st_find(f, nm);
    if (!t)
        fail_msg("fixture: no %s", nm);
    return t;
}

static void test_numpy_reference(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/turboquant/turbo_ref.safetensors",
             root ? root : ".");
    hr_st_file *f = NULL;
    hr_error err = {0};
    if (hr_st_open(&f, path, &err))
        fail_msg("%s", err.msg);
    /* the codebooks: the committed table against numpy's Lloyd-Max */
    const int dims[] = {32, 64, 128};
    for (int di = 0; di < 3; di++)
        for (int b = 1; b <= 4; b++) {
            const hr_tensor *cb = need(f, "cb_d%d_b%d", dims[di], b);
            const float *mine = hr_turbo_codebook(dims[di], b);
            for (int k = 0; k < 1 << b; k++)
                if (fabsf(mine[k] - ((const float *)cb->data)[k]) > 1e-6f)
                    fail_msg("dim %d %d-bit centroid %d: %.9g, numpy %.9g", dims[di], b, k,
                             mine[k], ((const float *)cb->data)[k]);
        }
    int rows = 0, near = 0, scale_steps = 0;
    for (int hd = 64; hd <= 128; hd *= 2) {
        const hr_tensor *X = need(f, "x_hd%d", hd), *Q = need(f, "q_hd%d", hd);
        int R = (int)X->shape[0];
        for (int ri = 0; ri < 5; ri++) {
            int r2 = RATES[ri];
            hr_turbo_kv L;
            hr_turbo_kv_layout(&L, hd, r2);
            const hr_tensor *rec = need(f, "rec_hd%d_r%d", hd, r2),
                            *Z = need(f, "z_hd%d_r%d", hd, r2),
                            *ip = need(f, "ip_hd%d_r%d", hd, r2);
            assert_int_equal(rec->shape[1], (int64_t)L.bytes);
            float signs[HR_TURBO_KV_SIGNS], qr[256];
            uint8_t mine[512];
            hr_turbo_kv_signs(signs, &L, 3, 1, false);
            for (int r = 0; r < R; r++, rows++) {
                const float *x = (const float *)X->data + (size_t)r * hd,
                            *q = (const float *)Q->data + (size_t)r * hd,
                            *z = (const float *)Z->data + (size_t)r * hd;
                const uint8_t *want = (const uint8_t *)rec->data + (size_t)r * L.bytes;
                hr_kv_row_store(mine, x, hd, HR_DTYPE_TURBO, r2, hr_turbo_kv_rot(3, 1, false));
                bool same = true;
                for (int s = 0; s < L.nseg; s++) {
                    uint16_t a, b; /* the f16 scales: equal, or one f16 step apart where
                                    * the f32 quotient sat on a rounding edge */
                    memcpy(&a, mine + 2 * s, 2);
                    memcpy(&b, want + 2 * s, 2);
                    if (a != b)
                        scale_steps++;
                    if ((a > b ? a - b : b - a) > 1)
                        fail_msg("hd %d rate %d row %d segment %d: scale %.9g, numpy %.9g", hd,
                                 r2, r, s, hr_f16_to_f32(a), hr_f16_to_f32(b));
                    for (int e = 0; e < L.dim; e++) {
                        const uint8_t *cm = mine + L.code_off[s], *cw = want + L.code_off[s];
                        unsigned c0 = hr_turbo_code(cm, e, L.bits[s]),
                                 c1 = hr_turbo_code(cw, e, L.bits[s]);
                        if (c0 == c1)
                            continue;
                        same = false;
                        float edge = 0.5f * (L.cb[s][c0] + L.cb[s][c1]);
                        if ((c0 > c1 ? c0 - c1 : c1 - c0) != 1 ||
                            fabsf(z[s * L.dim + e] - edge) > 1e-4f)
                            fail_msg("hd %d rate %d row %d: code %u, numpy %u (z %.7g)", hd, r2,
                                     r, c0, c1, z[s * L.dim + e]);
                        near++;
                    }
                }
                if (!same)
                    continue;
                /* <q, x^> read in place with the query rotated once */
                float sc;
                hr_turbo_kv_rotate(qr, q, &L, signs);
                hr__turbo_dots_scalar(&sc, 1, qr, 1, mine, L.bytes, 1, &L, 1.0f);
                double mag = 0;
                for (int i = 0; i < hd; i++)
                    mag += fabs((double)q[i] * x[i]);
                float w = ((const float *)ip->data)[r];
                if (fabs((double)sc - w) > 1e-5 * mag)
                    fail_msg("hd %d rate %d row %d: <q, x^> %.9g, numpy %.9g", hd, r2, r, sc, w);
            }
        }
    }
    hr_st_close(f);
    printf("numpy reference: codebooks within 1e-6, %d rows' records and inner products "
           "(%d codes at a cell edge, %d scales a step apart)\n", rows, near, scale_steps);
}

/* ---- rotation and round trips ----------------------------------------------- */

static void test_round_trip(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 9);
    float x[256], y[256], z[256], s[HR_TURBO_KV_SIGNS], rec_y[256];
    uint8_t rec[512];
    for (int hd = 64; hd <= 256; hd *= 2)
        for (int ri = 0; ri < 5; ri++) {
            hr_turbo_kv L;
            hr_turbo_kv_layout(&L, hd, RATES[ri]);
            assert_int_equal(L.bytes, (RATES[ri] % 2 ? 4 : 2) + hd * RATES[ri] / 16);
            double sum = 0, sum_mse = 0;
            enum { ROWS = 300 };
            for (int r = 0; r < ROWS; r++) {
                hr_turbo_kv_signs(s, &L, r % 7, r % 3, r & 1);
                double n2 = 0, e2 = 0;
                for (int i = 0; i < hd; i++) {
                    x[i] = frand(&rng) + frand(&rng) + frand(&rng);
                    n2 += (double)x[i] * x[i];
                }
                hr_turbo_kv_rotate(y, x, &L, s);
                hr_turbo_kv_unrotate(z, y, &L, s);
                for (int i = 0; i < hd; i++)
                    assert_true(fabsf(z[i] - x[i]) <= 1e-5f * (1 + fabsf(x[i])));
                hr_turbo_kv_store(rec, x, &L, s);
                hr_turbo_kv_load_rotated(rec_y, rec, &L);
                /* the codes at the paper's MSE-optimal point: segment s's
                 * centroids times n_s / sqrt(d) against its rotated row */
                double em = 0, er = 0;
                for (int sg = 0; sg < L.nseg; sg++) {
                    const float *ys = y + sg * L.dim, *rs = rec_y + sg * L.dim;
                    uint16_t h;
                    memcpy(&h, rec + 2 * sg, 2);
                    double n = 0, w = hr_f16_to_f32(h);
                    for (int e = 0; e < L.dim; e++)
                        n += (double)ys[e] * ys[e];
                    n = sqrt(n);
                    for (int e = 0; e < L.dim; e++) {
                        double c = w > 0 ? rs[e] / w : 0; /* the centroid over sqrt(d) */
                        em += (ys[e] - n * c) * (ys[e] - n * c);
                        er += ((double)ys[e] - rs[e]) * ((double)ys[e] - rs[e]);
                    }
                }
                hr_turbo_kv_unrotate(z, rec_y, &L, s);
                double xz = 0;
                for (int i = 0; i < hd; i++) {
                    e2 += ((double)x[i] - z[i]) * ((double)x[i] - z[i]);
                    xz += (double)x[i] * z[i];
                }
                if (fabs(xz - n2) > 1e-3 * n2) /* the scale's one job: <x^, x> = |x|^2 (f16: 2^-11) */
                    fail_msg("hd %d rate %d row %d: <x^, x> %.9g, |x|^2 %.9g", hd, RATES[ri], r,
                             xz, n2);
                if (fabs(e2 - er) > 1e-4 * n2) /* read back through the inverse rotation */
                    fail_msg("hd %d rate %d row %d: |x - x^|^2 %.9g, rotated %.9g", hd,
                             RATES[ri], r, e2, er);
                sum += e2 / n2;
                sum_mse += em / n2;
            }
            sum /= ROWS;
            sum_mse /= ROWS;
            /* at n the distortion is the codebook's; the unbiased scale
             * n d / <z, c> (turbo.h) adds its shrinkage back, about
             * D / (1 - D) a coordinate */
            double lo = hr_turbo_codebook_mse(L.dim, L.bits[L.nseg - 1]),
                   hi = hr_turbo_codebook_mse(L.dim, L.bits[0]);
            printf("hd %d rate %.1f: |x - x^|^2 / |x|^2 = %.5f at n (codebooks %.5f .. %.5f), "
                   "%.5f at the unbiased scale\n", hd, RATES[ri] / 2.0, sum_mse, hi, lo, sum);
            if (sum_mse < 0.95 * hi || sum_mse > 1.05 * lo)
                fail_msg("hd %d rate %d: distortion %g outside [%g, %g]", hd, RATES[ri], sum_mse,
                         hi, lo);
            if (sum < 0.9 * hi || sum > 1.1 * lo / (1 - lo))
                fail_msg("hd %d rate %d: unbiased distortion %g (at n %g)", hd, RATES[ri], sum,
                         sum_mse);
        }
}

/* ---- attention read in place, every ISA ------------------------------------- */

/* The layout's kernels for hr_rows_attn_check (K NULL: the scalar ones) */
static void tq_dots(const hr_cpu_kernels *K, const void *fmt, float *sc, const float *q, int nr,
                    const uint8_t *rec, size_t rb, int nk, float scale) {
    (K ? K->turbo_dots : hr__turbo_dots_scalar)(sc, HR_ROWS_LD, q, nr, rec, rb, nk, fmt, scale);
}

static void tq_axpys(const hr_cpu_kernels *K, const void *fmt, float *o, const float *p, int nr,
                     const uint8_t *rec, size_t rb, int nk) {
    (K ? K->turbo_axpys : hr__turbo_axpys_scalar)(o, p, HR_ROWS_LD, nr, rec, rb, nk, fmt);
}

static void test_attn_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 11);
    enum { NR = 19, NK = 37 }; /* rows 1-19: every ISA's passes of 1-4 and of 5-8 rows, their tails, and from 16 AVX-512's runs widened once */
    static uint8_t rec[NK * 264];
    static float q[NR * 256], yr[NK * 256], p[NR * HR_ROWS_LD];
    int cases = 0;
    for (int hd = 64; hd <= 256; hd *= 2)
        for (int ri = 0; ri < 5; ri++) {
            hr_turbo_kv L;
            hr_turbo_kv_layout(&L, hd, RATES[ri]);
            size_t rb = L.bytes;
            float x[256], s[HR_TURBO_KV_SIGNS];
            hr_turbo_kv_signs(s, &L, 1, 0, false);
            for (int j = 0; j < NK; j++) {
                for (int i = 0; i < hd; i++)
                    x[i] = frand(&rng) * (i % 13 == 5 ? 6.0f : 1.0f) + 0.3f;
                hr_turbo_kv_store(rec + j * rb, x, &L, s);
                hr_turbo_kv_load_rotated(yr + j * hd, rec + j * rb, &L);
            }
            for (int i = 0; i < NR * hd; i++)
                q[i] = frand(&rng);
            for (int i = 0; i < NR * HR_ROWS_LD; i++)
                p[i] = (float)hr_rng_uniform(&rng);
            for (int nr = 1; nr <= NR; nr++) {
                int nk = nr == 3 ? 7 : NK;
                cases += hr_rows_attn_check(&(hr_rows_attn){&L, tq_dots, tq_axpys}, q, p, rec,
                                            rb, yr, nr, nk, hd);
            }
        }
    printf("TurboQuant attention read in place: %d ISA cases == the scalar reference\n", cases);
}

/* ---- attention over a paged pool -------------------------------------------- */

#define BS HR_KV_BLOCK
#define NBLK 8

/* One layer (index 2) of 2 KV heads over NBLK shuffled blocks, n positions,
 * K at rate k2 and V at v2: within 1e-5 of the f32 pool of its dequantized
 * rows. */
static void attn_case(hr_rng *rng, int k2, int v2, int G, int hd, int n, int nq) {
    int nkv = 2, nh = nkv * G, layer = 2;
    size_t krb = hr_turbo_kv_bytes(hd, k2), vrb = hr_turbo_kv_bytes(hd, v2);
    size_t fstride = (size_t)nkv * BS * hd;
    uint8_t *kq = calloc(NBLK, (size_t)nkv * BS * krb), *vq = calloc(NBLK, (size_t)nkv * BS * vrb);
    float *kf = calloc((size_t)NBLK * fstride, 4), *vf = calloc((size_t)NBLK * fstride, 4);
    int32_t bt[NBLK] = {5, 2, 7, 0, 3, 6, 1, 4};
    float x[256];
    for (int p = 0; p < n; p++)
        for (int h = 0; h < nkv; h++) {
            size_t r = (size_t)bt[p / BS] * BS * nkv + (size_t)h * BS + p % BS; /* row index */
            for (int w = 0; w < 2; w++) {
                for (int i = 0; i < hd; i++)
                    x[i] = frand(rng) * (i % 17 == 3 ? 8.0f : 1.0f);
                uint8_t *rec = (w ? vq : kq) + r * (w ? vrb : krb);
                int rot = hr_turbo_kv_rot(layer, h, w);
                hr_kv_row_store(rec, x, hd, HR_DTYPE_TURBO, w ? v2 : k2, rot);
                hr_kv_row_load((w ? vf : kf) + r * hd, rec, hd, HR_DTYPE_TURBO, w ? v2 : k2, rot);
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
                      .head_dim = hd, .k = kq, .v = vq, .kv_dtype = HR_DTYPE_TURBO,
                      .kv_bits = k2, .block_stride = (size_t)nkv * BS * krb,
                      .v_dtype = HR_DTYPE_TURBO, .v_bits = v2,
                      .v_block_stride = k2 != v2 ? (size_t)nkv * BS * vrb : 0, .layer = layer,
                      .block_size = BS, .pos = pos, .blocks = tabs,
                      .scale = 1.0f / sqrtf((float)hd), .scratch = scratch, .max_ctx = n};
    hr_attention(NULL, &a);
    hr_attn_args b = a;
    b.out = of;
    b.k = kf;
    b.v = vf;
    b.kv_dtype = HR_DTYPE_F32;
    b.block_stride = fstride;
    b.v_block_stride = 0;
    hr_attention(NULL, &b);
    for (int i = 0; i < nq * nh * hd; i++)
        if (fabsf(oq[i] - of[i]) > 1e-5f)
            fail_msg("K rate %d V rate %d G %d hd %d n %d: in place %g, dequantized f32 %g (%s)",
                     k2, v2, G, hd, n, oq[i], of[i], hr_cpu()->name);
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
    hr_rng_seed(&rng, 41);
    int cases = 0;
    for (int ri = 0; ri < 5; ri++) {
        int k2 = RATES[ri], v2 = RATES[(ri + 2) % 5];
        attn_case(&rng, k2, k2, 1, 64, 77, 1);
        attn_case(&rng, k2, v2, 4, 128, 200, 1);
        attn_case(&rng, k2, v2, 3, 64, 150, 5); /* prefill rows */
        attn_case(&rng, v2, k2, 4, 256, 70, 3);
        cases += 4;
    }
    printf("attention over TurboQuant KV within 1e-5 of the dequantized rows: %d cases (%s)\n",
           cases, hr_cpu()->name);
}

/* ---- the pool and the flag -------------------------------------------------- */

static void test_pool(void **state) {
    (void)state;
    hr_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layers = 2;
    hp.n_kv_heads = 2;
    hp.n_heads = 6;
    hp.head_dim = 64;
    hr_error err = {0};
    hr_kv kv;
    hr_kv_fmt f = {.dtype = HR_DTYPE_TURBO, .bits = 7, .vbits = 5};
    assert_int_equal(hr_kv_fmt_block_bytes(&hp, &f), 2 * 2 * 32 * ((4 + 28) + (4 + 20)));
    assert_int_equal(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 3, &err), 0);
    assert_int_equal(kv.row_bytes, 32);
    assert_int_equal(kv.vrow_bytes, 24);
    assert_int_equal(hr_kv_stride_bytes(&kv), 2 * 32 * 32);
    assert_int_equal(hr_kv_vstride_bytes(&kv), 2 * 32 * 24);
    /* rows stored and read back through the pool: each (layer, head, K/V) its rotation */
    hr_rng rng;
    hr_rng_seed(&rng, 3);
    int32_t b0 = hr_kv_alloc(&kv);
    float k[64], v[64], got[64], want[64];
    uint8_t rec[64];
    for (int i = 0; i < 64; i++) {
        k[i] = frand(&rng);
        v[i] = frand(&rng);
    }
    hr_kv_store(&kv, 1, b0, 1, 5, k, v);
    hr_kv_load_row(&kv, 1, b0, 1, 5, false, got);
    hr_kv_row_store(rec, k, 64, HR_DTYPE_TURBO, 7, hr_turbo_kv_rot(1, 1, false));
    hr_kv_row_load(want, rec, 64, HR_DTYPE_TURBO, 7, hr_turbo_kv_rot(1, 1, false));
    assert_memory_equal(got, want, sizeof got);
    hr_kv_load_row(&kv, 1, b0, 1, 5, true, got);
    hr_kv_row_store(rec, v, 64, HR_DTYPE_TURBO, 5, hr_turbo_kv_rot(1, 1, true));
    hr_kv_row_load(want, rec, 64, HR_DTYPE_TURBO, 5, hr_turbo_kv_rot(1, 1, true));
    assert_memory_equal(got, want, sizeof got);
    hr_kv_row_load(want, rec, 64, HR_DTYPE_TURBO, 5, hr_turbo_kv_rot(0, 1, true));
    assert_memory_not_equal(got, want, sizeof got); /* another layer's rotation */
    hr_kv_deinit(&kv);
    /* refusals */
    hp.head_dim = 96;
    assert_int_equal(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 3, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "--kv-quant"));
    hp.head_dim = 256;
    hp.n_heads = 64; /* 32 query heads of 256 a KV head */
    assert_int_equal(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 3, &err), HR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "not supported yet"));
    f.vown = true;
    f.vdtype = HR_DTYPE_F16;
    hp.n_heads = 6;
    hp.head_dim = 64;
    assert_int_equal(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 3, &err), HR_EINVAL);
    /* --kv-quant */
    int a, b;
    assert_int_equal(hr_kv_quant_parse(NULL, &a, &b, &err), 0);
    assert_true(a == 0 && b == 0);
    assert_int_equal(hr_kv_quant_parse("turbo", &a, &b, &err), 0);
    assert_true(a == 7 && b == 7);
    assert_int_equal(hr_kv_quant_parse("turbo:2.5", &a, &b, &err), 0);
    assert_true(a == 5 && b == 5);
    assert_int_equal(hr_kv_quant_parse("TURBO:4,3", &a, &b, &err), 0);
    assert_true(a == 8 && b == 6);
    assert_int_equal(hr_kv_quant_parse("turbo:3.5,2", &a, &b, &err), 0);
    assert_true(a == 7 && b == 4);
    const char *bad[] = {"turbo:", "turbo:5", "turbo:25", "turbo:3,", "turbo:3,4,2", "affine",
                         "turbo3", "turbo:1", "turbo:4.5", ""};
    for (size_t i = 0; i + 1 < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(hr_kv_quant_parse(bad[i], &a, &b, &err), HR_EINVAL);
        assert_non_null(strstr(err.msg, "--kv-quant"));
        assert_true(a == 0 && b == 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numpy_reference),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_attn_isas),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
