/* bench_kernels: the two decode kernels alone, reading from memory, beside
 * the machine's plain read (hr_membw) on the same threads:
 *   bench_kernels matvec TYPE M K [THREADS]   one-row products with M x K
 *       weights of a GGUF TYPE (q8_0, q4_0, q4_k, ...) or MLX affine ones
 *       (a4g64: 4 bits, groups of 64, bf16 scales; 24-bit activations
 *       unless HEARTH_QUANT_ACT=int8) in the x16 layout, through enough
 *       copies (below) that each product reads memory
 *   bench_kernels attn CTX [THREADS] [HEADS] [KV_HEADS] [HEAD_DIM] [KV]
 *       one query token's attention over CTX keys and values (a paged KV
 *       cache) of KV: f16 (default), f32, bf16, or aB / aBgG (quantized
 *       KV rows, mlx-lm's affine format: B bits, groups of G, default 64),
 *       or q8_0 / q4_0 (llama.cpp's cache types), or tB (TurboQuant rows at
 *       B bits a channel: t4, t3.5, t2.5, ...), through enough layers
 *       (below)
 *   bench_kernels gemm TYPE M K N
 *       the float-activation product (hr_cpu_kernels.gemm) of N rows with
 *       M x K weights of TYPE (f32, bf16, f16 or a GGUF type) in every
 *       vector table this CPU runs, one thread, the tables alternating pass
 *       by pass (the same load for each), through enough copies (below);
 *       the median of the passes' thread CPU time per product
 *   bench_kernels kvattn KV [KEYS] [ROWS] [HEAD_DIM] [RUN]
 *       the quantized KV pools' attention kernels alone (kvq_ / kvg_ /
 *       turbo_ dots and axpys, what attention runs a block run at a time)
 *       of KV (aB[gG], q8_0, q4_0, tB; f32: attn_dots / attn_axpys over
 *       float rows, what f16 and bf16 pools run once widened) over KEYS
 *       records (default 1024: in L2) for ROWS query rows (default 3: a GQA
 *       group of 3, one token), RUN keys a call (default all; attention's
 *       calls are a block's, 32), in every vector table this CPU runs, one
 *       thread, the tables alternating pass by pass; the median thread CPU
 *       time per key
 *   bench_kernels fma
 *       this core's rate of 8-lane fused multiply-adds (12 independent
 *       chains, AVX2 + FMA), one thread: the median of 11 runs of 20M
 *       each. The ceiling of the kernels that are bound by their
 *       arithmetic rather than their bytes (a virtual core may run well
 *       under the chip's 2 a cycle: docs/kv-quant.md)
 *   bench_kernels rows D
 *       the row kernels (rmsnorm, softmax, silu_mul, argmax, exp_sum, dot,
 *       axpy) over D floats in L1, each vector table alternating, one
 *       thread: the median thread CPU time per call
 * Prints the best of 5 passes as GB/s and as % of the plain read. The
 * weights and K/V are random: the kernels' speed does not depend on the
 * values. The copies span 256 MiB or four times the last-level cache,
 * whichever is more: with 256 MiB on a 300 MiB L3 (a 2-vCPU Xeon) most of
 * each pass came from L3, and a Q4_0 matvec read 101-105% of the plain
 * read against 87-96% with 2 GiB. HEARTH_BENCH_FOOTPRINT_MB=N sets N MiB;
 * =1 keeps the copies in L2 (and runs 256 times the passes): the kernels'
 * own speed, without memory. */
#include "core/bigmem.h"
#include "core/pool.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"
#include "kernels/cpu/membw.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "model/kv.h"
#include "sample/rng.h"

#include <stdio.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* bytes the copies span (from memory: main sets it past the LLC), and
 * the passes over them */
static size_t g_footprint = (size_t)256 << 20;
static int g_passes = 5;
static hr_quant_act g_qa; /* $HEARTH_QUANT_ACT, as a model load reads it */
#define FOOTPRINT g_footprint
#define PASSES g_passes

static float frand(hr_rng *r) { return (float)(hr_rng_uniform(r) * 2 - 1); }

/* a dtype by its ggml name, any case; -1 when none */
static int dtype_named(const char *name) {
    for (int t = 0; t < HR_DTYPE_COUNT; t++)
        if (!strcasecmp(hr_dtype_name((hr_dtype)t), name))
            return t;
    return -1;
}

static int usage(void) {
    fprintf(stderr, "usage: bench_kernels matvec TYPE M K [THREADS] | "
                    "attn CTX [THREADS] [HEADS] [KV_HEADS] [HEAD_DIM] "
                    "[f16|f32|bf16|aB[gG]|q8_0|q4_0|tB] | gemm TYPE M K N | rows D | "
                    "kvattn KV [KEYS] [ROWS] [HEAD_DIM] [RUN] | fma\n");
    return 2;
}

static void report(const char *what, double bytes, double best, hr_pool *pool) {
    double bw = hr_membw(pool, (size_t)1 << 30, 7);
    printf("%s: %.1f us each, %.2f GB/s, %.1f%% of a plain read (%.2f GB/s) on %d threads\n",
           what, best * 1e6, bytes / best / 1e9, 100.0 * bytes / best / bw, bw / 1e9,
           hr_pool_size(pool));
}

static int matvec(int argc, char **argv, hr_rng *rng) {
    if (argc < 5)
        return usage();
    int t = dtype_named(argv[2]), bits = 0, group = 0;
    if (sscanf(argv[2], "a%dg%d", &bits, &group) == 2)
        t = HR_DTYPE_AFFINE;
    int m = atoi(argv[3]), k = atoi(argv[4]), nth = argc > 5 ? atoi(argv[5]) : 2;
    hr_tensor w = {.name = "w", .dtype = (hr_dtype)t, .ndim = 2, .shape = {m, k},
                   .q = {.bits = bits, .group = group, .sdtype = HR_DTYPE_BF16}};
    if (t < 0 || m <= 0 || k <= 0 || (t == HR_DTYPE_AFFINE && (group <= 0 || k % group)) ||
        !hr_matmul_supports(w.dtype) || !hr_matmul_packed_bytes(&w, g_qa)) {
        fprintf(stderr, "bench_kernels: no x16 kernel here for %s %d x %d\n", argv[2], m, k);
        return 1;
    }
    size_t rb = hr_tensor_row_bytes(&w), bytes = hr_matmul_packed_bytes(&w, g_qa);
    size_t ng = t == HR_DTYPE_AFFINE ? (size_t)m * (k / group) : 1;
    uint8_t *rows = malloc((size_t)m * rb);
    uint16_t *sc = malloc(ng * 2), *bi = malloc(ng * 2); /* affine: bf16 */
    float *x = malloc((size_t)k * sizeof *x), *y = malloc((size_t)m * sizeof *y);
    float *fs = malloc((size_t)k * sizeof *fs), *fb = malloc((size_t)k * sizeof *fb);
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < k; j++)
            x[j] = frand(rng);
        if (t != HR_DTYPE_AFFINE) {
            hr_quant_gguf_row(w.dtype, x, k, rows + (size_t)i * rb);
            continue;
        }
        hr_quant_affine_row(x, k, bits, group, rows + (size_t)i * rb, fs, fb);
        for (int g = 0; g < k / group; g++) {
            sc[(size_t)i * (k / group) + g] = hr_f32_to_bf16(fs[g]);
            bi[(size_t)i * (k / group) + g] = hr_f32_to_bf16(fb[g]);
        }
    }
    w.q.scales = sc;
    w.q.biases = bi;
    w.data = rows;
    w.nbytes = (size_t)m * rb;
    size_t stride = (bytes + 63) & ~(size_t)63;
    int copies = (int)(FOOTPRINT / stride) + 1;
    uint8_t *packed = hr_big_alloc(stride * copies);
    hr_tensor p = w;
    hr_matmul_pack(&p, packed, g_qa);
    for (int c = 1; c < copies; c++)
        memcpy(packed + c * stride, packed, bytes);
    hr_pool *pool = hr_pool_new(nth);
    hr_matmul_reserve(pool, 1, k);
    double best = 1e30;
    for (int r = 0; r < PASSES; r++) {
        double t0 = hr_now();
        for (int c = 0; c < copies; c++) {
            p.data = packed + c * stride;
            hr_matmul(pool, y, m, x, k, 1, &p, NULL);
        }
        double dt = (hr_now() - t0) / copies;
        best = dt < best ? dt : best;
    }
    char what[96];
    snprintf(what, sizeof what, "matvec %s %d x %d (%.2f MB)", argv[2], m, k, bytes / 1e6);
    report(what, (double)bytes, best, pool);
    hr_pool_free(pool);
    hr_big_free(packed, stride * copies);
    free(rows);
    free(sc);
    free(bi);
    free(fs);
    free(fb);
    free(x);
    free(y);
    return 0;
}

static int attn(int argc, char **argv, hr_rng *rng) {
    if (argc < 3)
        return usage();
    int ctx = atoi(argv[2]), nth = argc > 3 ? atoi(argv[3]) : 2;
    int H = argc > 4 ? atoi(argv[4]) : 16, KVH = argc > 5 ? atoi(argv[5]) : 8;
    int hd = argc > 6 ? atoi(argv[6]) : 128;
    const char *kvname = argc > 7 ? argv[7] : "f16";
    hr_dtype dt = HR_DTYPE_F16;
    int bits = 0, group = 64;
    if (!strcmp(kvname, "f32"))
        dt = HR_DTYPE_F32;
    else if (!strcmp(kvname, "bf16"))
        dt = HR_DTYPE_BF16;
    else if (kvname[0] == 'a') {
        dt = HR_DTYPE_AFFINE;
        bits = atoi(kvname + 1);
        const char *g = strchr(kvname, 'g');
        group = g ? atoi(g + 1) : 64;
        if (!hr_kvq_bits_ok(bits) || !hr_kvq_group_ok(group) || hd % group)
            return usage();
    } else if (!strcmp(kvname, "q8_0") || !strcmp(kvname, "q4_0")) { /* llama.cpp's */
        dt = kvname[1] == '8' ? HR_DTYPE_Q8_0 : HR_DTYPE_Q4_0;
        if (hd % 32)
            return usage();
    } else if (kvname[0] == 't') { /* TurboQuant: t3.5 (bits a channel) */
        dt = HR_DTYPE_TURBO;
        bits = (int)(atof(kvname + 1) * 2 + 0.5);
        group = 0; /* every row under one rotation: the speed does not depend on it */
        if (!hr_turbo_kv_ok(hd, bits))
            return usage();
    } else if (strcmp(kvname, "f16"))
        return usage();
    if (ctx <= 0 || KVH <= 0 || H % KVH || hd % 16 || hd > HR_ATTN_MAX_HEAD_DIM)
        return usage();
    int nb = (ctx + HR_KV_BLOCK - 1) / HR_KV_BLOCK;
    /* bytes of a row; the block stride in elements (quantized: bytes) */
    size_t row = hr_kv_row_size(dt, hd, bits, group);
    size_t bstride = (size_t)KVH * HR_KV_BLOCK * row, layer = bstride * nb; /* bytes */
    size_t stride = hr_kv_is_rec(dt) ? bstride : bstride / (dt == HR_DTYPE_F32 ? 4 : 2);
    int layers = (int)(FOOTPRINT / (2 * layer)) + 1;
    uint8_t *k = hr_big_alloc(layer * layers), *v = hr_big_alloc(layer * layers);
    float *x = malloc((size_t)hd * sizeof *x);
    for (size_t r = 0; r < layer / row; r++)
        for (int w = 0; w < 2; w++) {
            for (int i = 0; i < hd; i++)
                x[i] = frand(rng);
            hr_kv_row_store((w ? v : k) + r * row, x, hd, dt, bits, group);
        }
    free(x);
    for (int l = 1; l < layers; l++) { /* copies, as the matvec's */
        memcpy(k + l * layer, k, layer);
        memcpy(v + l * layer, v, layer);
    }
    int32_t *bt = malloc((size_t)nb * sizeof *bt), pos = ctx - 1;
    for (int i = 0; i < nb; i++)
        bt[i] = i;
    const int32_t *blocks[1] = {bt};
    float *q = malloc((size_t)H * hd * sizeof *q), *out = malloc((size_t)H * hd * sizeof *out);
    for (int i = 0; i < H * hd; i++)
        q[i] = frand(rng);
    hr_pool *pool = hr_pool_new(nth);
    float *scores = malloc((size_t)hr_pool_size(pool) * HR_ATTN_TILE * (H / KVH) * ctx *
                           sizeof *scores);
    double best = 1e30;
    for (int r = 0; r < PASSES; r++) {
        double t0 = hr_now();
        for (int l = 0; l < layers; l++) {
            hr_attn_args a = {.q = q, .out = out, .n_tok = 1, .n_heads = H, .n_kv_heads = KVH,
                              .head_dim = hd, .k = k + l * layer, .v = v + l * layer,
                              .kv_dtype = dt, .kv_bits = bits, .kv_group = group,
                              .block_stride = stride,
                              .block_size = HR_KV_BLOCK, .pos = &pos, .blocks = blocks,
                              .scale = 0.1f, .scratch = scores, .max_ctx = ctx};
            hr_attention(pool, &a);
        }
        double dt = (hr_now() - t0) / layers;
        best = dt < best ? dt : best;
    }
    char what[128];
    snprintf(what, sizeof what, "attention %d keys, %d/%d heads of %d, %s (%.2f MB a layer, %.1f us)",
             ctx, H, KVH, hd, kvname, 2.0 * layer / 1e6, best * 1e6);
    report(what, 2.0 * layer, best, pool);
    hr_pool_free(pool);
    hr_big_free(k, layer * layers);
    hr_big_free(v, layer * layers);
    free(bt);
    free(q);
    free(out);
    free(scores);
    return 0;
}

/* ---- gemm: the vector tables side by side --------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int gemm(int argc, char **argv, hr_rng *rng) {
    if (argc < 6)
        return usage();
    int t = dtype_named(argv[2]), m = atoi(argv[3]), k = atoi(argv[4]), n = atoi(argv[5]);
    if (t < 0 || m <= 0 || k <= 0 || n <= 0 || !hr_cpu_isa(HR_ISA_AVX2) ||
        !hr_cpu_isa(HR_ISA_AVX2)->gemm[t]) {
        fprintf(stderr, "bench_kernels: no gemm here for %s %d x %d\n", argv[2], m, k);
        return 1;
    }
    hr_tensor w = {.name = "w", .dtype = (hr_dtype)t, .ndim = 2, .shape = {m, k}};
    size_t rb = hr_tensor_row_bytes(&w), bytes = (size_t)m * rb;
    if (!rb) {
        fprintf(stderr, "bench_kernels: %s rows of %d\n", argv[2], k);
        return 1;
    }
    float *x = malloc((size_t)n * k * sizeof *x), *y = malloc((size_t)n * m * sizeof *y);
    uint8_t *rows = malloc(bytes);
    for (size_t i = 0; i < (size_t)n * k; i++)
        x[i] = frand(rng);
    float *wr = malloc((size_t)k * sizeof *wr);
    for (int i = 0; i < m; i++) {
        uint8_t *r = rows + (size_t)i * rb;
        for (int j = 0; j < k; j++)
            wr[j] = frand(rng);
        for (int j = 0; j < k && (t == HR_DTYPE_BF16 || t == HR_DTYPE_F16); j++)
            ((uint16_t *)r)[j] = t == HR_DTYPE_BF16 ? hr_f32_to_bf16(wr[j]) : hr_f32_to_f16(wr[j]);
        if (t == HR_DTYPE_F32)
            memcpy(r, wr, rb);
        else if (t != HR_DTYPE_BF16 && t != HR_DTYPE_F16)
            hr_quant_gguf_row(w.dtype, wr, k, r);
    }
    free(wr);
    size_t stride = (bytes + 63) & ~(size_t)63;
    int copies = (int)(FOOTPRINT / stride) + 1;
    uint8_t *w_all = hr_big_alloc(stride * copies);
    for (int c = 0; c < copies; c++)
        memcpy(w_all + c * stride, rows, bytes);
    const hr_cpu_kernels *tab[HR_ISA_COUNT];
    int nt = 0;
    for (int isa = HR_ISA_AVX2; isa < HR_ISA_COUNT; isa++)
        if (hr_cpu_isa((hr_isa)isa) && hr_cpu_isa((hr_isa)isa)->gemm[t])
            tab[nt++] = hr_cpu_isa((hr_isa)isa);
    double *dt = malloc(sizeof *dt * nt * PASSES);
    for (int r = 0; r < PASSES; r++)
        for (int i = 0; i < nt; i++) {
            double t0 = hr_thread_cpu();
            for (int c = 0; c < copies; c++) {
                w.data = w_all + c * stride;
                tab[i]->gemm[t](y, m, x, k, n, &w, 0, m);
            }
            dt[i * PASSES + r] = (hr_thread_cpu() - t0) / copies;
        }
    printf("gemm %s %d x %d, %d rows (%.2f MB), 1 thread, median of %d passes:", argv[2], m, k,
           n, bytes / 1e6, PASSES);
    for (int i = 0; i < nt; i++) {
        qsort(dt + i * PASSES, PASSES, sizeof *dt, cmp_double);
        printf("  %s %.1f us", tab[i]->name, dt[i * PASSES + PASSES / 2] * 1e6);
    }
    printf("\n");
    hr_big_free(w_all, stride * copies);
    free(dt);
    free(rows);
    free(x);
    free(y);
    return 0;
}

/* ---- rows: the row kernels of the vector tables side by side -------------- */

enum { R_NORM, R_SOFTMAX, R_SILU, R_ARGMAX, R_EXPSUM, R_DOT, R_AXPY, R_N };
static const char *const r_name[R_N] = {"rmsnorm", "softmax", "silu_mul", "argmax",
                                        "exp_sum", "dot", "axpy"};

static double row_call(const hr_cpu_kernels *K, int op, float *y, float *x, const float *w,
                       int d) {
    switch (op) {
    case R_NORM: K->rmsnorm(y, x, w, 0.0f, d, 1e-6f); return y[0];
    case R_SOFTMAX: memcpy(y, x, (size_t)d * sizeof *y); K->softmax(y, d); return y[0];
    case R_SILU: memcpy(y, x, (size_t)d * sizeof *y); K->silu_mul(y, w, d); return y[0];
    case R_ARGMAX: return K->argmax(x, d);
    case R_EXPSUM: return K->exp_sum(y, w, d, 1.0f, 1.0f);
    case R_DOT: return K->dot(x, w, d);
    default: K->axpy(y, 1e-3f, x, d); return y[0];
    }
}

static int rows(int argc, char **argv, hr_rng *rng) {
    int d = argc > 2 ? atoi(argv[2]) : 0;
    if (d <= 0 || d > 1 << 20)
        return usage();
    size_t nb = ((size_t)d * sizeof(float) + 63) & ~(size_t)63; /* rows 64-byte aligned, */
    float *x = aligned_alloc(64, nb), *y = aligned_alloc(64, nb), /* as the arena's are */
        *w = aligned_alloc(64, nb);
    for (int i = 0; i < d; i++) {
        x[i] = frand(rng);
        y[i] = 0;
        w[i] = frand(rng) - 1; /* <= 1 = exp_sum's max */
    }
    enum { CALLS = 64, NP = 101 };
    double dt[NP], sink = 0;
    printf("row kernels over %d floats, 1 thread, median of %d passes of %d calls (ns a call):\n",
           d, NP, CALLS);
    for (int op = 0; op < R_N; op++) {
        printf("  %-9s", r_name[op]);
        for (int isa = HR_ISA_AVX2; isa < HR_ISA_COUNT; isa++) {
            const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
            if (!K)
                continue;
            for (int r = 0; r < NP; r++) {
                double t0 = hr_thread_cpu();
                for (int c = 0; c < CALLS; c++)
                    sink += row_call(K, op, y, x, w, d);
                dt[r] = (hr_thread_cpu() - t0) / CALLS;
            }
            qsort(dt, NP, sizeof *dt, cmp_double);
            printf("  %s %8.1f", K->name, dt[NP / 2] * 1e9);
        }
        printf("\n");
    }
    free(x);
    free(y);
    free(w);
    return sink == 12345.678; /* keeps the calls */
}

/* ---- kvattn: the quantized pools' dots and axpys, the tables side by side --- */

static void kv_dots(const hr_cpu_kernels *K, hr_dtype dt, float *sc, size_t ldsc, const float *q,
                    int nr, const uint8_t *rec, size_t rb, int nk, int hd, int bits, int group,
                    const hr_turbo_kv *L) {
    if (dt == HR_DTYPE_TURBO)
        K->turbo_dots(sc, ldsc, q, nr, rec, rb, nk, L, 0.125f);
    else if (dt == HR_DTYPE_F32)
        K->attn_dots(sc, ldsc, q, nr, (const float *)rec, nk, hd, 0.125f);
    else if (dt == HR_DTYPE_AFFINE) /* q: hr_kvq_prep's rows, their group sums after them */
        K->kvq_dots(sc, ldsc, q, q + (size_t)nr * hd, nr, rec, rb, nk, hd, bits, group, 0.125f);
    else
        K->kvg_dots(sc, ldsc, q, nr, rec, rb, nk, hd, dt, 0.125f);
}

static void kv_axpys(const hr_cpu_kernels *K, hr_dtype dt, float *o, float *bias, const float *p,
                     size_t ldp, int nr, const uint8_t *rec, size_t rb, int nv, int hd, int bits,
                     int group, const hr_turbo_kv *L) {
    if (dt == HR_DTYPE_TURBO)
        K->turbo_axpys(o, p, ldp, nr, rec, rb, nv, L);
    else if (dt == HR_DTYPE_F32)
        K->attn_axpys(o, p, ldp, nr, (const float *)rec, nv, hd);
    else if (dt == HR_DTYPE_AFFINE)
        K->kvq_axpys(o, bias, p, ldp, nr, rec, rb, nv, hd, bits, group);
    else
        K->kvg_axpys(o, p, ldp, nr, rec, rb, nv, hd, dt);
}

/* true when table K has dt's dots and axpys (the AVX-512 table runs f32
 * rows through attn_heads instead: no attn_dots) */
static bool kv_has(const hr_cpu_kernels *K, hr_dtype dt) {
    if (dt == HR_DTYPE_TURBO)
        return K->turbo_dots && K->turbo_axpys;
    if (dt == HR_DTYPE_F32)
        return K->attn_dots && K->attn_axpys;
    if (dt == HR_DTYPE_AFFINE)
        return K->kvq_dots && K->kvq_axpys;
    return K->kvg_dots && K->kvg_axpys;
}

static int kvattn(int argc, char **argv, hr_rng *rng) {
    if (argc < 3)
        return usage();
    const char *kv = argv[2];
    int nk = argc > 3 ? atoi(argv[3]) : 1024, nr = argc > 4 ? atoi(argv[4]) : 3;
    int hd = argc > 5 ? atoi(argv[5]) : 64, bits = 0, group = 64;
    int run = argc > 6 ? atoi(argv[6]) : nk; /* keys a call (attention's: a block, 32) */
    hr_dtype dt;
    if (kv[0] == 'a') {
        dt = HR_DTYPE_AFFINE;
        bits = atoi(kv + 1);
        const char *g = strchr(kv, 'g');
        group = g ? atoi(g + 1) : 64;
        if (!hr_kvq_bits_ok(bits) || !hr_kvq_group_ok(group) || hd % group)
            return usage();
    } else if (!strcmp(kv, "q8_0") || !strcmp(kv, "q4_0")) {
        dt = kv[1] == '8' ? HR_DTYPE_Q8_0 : HR_DTYPE_Q4_0;
        if (hd % 32)
            return usage();
    } else if (!strcmp(kv, "f32")) { /* what f16 and bf16 pools run, widened once */
        dt = HR_DTYPE_F32;
    } else if (kv[0] == 't') {
        dt = HR_DTYPE_TURBO;
        bits = (int)(atof(kv + 1) * 2 + 0.5);
        group = 0;
        if (!hr_turbo_kv_ok(hd, bits))
            return usage();
    } else {
        return usage();
    }
    if (nk < 1 || nr < 1 || nr > 64 || hd < 16 || hd > 256 || run < 1)
        return usage();
    size_t rb = hr_kv_row_size(dt, hd, bits, group);
    uint8_t *rec = malloc((size_t)nk * rb);
    float *x = malloc((size_t)hd * sizeof *x), *q = malloc((size_t)nr * hd * sizeof *q);
    float *sc = malloc((size_t)nr * nk * sizeof *sc), *o = calloc((size_t)nr * hd, sizeof *o);
    float *bias = calloc((size_t)nr * hd, sizeof *bias);
    for (int j = 0; j < nk; j++) {
        for (int i = 0; i < hd; i++)
            x[i] = frand(rng);
        hr_kv_row_store(rec + (size_t)j * rb, x, hd, dt, bits, group);
    }
    for (int i = 0; i < nr * hd; i++)
        q[i] = frand(rng);
    float *qp = malloc((size_t)nr * (hd + 32) * sizeof *qp); /* affine: hr_kvq_prep's rows, */
    hr_kvq_prep(qp, qp + (size_t)nr * hd, q, nr, hd, bits, group ? group : hd); /* then sums */
    for (int i = 0; i < nr * nk; i++)
        sc[i] = (float)hr_rng_uniform(rng) / (float)nk;
    hr_turbo_kv L;
    if (dt == HR_DTYPE_TURBO)
        hr_turbo_kv_layout(&L, hd, bits);
    enum { NP = 101 };
    double dt_[2][HR_ISA_COUNT][NP];
    const hr_cpu_kernels *tabs[HR_ISA_COUNT];
    int nt = 0;
    for (int isa = HR_ISA_AVX2; isa < HR_ISA_COUNT; isa++)
        if (hr_cpu_isa((hr_isa)isa) && kv_has(hr_cpu_isa((hr_isa)isa), dt))
            tabs[nt++] = hr_cpu_isa((hr_isa)isa);
    for (int r = 0; r < NP; r++)
        for (int t = 0; t < nt; t++) {
            const hr_cpu_kernels *K = tabs[t];
            double t0 = hr_thread_cpu();
            for (int j = 0; j < nk; j += run) /* a call a run of keys, as attention's blocks */
                kv_dots(K, dt, sc + j, (size_t)nk, dt == HR_DTYPE_AFFINE ? qp : q, nr,
                        rec + (size_t)j * rb, rb,
                        nk - j < run ? nk - j : run, hd, bits, group, &L);
            double t1 = hr_thread_cpu();
            for (int i = 0; i < nr * nk; i++) /* back to weights (the scores are ~N(0, .)) */
                sc[i] = 1.0f / (float)nk;
            double t2 = hr_thread_cpu();
            for (int j = 0; j < nk; j += run)
                kv_axpys(K, dt, o, bias, sc + j, (size_t)nk, nr, rec + (size_t)j * rb, rb,
                         nk - j < run ? nk - j : run, hd, bits, group, &L);
            dt_[0][t][r] = (t1 - t0) / nk;
            dt_[1][t][r] = (hr_thread_cpu() - t2) / nk;
        }
    printf("%s attention kernels over %d keys (%d a call), %d query rows of %d, 1 thread, "
           "median of %d passes (ns a key):\n", kv, nk, run < nk ? run : nk, nr, hd, NP);
    for (int t = 0; t < nt; t++) {
        qsort(dt_[0][t], NP, sizeof(double), cmp_double);
        qsort(dt_[1][t], NP, sizeof(double), cmp_double);
        printf("  %-7s dots %7.2f  axpys %7.2f\n", tabs[t]->name, dt_[0][t][NP / 2] * 1e9,
               dt_[1][t][NP / 2] * 1e9);
    }
    free(rec);
    free(x);
    free(q);
    free(qp);
    free(sc);
    free(o);
    free(bias);
    return 0;
}

/* ---- fma: the core's rate of 8-lane FMAs --------------------------------------- */

#if defined(__x86_64__)
/* where fma_chains' results go, so that they are not optimized out */
static volatile float g_fma_sink;

/* n rounds of 12 independent FMA chains (more than latency x ports: the
 * rate, not a chain's latency); their sum */
__attribute__((target("avx2,fma"))) static float fma_chains(long n) {
    __m256 a[12], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    for (int k = 0; k < 12; k++)
        a[k] = _mm256_set1_ps(1.0f + (float)k);
    for (long i = 0; i < n; i++)
        for (int k = 0; k < 12; k++)
            a[k] = _mm256_fmadd_ps(a[k], m, c);
    float s = 0, v[8];
    for (int k = 0; k < 12; k++) {
        _mm256_storeu_ps(v, a[k]);
        s += v[0];
    }
    return s;
}

static int fma_rate(void) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        fprintf(stderr, "bench_kernels fma: this CPU has no AVX2 FMA\n");
        return 2;
    }
    enum { RUNS = 11 };
    const long n = 20000000 / 12;
    double r[RUNS];
    for (int i = 0; i < RUNS; i++) {
        double t0 = hr_thread_cpu();
        g_fma_sink = fma_chains(n);
        r[i] = (double)n * 12 / (hr_thread_cpu() - t0);
    }
    qsort(r, RUNS, sizeof *r, cmp_double);
    printf("fma: %.2f G 8-lane FMAs/s on 1 thread (median of %d runs; runs %.2f .. %.2f)\n",
           r[RUNS / 2] / 1e9, RUNS, r[0] / 1e9, r[RUNS - 1] / 1e9);
    return 0;
}
#else
static int fma_rate(void) {
    fprintf(stderr, "bench_kernels fma: x86-64 only\n");
    return 2;
}
#endif

int main(int argc, char **argv) {
    hr_rng rng;
    hr_rng_seed(&rng, 1);
    const char *mb = getenv("HEARTH_BENCH_FOOTPRINT_MB");
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE); /* 0 or -1 where unknown */
    if (llc > 0 && (size_t)llc * 4 > g_footprint)
        g_footprint = (size_t)llc * 4;
    if (mb) {
        long v = atol(mb);
        if (v < 1 || v > 4096) {
            fprintf(stderr, "bench_kernels: HEARTH_BENCH_FOOTPRINT_MB must be 1..4096\n");
            return 2;
        }
        g_footprint = (size_t)v << 20;
        g_passes = (int)(5 * (256 / v > 1 ? 256 / v : 1));
    }
    hr_error err = {0};
    if (hr_quant_act_parse(getenv("HEARTH_QUANT_ACT"), &g_qa, &err)) {
        fprintf(stderr, "bench_kernels: HEARTH_QUANT_ACT: %s\n", err.msg);
        return 2;
    }
    if (argc > 1 && !strcmp(argv[1], "matvec"))
        return matvec(argc, argv, &rng);
    if (argc > 1 && !strcmp(argv[1], "attn"))
        return attn(argc, argv, &rng);
    if (argc > 1 && !strcmp(argv[1], "gemm"))
        return gemm(argc, argv, &rng);
    if (argc > 1 && !strcmp(argv[1], "rows"))
        return rows(argc, argv, &rng);
    if (argc > 1 && !strcmp(argv[1], "kvattn"))
        return kvattn(argc, argv, &rng);
    if (argc > 1 && !strcmp(argv[1], "fma"))
        return fma_rate();
    return usage();
}
