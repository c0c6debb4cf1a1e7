/* Attention kernels: every ISA's grouped-heads kernel (attn_heads), on a
 * KV pool of F32, F16 or BF16, gives
 * bit for bit what the per-head path gives (its ISA's dot, softmax, axpy
 * key by key) over a paged, shuffled KV cache, for GQA group sizes, head
 * dims, key counts and a softcap; and that path agrees with a double
 * precision reference. Every ISA's widen (f16/bf16 to f32) is exact; every ISA's attn_dots and attn_axpys (the grouped
 * path of the other pools and ISAs) equal its dot and axpy row by row. */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/gemm_q.h"
#include "kernels/cpu/ops.h"
#include "sample/rng.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BS 32
#define NBLK 8

static float frand(hr_rng *r) { return (float)(hr_rng_uniform(r) * 2 - 1); }

/* the per-head path of ops.c, with K's dot and axpy */
static void per_head(const hr_cpu_kernels *K, const float *q, float *out, int G, int hd,
                     const float *k, const float *v, size_t stride, int kvh, const int32_t *bt,
                     int start, int n, float scale, float softcap, float *sc) {
    for (int g = 0; g < G; g++) {
        for (int j = 0; j < n; j++) {
            int p = start + j;
            sc[j] = K->dot(q + (size_t)g * hd,
                           k + (size_t)bt[p / BS] * stride + ((size_t)kvh * BS + p % BS) * hd,
                           hd) * scale;
        }
        if (softcap > 0)
            hr_softcap(sc, n, softcap);
        hr_softmax(sc, n);
        float *o = out + (size_t)g * hd;
        memset(o, 0, (size_t)hd * sizeof *o);
        for (int j = 0; j < n; j++) {
            int p = start + j;
            K->axpy(o, sc[j],
                    v + (size_t)bt[p / BS] * stride + ((size_t)kvh * BS + p % BS) * hd, hd);
        }
    }
}

/* One task of nq tokens (G heads each) through attn_heads against the
 * per-head path token by token (bits), and the last token against double.
 * Token i attends to [start + i, +n) with slide (a sliding window), else to
 * [start, +n + i) (causal, consecutive positions). */
static int tile_case(hr_rng *rng, const hr_cpu_kernels *K, int G, int hd, const float *k,
                     const float *v, const void *kd, const void *vd, hr_dtype kt, size_t stride,
                     const int32_t *bt, int n, int cap, int nq, int slide) {
    int st[HR_ATTN_TILE], nn[HR_ATTN_TILE], start = n < 100 ? 11 : 0, kvh = 1, ldq = G * hd;
    for (int i = 0; i < nq; i++) {
        st[i] = start + (slide ? i : 0);
        nn[i] = n + (slide ? 0 : i);
    }
    float softcap = cap ? 5.0f : 0.0f, scale = 1.0f / sqrtf((float)hd);
    float *q = malloc((size_t)nq * ldq * sizeof *q);
    float *o1 = malloc((size_t)nq * ldq * sizeof *o1);
    float *o2 = malloc((size_t)nq * ldq * sizeof *o2);
    float *sc = malloc((size_t)nq * G * (n + HR_ATTN_TILE) * sizeof *sc);
    float *sc2 = malloc(256 * sizeof *sc2);
    for (int i = 0; i < nq * ldq; i++)
        q[i] = frand(rng) * 3;
    hr_attn_tile T = {.q = q, .out = o1, .ldq = ldq, .nq = nq, .G = G, .hd = hd, .k = kd,
                      .v = vd, .kv_dtype = kt, .stride = stride, .bs = BS, .kvh = kvh,
                      .next_kvh = n % 2 ? 0 : -1, .bt = bt, .start = st, .n = nn,
                      .scale = scale, .softcap = softcap, .sc = sc};
    K->attn_heads(&T);
    for (int i = 0; i < nq; i++)
        per_head(K, q + (size_t)i * ldq, o2 + (size_t)i * ldq, G, hd, k, v, stride, kvh, bt,
                 st[i], nn[i], scale, softcap, sc2);
    if (memcmp(o1, o2, (size_t)nq * ldq * sizeof *o1))
        fail_msg("%s: %s KV G %d hd %d n %d softcap %g tokens %d%s differs from per-head",
                 K->name, hr_dtype_name(kt), G, hd, n, softcap, nq, slide ? " sliding" : "");
    /* and the last token against the reference in double */
    int i = nq - 1;
    const float *qi = q + (size_t)i * ldq;
    for (int g = 0; g < G; g++) {
        double s[256], mx = -INFINITY, sum = 0;
        for (int j = 0; j < nn[i]; j++) {
            int p = st[i] + j;
            const float *kj = k + (size_t)bt[p / BS] * stride + ((size_t)kvh * BS + p % BS) * hd;
            double dot = 0;
            for (int t = 0; t < hd; t++)
                dot += (double)qi[g * hd + t] * kj[t];
            dot *= scale;
            if (cap)
                dot = tanh(dot / softcap) * softcap;
            s[j] = dot;
            mx = fmax(mx, dot);
        }
        for (int j = 0; j < nn[i]; j++)
            sum += (s[j] = exp(s[j] - mx));
        for (int t = 0; t < hd; t++) {
            double o = 0;
            for (int j = 0; j < nn[i]; j++) {
                int p = st[i] + j;
                o += s[j] / sum * v[(size_t)bt[p / BS] * stride + ((size_t)kvh * BS + p % BS) * hd + t];
            }
            assert_true(fabs(o - o1[(size_t)i * ldq + g * hd + t]) < 1e-5);
        }
    }
    free(q);
    free(o1);
    free(o2);
    free(sc);
    free(sc2);
    return 1;
}

static void test_heads_equal_per_head(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 83);
    static const int Gs[] = {1, 2, 4, 5};
    static const int hds[] = {64, 80, 128};
    static const int ns[] = {1, 3, 4, 37, 100};
    int n_kv = 2, checked = 0;
    int32_t bt[NBLK] = {5, 2, 7, 0, 3, 6, 1, 4}; /* a shuffled block table */
    for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        if (!K || !K->attn_heads)
            continue;
        for (size_t hi = 0; hi < 3; hi++) {
            int hd = hds[hi];
            size_t stride = (size_t)n_kv * BS * hd;
            for (int dt = 0; dt < 3; dt++) {
                /* the pool's bytes in dtype kt; k, v their f32 values */
                hr_dtype kt = dt == 0 ? HR_DTYPE_F32 : dt == 1 ? HR_DTYPE_F16 : HR_DTYPE_BF16;
                float *k = malloc(NBLK * stride * sizeof *k), *v = malloc(NBLK * stride * sizeof *v);
                uint16_t *kh = malloc(NBLK * stride * 2), *vh = malloc(NBLK * stride * 2);
                for (size_t i = 0; i < NBLK * stride; i++) {
                    k[i] = frand(&rng);
                    v[i] = frand(&rng);
                    if (kt == HR_DTYPE_F16) {
                        k[i] = hr_f16_to_f32(kh[i] = hr_f32_to_f16(k[i]));
                        v[i] = hr_f16_to_f32(vh[i] = hr_f32_to_f16(v[i]));
                    } else if (kt == HR_DTYPE_BF16) {
                        k[i] = hr_bf16_to_f32(kh[i] = hr_f32_to_bf16(k[i]));
                        v[i] = hr_bf16_to_f32(vh[i] = hr_f32_to_bf16(v[i]));
                    }
                }
                const void *kd = kt == HR_DTYPE_F32 ? (const void *)k : kh;
                const void *vd = kt == HR_DTYPE_F32 ? (const void *)v : vh;
                for (size_t gi = 0; gi < 4; gi++)
                    for (size_t ni = 0; ni < 5; ni++)
                        for (int cap = 0; cap < 2; cap++)
                            for (int nq = 1; nq <= HR_ATTN_TILE; nq++)
                                for (int slide = 0; slide < 2; slide++) {
                                    int G = Gs[gi];
                                    checked += tile_case(&rng, K, G, hd, k, v, kd, vd, kt, stride,
                                                         bt, ns[ni], cap, nq, slide);
                                }
                free(k);
                free(v);
                free(kh);
                free(vh);
            }
        }
    }
    printf("attention: %d ISA x KV dtype x group x head dim x keys x tokens per task cases "
           "equal the per-head path\n",
           checked);
}

/* Every ISA's softmax against one computed in double: each probability
 * within 8e-7 relative (a few ulp) plus 1e-30 absolute, on random scores
 * of every length 1..70 and some longer, with wide spreads (underflowing
 * terms), ties and -inf entries. */
/* attn_dots / attn_axpys == dot / axpy row by row, bits, every ISA that
 * has them: head dims with and without a multiple of 8 (the tails), runs
 * of keys around the 4-key step */
static void test_dots_axpys(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 7);
    enum { NR = 5, NK = 11, MAXHD = 136 }; /* rows: two pairs and one alone */
    static float q[NR * MAXHD], k[NK * MAXHD], sc[NR * 16], ref[NR * 16], o[NR * MAXHD],
        oref[NR * MAXHD];
    int cases = 0;
    for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        if (!K || !K->attn_dots)
            continue;
        assert_non_null(K->attn_axpys);
        const int hds[] = {8, 20, 64, 96, 128, 136};
        for (int hi = 0; hi < 6; hi++)
            for (int nk = 1; nk <= NK; nk += 3) {
                int hd = hds[hi];
                for (int i = 0; i < NR * MAXHD; i++)
                    q[i] = frand(&rng), o[i] = oref[i] = frand(&rng);
                for (int i = 0; i < NK * MAXHD; i++)
                    k[i] = frand(&rng) * 3;
                for (int i = 0; i < NR * 16; i++)
                    sc[i] = ref[i] = frand(&rng);
                K->attn_dots(sc, 16, q, NR, k, nk, hd, 0.125f);
                for (int r = 0; r < NR; r++)
                    for (int j = 0; j < nk; j++)
                        ref[r * 16 + j] = K->dot(q + r * hd, k + j * hd, hd) * 0.125f;
                assert_memory_equal(sc, ref, sizeof sc);
                K->attn_axpys(o, ref, 16, NR, k, nk, hd);
                for (int r = 0; r < NR; r++)
                    for (int j = 0; j < nk; j++)
                        K->axpy(oref + r * hd, ref[r * 16 + j], k + j * hd, hd);
                assert_memory_equal(o, oref, sizeof o);
                cases++;
            }
    }
    printf("attn_dots, attn_axpys == dot, axpy: %d cases\n", cases);
}

static void test_softmax(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 5);
    float x[700], y[700];
    double e[700];
    for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        if (!K)
            continue;
        double worst = 0;
        for (int n = 1; n <= 700; n += n < 70 ? 1 : 97)
            for (int spread = 0; spread < 3; spread++) {
                float amp = spread == 0 ? 1.0f : spread == 1 ? 30.0f : 300.0f;
                for (int i = 0; i < n; i++)
                    x[i] = amp * (float)(hr_rng_uniform(&rng) * 2 - 1);
                if (n > 3) {
                    x[1] = -INFINITY;
                    x[2] = x[0];
                }
                memcpy(y, x, (size_t)n * sizeof *x);
                K->softmax(y, n);
                float mx = -INFINITY;
                double sum = 0;
                for (int i = 0; i < n; i++)
                    mx = x[i] > mx ? x[i] : mx;
                for (int i = 0; i < n; i++) /* of the f32 difference, as computed */
                    sum += e[i] = exp((double)(x[i] - mx));
                for (int i = 0; i < n; i++) {
                    double ref = e[i] / sum, err = fabs(y[i] - ref);
                    if (err > 8e-7 * ref + 1e-30)
                        fail_msg("%s softmax n=%d [%d] = %.9g, double %.9g", K->name, n, i,
                                 y[i], ref);
                    if (ref > 1e-30)
                        worst = fmax(worst, err / ref);
                }
            }
        printf("%-7s softmax: worst relative error %.2e\n", K->name, worst);
    }
}

/* The sampler's reductions on every ISA: max gives the scalar value (NaNs
 * never win, -inf when there is nothing else); exp_sum's sum is within
 * 3e-7 relative of a sum in double and each stored term within 3e-7
 * relative plus its float argument's rounding (or below FLT_MIN where it
 * is 0), for lengths around the
 * vector width, wide spreads, -inf entries and a temperature scale. */
static void test_max_exp_sum(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 29);
    float x[1000], d[1000];
    for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        if (!K)
            continue;
        for (int n = 1; n <= 1000; n += n < 40 ? 1 : 137)
            for (int spread = 0; spread < 3; spread++) {
                float amp = spread == 0 ? 1.0f : spread == 1 ? 30.0f : 300.0f;
                for (int i = 0; i < n; i++)
                    x[i] = amp * (float)(hr_rng_uniform(&rng) * 2 - 1);
                if (n > 3)
                    x[n / 2] = x[n - 1] = -INFINITY;
                float mx = hr__max_scalar(x, n);
                assert_true(K->max(x, n) == mx);
                assert_int_equal(K->argmax(x, n), hr__argmax_scalar(x, n));
                assert_true(x[K->argmax(x, n)] == mx);
                if (n > 5) { /* a tie: the first wins */
                    float keep = x[n - 2];
                    x[n - 2] = mx;
                    assert_int_equal(K->argmax(x, n), hr__argmax_scalar(x, n));
                    x[n - 2] = keep;
                }
                float s = spread == 2 ? 1.0f / 0.7f : 1.0f;
                double want = 0, got = K->exp_sum(d, x, n, mx, s);
                for (int i = 0; i < n; i++) {
                    double e = exp(((double)x[i] - mx) * s);
                    want += e;
                    /* plus the rounding of the float argument (x - m) * s */
                    double tol = (3e-7 + 1.2e-7 * fabs(((double)x[i] - mx) * s)) * e;
                    if (e >= FLT_MIN ? fabs(d[i] - e) > tol : d[i] > FLT_MIN)
                        fail_msg("%s exp_sum n=%d term %d: %.9g, double %.9g", K->name, n, i,
                                 d[i], e);
                }
                if (fabs(got - want) > 3e-7 * want)
                    fail_msg("%s exp_sum n=%d: %.12g, double %.12g", K->name, n, got, want);
                assert_true(K->exp_sum(NULL, x, n, mx, s) == got);
            }
        x[0] = NAN, x[1] = -INFINITY, x[2] = NAN;
        assert_true(K->max(x, 3) == -INFINITY);
        assert_int_equal(K->argmax(x, 3), 1); /* NaNs never win */
        assert_int_equal(K->argmax(x, 1), 0); /* all NaN */
        assert_int_equal(K->argmax(x, 0), 0);
        x[1] = -2.0f;
        for (int n = 3; n < 40; n++)
            x[n] = NAN;
        assert_true(K->max(x, 40) == -2.0f);
        assert_int_equal(K->argmax(x, 40), 1);
        assert_true(K->max(x, 0) == -INFINITY);
    }
}

/* Every ISA's KV store conversion (to_half) gives the scalar bits, which
 * are hr_f32_to_f16 of the value clamped to +-65504 and hr_f32_to_bf16:
 * normal, denormal, tiny, huge, infinite and signed-zero inputs, every
 * length (vector body and tail). */
static void test_to_half(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 17);
    float x[67];
    uint16_t a[67], b[67];
    static const float special[] = {0.0f, -0.0f, 1e-40f, -3e-39f, 6e-8f, 3e-5f, 65504.0f,
                                    65520.0f, -1e6f, INFINITY, -INFINITY, 1.00390625f};
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < 67; i++) {
            float e = (float)(hr_rng_uniform(&rng) * 40 - 30);
            x[i] = (float)(hr_rng_uniform(&rng) * 2 - 1) * powf(2.0f, e);
            if (i % 7 == 0)
                x[i] = special[(rep + i) % 12];
        }
        for (int dt = 0; dt < 2; dt++) {
            hr_dtype t = dt ? HR_DTYPE_BF16 : HR_DTYPE_F16;
            int n = 1 + rep % 67;
            hr__to_half_scalar(a, x, n, t);
            for (int i = 0; i < n; i++) {
                uint16_t want = t == HR_DTYPE_F16
                                    ? hr_f32_to_f16(fminf(fmaxf(x[i], -65504.0f), 65504.0f))
                                    : hr_f32_to_bf16(x[i]);
                assert_int_equal(a[i], want);
            }
            for (int isa = 0; isa < HR_ISA_COUNT; isa++) {
                const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
                if (!K)
                    continue;
                K->to_half(b, x, n, t);
                if (memcmp(a, b, (size_t)n * 2))
                    fail_msg("%s to_half %s n=%d differs from scalar", K->name,
                             hr_dtype_name(t), n);
                float w[67];
                K->widen(w, a, (size_t)n, t); /* back: exact, every ISA */
                for (int i = 0; i < n; i++) {
                    float want = t == HR_DTYPE_F16 ? hr_f16_to_f32(a[i]) : hr_bf16_to_f32(a[i]);
                    assert_memory_equal(&w[i], &want, 4);
                }
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_heads_equal_per_head),
        cmocka_unit_test(test_dots_axpys),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_max_exp_sum),
        cmocka_unit_test(test_to_half),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
