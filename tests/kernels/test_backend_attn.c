/* The backend seam's qkv + attention ops (kernels/backend.h) on --device
 * NAME against the CPU's, on random data: two sequences, one long enough
 * for several of the GPU's 128-position chunks, f32 KV, GQA, RoPE. Cases:
 * causal, sinks (gpt_oss), bidirectional (encoders), image spans
 * (attn_end), M-RoPE positions, all of those at once, an f16 cache, and a
 * sliding window with a softcap; each output within 2e-5 of the CPU's.
 * Then on the device alone, the same bits whatever kernel runs a token:
 * one sequence's decode token alone (GPU: the split kernels) and beside 16
 * other tokens (GPU: the tiled prefill kernel, attention_tiled.cuh), with
 * sinks; and tokens of a 180-token prefill (tiled, a block's rows across
 * the two sequences) against each of them alone, under f32 and f16 caches,
 * sinks, image spans, a window and a softcap, and of a 150-token prefill
 * beside a 3-token one (that run too short for the tiled kernel: k_attention
 * beside it).
 * Without --device: the CPU against itself (the harness itself checked). */
#include "core/error.h"
#include "core/pool.h"
#include "kernels/backend.h"

#include "../device_arg.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NH 4
#define NKV 2
#define HD 64
#define ROT 64
#define BS 32      /* block size */
#define NB 16      /* blocks in the pool */
#define MAXT 200   /* a step's tokens */
#define MAXCTX 256
#define QD (NH * HD)
#define KVD (NKV * HD)

static const char *g_device;

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float rnd(void) { /* uniform (-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* one step's batch on the host */
typedef struct step {
    int T, S;
    int32_t tok[MAXT], pos[MAXT], seq[MAXT], end[MAXT], mpos[3 * MAXT];
    uint8_t logits[MAXT];
    float q[MAXT * QD], k[MAXT * KVD], v[MAXT * KVD];
    bool use_end, use_mrope;
} step;

typedef struct opts {
    bool sinks, bidir;
    bool f16;      /* the cache in f16 (else f32) */
    int window;    /* sliding window (0: none) */
    float softcap; /* 0: none */
} opts;

static const int32_t g_tables[2][8] = {{3, 0, 7, 9, 1, 12, 5, 2}, {4, 8, 6, 10, 11, 13, 14, 15}};
static const float g_sinks[NH] = {0.5f, -1.0f, 2.0f, 0.0f};

/* a backend's buffers */
typedef struct dev {
    hr_backend *be;
    hr_bctx *c;
    hr_pool *pool;
    float *q, *k, *v, *out, *kc, *vc, *sinks;
} dev;

static size_t kv_floats(void) { return (size_t)NB * NKV * BS * HD; }

static void dev_open(dev *d, const char *name) {
    hr_error err = {0};
    memset(d, 0, sizeof *d);
    assert_int_equal(hr_backend_get(name, &d->be, &err), 0);
    d->pool = hr_pool_new(2);
    hr_bctx_dims dims = {.max_tokens = MAXT, .max_seqs = 2, .max_ctx = MAXCTX, .n_heads = NH,
                         .n_kv_heads = NKV, .head_dim = HD, .rot_dim = ROT, .max_k = QD,
                         .d_model = QD};
    if (d->be->ops->ctx_new(d->be, d->pool, &dims, &d->c, &err))
        fail_msg("%s: %s", name, err.msg);
    const hr_backend_ops *o = d->be->ops;
    d->q = o->alloc(d->be, sizeof(float) * MAXT * QD);
    d->out = o->alloc(d->be, sizeof(float) * MAXT * QD);
    d->k = o->alloc(d->be, sizeof(float) * MAXT * KVD);
    d->v = o->alloc(d->be, sizeof(float) * MAXT * KVD);
    d->kc = o->alloc(d->be, sizeof(float) * kv_floats());
    d->vc = o->alloc(d->be, sizeof(float) * kv_floats());
    d->sinks = o->alloc(d->be, sizeof g_sinks);
    assert_true(d->q && d->out && d->k && d->v && d->kc && d->vc && d->sinks);
    assert_int_equal(o->upload(d->be, d->sinks, g_sinks, sizeof g_sinks, &err), 0);
}

static void dev_close(dev *d) {
    const hr_backend_ops *o = d->be->ops;
    o->free(d->be, d->q, sizeof(float) * MAXT * QD);
    o->free(d->be, d->out, sizeof(float) * MAXT * QD);
    o->free(d->be, d->k, sizeof(float) * MAXT * KVD);
    o->free(d->be, d->v, sizeof(float) * MAXT * KVD);
    o->free(d->be, d->kc, sizeof(float) * kv_floats());
    o->free(d->be, d->vc, sizeof(float) * kv_floats());
    o->free(d->be, d->sinks, sizeof g_sinks);
    o->ctx_free(d->c);
    hr_pool_free(d->pool);
}

/* the step on d: K/V stored, attention into out (host, [T][QD]) */
static void run(dev *d, const step *s, opts op, float *out) {
    hr_error err = {0};
    const hr_backend_ops *o = d->be->ops;
    size_t T = (size_t)s->T;
    assert_int_equal(o->upload(d->be, d->q, s->q, sizeof(float) * T * QD, &err), 0);
    assert_int_equal(o->upload(d->be, d->k, s->k, sizeof(float) * T * KVD, &err), 0);
    assert_int_equal(o->upload(d->be, d->v, s->v, sizeof(float) * T * KVD, &err), 0);
    /* per sequence: RoPE inverse frequencies and factor, twice (full | local) */
    float freq[2][2 * (ROT / 2 + 1)];
    for (int q = 0; q < 2; q++)
        for (int h = 0; h < 2; h++) {
            for (int i = 0; i < ROT / 2; i++)
                freq[q][h * (ROT / 2 + 1) + i] = powf(10000.0f, -2.0f * i / ROT);
            freq[q][h * (ROT / 2 + 1) + ROT / 2] = 1.0f;
        }
    int32_t tables[16], tab_off[2];
    int n_tab = 0;
    for (int q = 0; q < s->S; q++) {
        int last = 0;
        for (int t = 0; t < s->T; t++)
            if (s->seq[t] == q && s->pos[t] > last)
                last = s->pos[t];
        if (s->use_end)
            for (int t = 0; t < s->T; t++)
                if (s->seq[t] == q && s->end[t] - 1 > last)
                    last = s->end[t] - 1;
        int nb = last / BS + 1;
        tab_off[q] = n_tab;
        memcpy(tables + n_tab, g_tables[q], sizeof(int32_t) * (size_t)nb);
        n_tab += nb;
    }
    hr_step_in in = {.n_tokens = s->T, .n_seqs = s->S, .token = s->tok, .pos = s->pos,
                     .seq = s->seq, .logits = s->logits, .tables = tables, .tab_off = tab_off,
                     .n_tables = n_tab, .freq = &freq[0][0], .rot_dim = ROT,
                     .attn_end = s->use_end ? s->end : NULL,
                     .mrope_pos = s->use_mrope ? s->mpos : NULL,
                     .mrope_section = {s->use_mrope ? 16 : 0, s->use_mrope ? 8 : 0,
                                       s->use_mrope ? 8 : 0}};
    if (o->begin(d->c, &in, &err))
        fail_msg("%s: begin: %s", d->be->name, err.msg);
    size_t bstride = (size_t)NKV * BS * HD;
    hr_dtype kt = op.f16 ? HR_DTYPE_F16 : HR_DTYPE_F32;
    o->qkv(d->c, &(hr_qkv_args){.q = d->q, .k = d->k, .v = d->v, .n_heads = NH,
                                 .n_kv_heads = NKV, .head_dim = HD, .qk_norm = HR_BQK_NONE,
                                 .rope = true, .k_cache = d->kc, .v_cache = d->vc,
                                 .kv_dtype = kt, .block_stride = bstride,
                                 .block_size = BS, .v_dtype = kt});
    o->attention(d->c, &(hr_attn_in){.q = d->q, .out = d->out, .n_heads = NH, .n_kv_heads = NKV,
                                      .head_dim = HD, .k_cache = d->kc, .v_cache = d->vc,
                                      .kv_dtype = kt, .block_stride = bstride,
                                      .block_size = BS, .v_dtype = kt,
                                      .scale = 1.0f / sqrtf((float)HD), .max_ctx = MAXCTX,
                                      .sinks = op.sinks ? d->sinks : NULL,
                                      .bidirectional = op.bidir, .window = op.window,
                                      .softcap = op.softcap});
    if (o->end(d->c, &err))
        fail_msg("%s: end: %s", d->be->name, err.msg);
    assert_int_equal(o->download(d->be, out, d->out, sizeof(float) * T * QD, &err), 0);
}

/* seq 0: n0 tokens from position 0, seq 1: n1 tokens from position 0 */
static void prefill(step *s, int n0, int n1) {
    memset(s, 0, sizeof *s);
    g_rng = 0x9E3779B97F4A7C15ull; /* the same data every time */
    s->T = n0 + n1;
    s->S = 2;
    for (int t = 0; t < s->T; t++) {
        s->seq[t] = t >= n0;
        s->pos[t] = t < n0 ? t : t - n0;
        s->end[t] = s->pos[t] + 1;
        for (int k = 0; k < 3; k++) /* M-RoPE: a 2-D grid's positions */
            s->mpos[3 * t + k] = k == 0 ? s->pos[t] / 2 : s->pos[t] % (3 + k);
    }
    /* an "image" in seq 0 at positions 10..19, and one in seq 1 at 2..4 */
    for (int t = 10; t < 20 && t < n0; t++)
        s->end[t] = 20;
    for (int t = n0 + 2; t < n0 + 5 && t < s->T; t++)
        s->end[t] = 5;
    for (int i = 0; i < s->T * QD; i++)
        s->q[i] = rnd();
    for (int i = 0; i < s->T * KVD; i++) {
        s->k[i] = rnd();
        s->v[i] = rnd();
    }
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* (a context per case: a step's ops, replayed as a CUDA graph, keep the
 * arguments they were captured with, fixed per model in the forward pass) */
static void test_against_cpu(void **st) {
    (void)st;
    dev cpu, gpu;
    static step s;
    static float a[MAXT * QD], b[MAXT * QD], causal[MAXT * QD];
    const char *names[] = {"causal",      "sinks",    "bidirectional",    "image spans",
                           "M-RoPE",      "all at once", "f16 cache", "window+softcap"};
    for (int c = 0; c < 8; c++) {
        prefill(&s, 150, 30);
        opts op = {.sinks = c == 1 || c == 5, .bidir = c == 2 || c == 5, .f16 = c == 6,
                   .window = c == 7 ? 40 : 0, .softcap = c == 7 ? 0.5f : 0.0f};
        s.use_end = c == 3 || c == 5;
        s.use_mrope = c == 4 || c == 5;
        dev_open(&cpu, "cpu");
        dev_open(&gpu, g_device);
        run(&cpu, &s, op, a);
        run(&gpu, &s, op, b);
        dev_close(&cpu);
        dev_close(&gpu);
        double md = max_diff(a, b, (size_t)s.T * QD);
        /* each option changes the CPU's result (the case tests something) */
        double dc = c ? max_diff(a, causal, (size_t)s.T * QD) : 0;
        if (!c)
            memcpy(causal, a, sizeof causal);
        printf("backend attention %-14s %s vs cpu: max |diff| %.2e (vs causal %.2e)\n",
               names[c], g_device, md, dc);
        assert_true(md <= 2e-5);
        assert_true(c == 0 || dc > (c == 6 ? 1e-5 : 1e-3)); /* f16: its rounding */
    }
}

static void test_batch_invariant(void **st) {
    (void)st;
    dev gpu;
    dev_open(&gpu, g_device);
    static step s, one, many;
    static float a[MAXT * QD], b[MAXT * QD];
    prefill(&s, 150, 30);
    run(&gpu, &s, (opts){.sinks = true}, a);
    /* seq 0's next token alone, then with 16 of seq 1's */
    memset(&one, 0, sizeof one);
    one.T = 1;
    one.S = 2;
    one.pos[0] = 150;
    one.end[0] = 151;
    for (int i = 0; i < QD; i++)
        one.q[i] = rnd();
    for (int i = 0; i < KVD; i++) {
        one.k[i] = rnd();
        one.v[i] = rnd();
    }
    many = one;
    many.T = 17;
    for (int t = 1; t < 17; t++) {
        many.seq[t] = 1;
        many.pos[t] = 30 + t - 1;
        many.end[t] = many.pos[t] + 1;
    }
    for (int i = QD; i < 17 * QD; i++)
        many.q[i] = rnd();
    for (int i = KVD; i < 17 * KVD; i++) {
        many.k[i] = rnd();
        many.v[i] = rnd();
    }
    run(&gpu, &one, (opts){.sinks = true}, a);
    run(&gpu, &many, (opts){.sinks = true}, b);
    printf("backend attention on %s: a decode row alone vs beside 16 others: max |diff| %.2e\n",
           g_device, max_diff(a, b, QD));
    assert_memory_equal(a, b, sizeof(float) * QD);
    dev_close(&gpu);
}

/* A prefill's tokens (the GPU: the tiled kernel) against each token alone
 * in a step of its own after it (the split kernels: the cache holds the
 * same rows, its own stored again), bit for bit */
static void test_prefill_vs_alone(void **st) {
    (void)st;
    static step s, one;
    static float a[MAXT * QD], b[QD];
    const int toks[] = {0, 5, 12, 31, 32, 100, 127, 128, 129, 149, 150, 152, 179};
    const char *names[] = {"f32 + sinks", "f16 + sinks", "image spans", "window+softcap",
                           "150 + 3 tokens"};
    for (int c = 0; c < 5; c++) {
        opts op = {.sinks = c < 2, .f16 = c == 1 || c == 3, .window = c == 3 ? 40 : 0,
                   .softcap = c == 3 ? 0.5f : 0.0f};
        dev gpu;
        dev_open(&gpu, g_device);
        prefill(&s, 150, c == 4 ? 3 : 30);
        s.use_end = c == 2;
        run(&gpu, &s, op, a);
        double md = 0;
        int n = 0;
        for (size_t i = 0; i < sizeof toks / sizeof *toks; i++) {
            int t = toks[i];
            if (t >= s.T)
                continue;
            n++;
            memset(&one, 0, sizeof one);
            one.T = 1;
            one.S = 2;
            one.seq[0] = s.seq[t];
            one.pos[0] = s.pos[t];
            one.end[0] = s.end[t];
            one.use_end = s.use_end;
            memcpy(one.q, s.q + (size_t)t * QD, sizeof(float) * QD);
            memcpy(one.k, s.k + (size_t)t * KVD, sizeof(float) * KVD);
            memcpy(one.v, s.v + (size_t)t * KVD, sizeof(float) * KVD);
            run(&gpu, &one, op, b);
            md = fmax(md, max_diff(a + (size_t)t * QD, b, QD));
            assert_memory_equal(a + (size_t)t * QD, b, sizeof(float) * QD);
        }
        printf("backend attention on %s, %s: %d prefill rows vs alone: max |diff| %.2e\n",
               g_device, names[c], n, md);
        dev_close(&gpu);
    }
}

/* test_backend_attn [--device NAME] */
int main(int argc, char **argv) {
    if (!hr_test_device(argc, argv, &g_device))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_cpu),
        cmocka_unit_test(test_batch_invariant),
        cmocka_unit_test(test_prefill_vs_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
