/* llama.cpp's cache types (--cache-type-k / --cache-type-v q8_0, q4_0:
 * kernels/cpu/kvquant.h's ggml rows, model/kv.h):
 *  - a row is stored as ggml's reference quantizers write it
 *    (quantize_row_q8_0_ref, quantize_row_q4_0_ref in ggml-quants.c,
 *    transcribed here on their own) and read back as dequantize_row_*,
 *    bit for bit, with hand-worked blocks;
 *  - attention read from the blocks in place (kvg_dots, kvg_axpys) gives the
 *    scalar reference's bits on every ISA, within 1e-6 of the same over the
 *    dequantized rows in double;
 *  - attention over a paged pool of these rows, K and V alike or apart
 *    (q8_0 / f16, f16 / q4_0, q4_0 / q8_0), is within 1e-5 of attention
 *    over an f32 pool of the dequantized rows;
 *  - the pool keeps K's and V's formats apart (row and block bytes, store,
 *    load, copy-on-write, the SSD tier's block bytes), and refuses a head
 *    dim that is not a multiple of 32 naming the flag. */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/ops.h"
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

static const hr_dtype TYPES[] = {HR_DTYPE_Q8_0, HR_DTYPE_Q4_0};

static float frand(hr_rng *r) { return (float)(hr_rng_uniform(r) * 2 - 1); }

/* ---- ggml's reference, transcribed on its own ------------------------------ */

/* quantize_row_q8_0_ref, then quantize_row_q4_0_ref, one block of 32 */
static void ggml_q8_0(const float *x, uint8_t *out) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float v = x[j];
        amax = fmaxf(amax, fabsf(v));
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    uint16_t h = hr_f32_to_f16(d);
    memcpy(out, &h, 2);
    for (int j = 0; j < 32; ++j)
        out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

static void ggml_q4_0(const float *x, uint8_t *out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float v = x[j];
        if (amax < fabsf(v)) {
            amax = fabsf(v);
            max = v;
        }
    }
    const float d = max / -8;
    const float id = d ? 1.0f / d : 0.0f;
    uint16_t h = hr_f32_to_f16(d);
    memcpy(out, &h, 2);
    for (int j = 0; j < 16; ++j) {
        const float x0 = x[0 + j] * id, x1 = x[16 + j] * id;
        const uint8_t xi0 = (uint8_t)(int8_t)(x0 + 8.5f) < 15 ? (uint8_t)(int8_t)(x0 + 8.5f) : 15;
        const uint8_t xi1 = (uint8_t)(int8_t)(x1 + 8.5f) < 15 ? (uint8_t)(int8_t)(x1 + 8.5f) : 15;
        out[2 + j] = (uint8_t)(xi0 | (xi1 << 4));
    }
}

/* dequantize_row_q8_0 / _q4_0 of one block */
static void ggml_deq(hr_dtype t, const uint8_t *b, float *y) {
    uint16_t h;
    memcpy(&h, b, 2);
    const float d = hr_f16_to_f32(h);
    for (int j = 0; j < 32; j++) {
        if (t == HR_DTYPE_Q8_0) {
            y[j] = (float)(int8_t)b[2 + j] * d;
        } else {
            int x = j < 16 ? (b[2 + j] & 0x0F) - 8 : (b[2 + j - 16] >> 4) - 8;
            y[j] = (float)x * d;
        }
    }
}

static void test_matches_ggml(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 7);
    uint8_t got[8 * 34], want[8 * 34];
    float x[256], y[256], yw[256];
    for (int c = 0; c < 200; c++) {
        int hd = 32 * (1 + c % 8);
        for (int i = 0; i < hd; i++) {
            switch (c % 5) {
            case 0: x[i] = frand(&rng); break;
            case 1: x[i] = frand(&rng) * (i % 11 == 3 ? 40.0f : 0.5f); break; /* outliers */
            case 2: x[i] = (float)((int)(frand(&rng) * 9)) * 0.25f; break;    /* ties */
            case 3: x[i] = i % 32 < 16 ? 0.0f : frand(&rng) * 1e-3f; break;  /* zero blocks */
            default: x[i] = frand(&rng) * 70000.0f; break;                   /* f16's range */
            }
        }
        for (int ti = 0; ti < 2; ti++) {
            hr_dtype t = TYPES[ti];
            size_t bb = t == HR_DTYPE_Q8_0 ? 34 : 18;
            assert_int_equal(hr_kv_row_size(t, hd, 0, 0), (size_t)hd / 32 * bb);
            hr_kv_row_store(got, x, hd, t, 0, 0);
            for (int b = 0; b < hd / 32; b++) {
                (t == HR_DTYPE_Q8_0 ? ggml_q8_0 : ggml_q4_0)(x + 32 * b, want + b * bb);
                ggml_deq(t, want + b * bb, yw + 32 * b);
            }
            assert_memory_equal(got, want, (size_t)hd / 32 * bb);
            hr_kv_row_load(y, got, hd, t, 0, 0);
            assert_memory_equal(y, yw, (size_t)hd * 4);
        }
    }
    /* hand-worked blocks. Q8_0: amax 2, d = 2/127 (f16 0x2408 = 0.0157470703125);
     * 1.0 * 127/2 = 63.5 rounds away from zero: 64 */
    for (int i = 0; i < 32; i++)
        x[i] = i == 0 ? -2.0f : i == 1 ? 1.0f : 0.0f;
    hr_kv_row_store(got, x, 32, HR_DTYPE_Q8_0, 0, 0);
    assert_int_equal(got[0] | got[1] << 8, 0x2408);
    assert_int_equal((int8_t)got[2], -127);
    assert_int_equal((int8_t)got[3], 64);
    assert_int_equal(got[4], 0);
    hr_kv_row_load(y, got, 32, HR_DTYPE_Q8_0, 0, 0);
    assert_true(y[0] == -127 * 0.0157470703125f && y[1] == 64 * 0.0157470703125f);
    /* Q4_0: the largest magnitude is -8, so d = 1; x + 8.5 truncates:
     * -8 -> 0, 7.4 -> 15, 0.49 -> 8, -0.6 -> 7; 9 would be 17 -> 15 */
    for (int i = 0; i < 32; i++)
        x[i] = i == 0 ? -8.0f : i == 1 ? 7.4f : i == 2 ? 0.49f : i == 16 ? -0.6f : 0.0f;
    hr_kv_row_store(got, x, 32, HR_DTYPE_Q4_0, 0, 0);
    assert_int_equal(got[0] | got[1] << 8, 0x3c00); /* 1.0 */
    assert_int_equal(got[2], 0x70);                 /* element 0 low, 16 high */
    assert_int_equal(got[3], 0x8f);
    assert_int_equal(got[4], 0x88);
    hr_kv_row_load(y, got, 32, HR_DTYPE_Q4_0, 0, 0);
    assert_true(y[0] == -8 && y[1] == 7 && y[2] == 0 && y[16] == -1);
}

/* ---- attention read in place ---------------------------------------------- */

/* The format's kernels for hr_rows_attn_check (K NULL: the scalar ones) */
typedef struct {
    int hd;
    hr_dtype t;
} gg_fmt;

static void gg_dots(const hr_cpu_kernels *K, const void *fmt, float *sc, const float *q, int nr,
                    const uint8_t *rec, size_t rb, int nk, float scale) {
    const gg_fmt *f = fmt;
    (K ? K->kvg_dots : hr__kvg_dots_scalar)(sc, HR_ROWS_LD, q, nr, rec, rb, nk, f->hd, f->t, scale);
}

static void gg_axpys(const hr_cpu_kernels *K, const void *fmt, float *o, const float *p, int nr,
                     const uint8_t *rec, size_t rb, int nk) {
    const gg_fmt *f = fmt;
    (K ? K->kvg_axpys : hr__kvg_axpys_scalar)(o, p, HR_ROWS_LD, nr, rec, rb, nk, f->hd, f->t);
}

static void test_attn_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 13);
    /* rows 1-19: passes of 4 rows, from 5 the runs widened once (every
     * row count of the AVX-512 output pass's blocks of 6), from 16 the
     * AVX-512 score pass with the keys in the lanes (blocks of 3 rows) */
    enum { NR = 19, NK = 37 };
    const int hds[] = {32, 64, 128, 256};
    static uint8_t rec[NK * 8 * 34];
    static float q[NR * 256], deq[NK * 256], p[NR * HR_ROWS_LD];
    int cases = 0;
    for (int hi = 0; hi < 4; hi++)
        for (int ti = 0; ti < 2; ti++) {
            int hd = hds[hi];
            hr_dtype t = TYPES[ti];
            size_t rb = hr_kvg_row_bytes(hd, t);
            float x[256];
            for (int j = 0; j < NK; j++) {
                for (int i = 0; i < hd; i++)
                    x[i] = frand(&rng) * (i % 13 == 5 ? 6.0f : 1.0f) + 0.3f;
                hr_kv_row_store(rec + j * rb, x, hd, t, 0, 0);
                hr_kv_row_load(deq + j * hd, rec + j * rb, hd, t, 0, 0);
            }
            for (int i = 0; i < NR * hd; i++)
                q[i] = frand(&rng);
            for (int i = 0; i < NR * HR_ROWS_LD; i++)
                p[i] = (float)hr_rng_uniform(&rng);
            for (int nr = 1; nr <= NR; nr += nr < 5 ? 2 : 1) {
                int nk = nr == 3 ? 7 : NK;
                gg_fmt f = {hd, t};
                cases += hr_rows_attn_check(&(hr_rows_attn){&f, gg_dots, gg_axpys}, q, p, rec, rb,
                                            deq, nr, nk, hd);
            }
        }
    printf("q8_0/q4_0 attention read in place: %d ISA cases == the scalar reference\n", cases);
}

/* ---- attention over a paged pool ------------------------------------------ */

#define BS HR_KV_BLOCK
#define NBLK 8

/* One layer of 2 KV heads over NBLK shuffled blocks, n positions, K of
 * format kt and V of vt: within 1e-5 of the f32 pool of its dequantized
 * rows. */
static void attn_case(hr_rng *rng, hr_dtype kt, hr_dtype vt, int G, int hd, int n, int nq) {
    int nkv = 2, nh = nkv * G;
    size_t krb = hr_kv_row_size(kt, hd, 0, 0), vrb = hr_kv_row_size(vt, hd, 0, 0);
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
                hr_dtype t = w ? vt : kt;
                uint8_t *rec = (w ? vq : kq) + r * (w ? vrb : krb);
                hr_kv_row_store(rec, x, hd, t, 0, 0);
                hr_kv_row_load((w ? vf : kf) + r * hd, rec, hd, t, 0, 0);
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
    size_t kbs = hr_kv_is_rec(kt) ? (size_t)nkv * BS * krb : fstride;
    size_t vbs = hr_kv_is_rec(vt) ? (size_t)nkv * BS * vrb : fstride;
    hr_attn_args a = {.q = q, .out = oq, .n_tok = nq, .n_heads = nh, .n_kv_heads = nkv,
                      .head_dim = hd, .k = kq, .v = vq, .kv_dtype = kt, .block_stride = kbs,
                      .v_dtype = vt, .v_block_stride = kt != vt ? vbs : 0,
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
            fail_msg("K %s V %s G %d hd %d n %d: in place %g, dequantized f32 %g (%s)",
                     hr_dtype_name(kt), hr_dtype_name(vt), G, hd, n, oq[i], of[i],
                     hr_cpu()->name);
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
    hr_rng_seed(&rng, 40);
    const hr_dtype pairs[][2] = {{HR_DTYPE_Q8_0, HR_DTYPE_Q8_0}, {HR_DTYPE_Q4_0, HR_DTYPE_Q4_0},
                                 {HR_DTYPE_Q8_0, HR_DTYPE_F16},  {HR_DTYPE_F16, HR_DTYPE_Q4_0},
                                 {HR_DTYPE_Q4_0, HR_DTYPE_Q8_0}, {HR_DTYPE_BF16, HR_DTYPE_F32}};
    int cases = 0;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        attn_case(&rng, pairs[i][0], pairs[i][1], 1, 64, 77, 1);
        attn_case(&rng, pairs[i][0], pairs[i][1], 4, 128, 200, 1);
        attn_case(&rng, pairs[i][0], pairs[i][1], 3, 64, 150, 5); /* prefill rows */
        cases += 3;
    }
    printf("attention over q8_0/q4_0 KV (K and V apart too) within 1e-5 of the dequantized "
           "rows: %d cases (%s)\n", cases, hr_cpu()->name);
}

/* ---- the pool ------------------------------------------------------------- */

static void test_pool(void **state) {
    (void)state;
    hr_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layers = 2;
    hp.n_kv_heads = 2;
    hp.head_dim = 64;
    hr_error err = {0};
    hr_kv kv;
    hr_kv_fmt f = {.dtype = HR_DTYPE_Q8_0, .vown = true, .vdtype = HR_DTYPE_F16};
    assert_int_equal(hr_kv_fmt_block_bytes(&hp, &f), 2 * 2 * 32 * (68 + 128));
    assert_int_equal(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 3, &err), 0);
    assert_int_equal(kv.row_bytes, 68);
    assert_int_equal(kv.vrow_bytes, 128);
    assert_int_equal(hr_kv_stride_bytes(&kv), 2 * 32 * 68);
    assert_int_equal(hr_kv_vstride_bytes(&kv), 2 * 32 * 128);
    hr_rng rng;
    hr_rng_seed(&rng, 5);
    int32_t b0 = hr_kv_alloc(&kv), b1 = hr_kv_alloc(&kv);
    float k[64], v[64], got[64], want[64];
    uint8_t rec[68];
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 32; s++) {
                for (int i = 0; i < 64; i++) {
                    k[i] = frand(&rng);
                    v[i] = frand(&rng) * 3;
                }
                hr_kv_store(&kv, l, b0, h, s, k, v);
                hr_kv_load_row(&kv, l, b0, h, s, false, got);
                hr_kv_row_store(rec, k, 64, HR_DTYPE_Q8_0, 0, 0);
                hr_kv_row_load(want, rec, 64, HR_DTYPE_Q8_0, 0, 0);
                assert_memory_equal(got, want, sizeof got);
                hr_kv_load_row(&kv, l, b0, h, s, true, got);
                for (int i = 0; i < 64; i++)
                    assert_true(got[i] == hr_f16_to_f32(hr_f32_to_f16(v[i])));
            }
    /* copy-on-write of 20 slots, then the block as the SSD tier stores it */
    hr_kv_copy_rows(&kv, b1, b0, 20);
    size_t bytes = hr_kv_pool_block_bytes(&kv);
    uint8_t *buf = malloc(bytes), *buf2 = malloc(bytes);
    float g1[64];
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 20; s++)
                for (int w = 0; w < 2; w++) {
                    hr_kv_load_row(&kv, l, b0, h, s, w, got);
                    hr_kv_load_row(&kv, l, b1, h, s, w, g1);
                    assert_memory_equal(got, g1, sizeof got);
                }
    assert_int_equal(hr_kv_block_read(&kv, b0, buf, &err), 0);
    int32_t b2 = hr_kv_alloc(&kv);
    assert_int_equal(hr_kv_block_write(&kv, b2, buf, &err), 0);
    assert_int_equal(hr_kv_block_read(&kv, b2, buf2, &err), 0);
    assert_memory_equal(buf, buf2, bytes);
    hr_kv_load_row(&kv, 1, b2, 1, 31, true, got);
    hr_kv_load_row(&kv, 1, b0, 1, 31, true, g1);
    assert_memory_equal(got, g1, sizeof got);
    free(buf);
    free(buf2);
    hr_kv_deinit(&kv);

    /* the flags' names; a head dim not a multiple of 32; affine with V apart */
    hr_dtype t;
    assert_int_equal(hr_kv_cache_type_pick("Q4_0", "--cache-type-v", &t, &err), 0);
    assert_int_equal(t, HR_DTYPE_Q4_0);
    assert_int_not_equal(hr_kv_cache_type_pick("q5_1", "--cache-type-v", &t, &err), 0);
    assert_non_null(strstr(err.msg, "--cache-type-v"));
    hp.head_dim = 48;
    f = (hr_kv_fmt){.dtype = HR_DTYPE_F16, .vown = true, .vdtype = HR_DTYPE_Q4_0};
    assert_int_not_equal(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 2, &err), 0);
    assert_non_null(strstr(err.msg, "--cache-type-v"));
    hp.head_dim = 64;
    f = (hr_kv_fmt){.dtype = HR_DTYPE_AFFINE, .bits = 4, .group = 64, .vown = true,
                    .vdtype = HR_DTYPE_F16};
    assert_int_not_equal(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 2, &err), 0);
    assert_non_null(strstr(err.msg, "--kv-bits"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_ggml),
        cmocka_unit_test(test_attn_isas),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
