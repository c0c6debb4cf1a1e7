/* --quantized-kv-start N > 0 (mlx-lm's maybe_quantize_kv_cache) in the
 * engine, on the demo model (head_dim 64: the affine groups divide it):
 * - a sequence crossing the start scores its tokens exactly as a reference
 *   driven here through hr_forward: tokens [0, N) into an f32 pool, that
 *   pool's rows read back and stored by hr_kv_store into a 4-bit pool
 *   (today's from-the-first-token store), tokens [N, n) into the 4-bit
 *   pool. Before N the scores equal the never-quantized run's, after it
 *   they differ from both the never-quantized and the start-0 runs. Starts
 *   on a block boundary, one past it and inside a block;
 * - rows of one batch in both pools (converted and not) give what each
 *   gives alone;
 * - the prompt cache: a sequence that converted leaves its unquantized
 *   prefix to one that shares it and stays unquantized, and its quantized
 *   blocks to a repeat of itself (or a longer prompt sharing at least the
 *   start's tokens), which starts converted and answers as the first time;
 *   the SSD tier keeps the quantized blocks across a restart, in a
 *   directory of their own; in a full quantized pool the cache's blocks
 *   are evicted for a conversion's promise; every block of both pools
 *   comes back;
 * - bad options are refused. */
#include "core/error.h"
#include "engine/engine.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/model.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hr_model *g_model;

#define N_TOK 80 /* the scored sequence's tokens */
#define BITS 4
#define GROUP 64

static void tokens_of(int32_t *p, int n, int seed) {
    for (int i = 0; i < n; i++)
        p[i] = (int32_t)((i * 37 + seed * 101 + 11) % 2000) + 5;
}

/* log softmax(row)[tok] in double: the engine's scoring (rows.c) */
static float row_logprob(const float *row, int V, int32_t tok) {
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++)
        mx = row[v] > mx ? row[v] : mx;
    for (int v = 0; v < V; v++)
        s += exp(row[v] - mx);
    return (float)(row[tok] - mx - log(s));
}

/* The engine's scores of p[1..n) (lp[0] unused) */
static void engine_scores(hr_engine *e, const int32_t *p, int n, float *lp) {
    hr_req_params rp = {.prompt = p, .n_prompt = n, .score_from = 1};
    hr_sampler_params_default(&rp.sampler);
    hr_request *r;
    hr_error err = {0};
    if (hr_request_new(&r, e, &rp, &err) || hr_engine_submit(e, r, &err))
        fail_msg("%s", err.msg);
    hr_step st;
    assert_int_equal(hr_request_wait(r, 0, &st, 20000), 0);
    assert_int_not_equal(hr_request_finish(r, NULL), HR_FINISH_ERROR);
    memcpy(lp, hr_request_prompt_logprobs(r), (size_t)n * sizeof *lp);
    hr_request_release(r);
}

static hr_engine *engine(int bits, int start, int cache_blocks, int max_batch) {
    hr_engine_opts o = {.n_threads = 2, .max_batch = max_batch, .n_ctx = 256,
                        .kv_bits = bits, .kv_group = GROUP, .kv_start = start,
                        .cache_blocks = cache_blocks};
    hr_engine *e;
    hr_error err = {0};
    if (hr_engine_new(&e, g_model, &o, &err))
        fail_msg("%s", err.msg);
    return e;
}

/* The reference: one forward of tokens [0, start) into an f32 pool; its
 * rows stored again into a BITS-bit pool by hr_kv_store (from the f32 rows:
 * the quantizer of the start-0 path); one forward of [start, n) there.
 * start 0: all in the quantized pool; start n: all in f32. */
static void ref_scores(const int32_t *p, int n, int start, float *lp) {
    const hr_hparams *hp = &g_model->hp;
    hr_error err = {0};
    hr_fwd *f;
    hr_kv u, q;
    int nb = (n + HR_KV_BLOCK - 1) / HR_KV_BLOCK, V = hp->n_vocab;
    assert_int_equal(hr_fwd_new(&f, g_model, n, 1, 256, 2, &err), 0);
    assert_int_equal(hr_kv_init(&u, hp, HR_DTYPE_F32, nb, &err), 0);
    hr_kv_fmt qf = {.dtype = HR_DTYPE_AFFINE, .bits = BITS, .group = GROUP};
    assert_int_equal(hr_kv_init_fmt(&q, hr_backend_cpu(), hp, &qf, nb, &err), 0);
    int32_t tu[16], tq[16], pos[N_TOK], seq[N_TOK] = {0};
    uint8_t want[N_TOK];
    for (int i = 0; i < nb; i++) {
        tu[i] = hr_kv_alloc(&u);
        tq[i] = hr_kv_alloc(&q);
    }
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        want[i] = 1;
    }
    float *logits = malloc((size_t)n * V * sizeof *logits);
    assert_non_null(logits);
    if (start > 0) {
        hr_seq_blocks sb = {tu, nb, n, 1};
        hr_batch b = {.n_tokens = start, .token = p, .pos = pos, .seq = seq, .logits = want,
                      .n_seqs = 1, .seqs = &sb};
        assert_int_equal(hr_forward(f, &u, &b, logits, &err), 0);
        float k[256], v[256];
        for (int t = 0; t < start; t++)
            for (int l = 0; l < hp->n_layers; l++)
                for (int h = 0; h < hp->n_kv_heads; h++) {
                    hr_kv_load_row(&u, l, tu[t / HR_KV_BLOCK], h, t % HR_KV_BLOCK, false, k);
                    hr_kv_load_row(&u, l, tu[t / HR_KV_BLOCK], h, t % HR_KV_BLOCK, true, v);
                    hr_kv_store(&q, l, tq[t / HR_KV_BLOCK], h, t % HR_KV_BLOCK, k, v);
                }
    }
    if (start < n) {
        hr_seq_blocks sb = {tq, nb, n, 1};
        hr_batch b = {.n_tokens = n - start, .token = p + start, .pos = pos + start,
                      .seq = seq, .logits = want, .n_seqs = 1, .seqs = &sb};
        assert_int_equal(hr_forward(f, &q, &b, logits + (size_t)start * V, &err), 0);
    }
    for (int t = 0; t + 1 < n; t++)
        lp[t + 1] = row_logprob(logits + (size_t)t * V, V, p[t + 1]);
    free(logits);
    hr_kv_deinit(&u);
    hr_kv_deinit(&q);
    hr_fwd_free(f);
}

static void test_crossing_equals_reference(void **state) {
    (void)state;
    int32_t p[N_TOK];
    tokens_of(p, N_TOK, 1);
    float never[N_TOK], first[N_TOK], got[N_TOK], ref[N_TOK];
    hr_engine *e = engine(0, 0, -1, 1);
    engine_scores(e, p, N_TOK, never);
    hr_engine_free(e);
    e = engine(BITS, 0, -1, 1);
    engine_scores(e, p, N_TOK, first);
    hr_engine_free(e);
    /* the reference itself: all f32 is the never-quantized engine, all
     * quantized the start-0 engine's first forward (one chunk, bit for bit) */
    ref_scores(p, N_TOK, N_TOK, ref);
    assert_memory_equal(ref + 1, never + 1, (N_TOK - 1) * sizeof(float));
    ref_scores(p, N_TOK, 0, ref);
    assert_memory_equal(ref + 1, first + 1, (N_TOK - 1) * sizeof(float));
    const int starts[] = {32, 33, 45};
    for (int c = 0; c < 3; c++) {
        int s = starts[c];
        e = engine(BITS, s, -1, 1);
        engine_scores(e, p, N_TOK, got);
        hr_engine_free(e);
        ref_scores(p, N_TOK, s, ref);
        for (int t = 1; t < N_TOK; t++)
            if (got[t] != ref[t])
                fail_msg("start %d: token %d scores %.9g, the reference %.9g", s, t, got[t],
                         ref[t]);
        /* before the start: the never-quantized run's; after: neither */
        assert_memory_equal(got + 1, never + 1, (size_t)s * sizeof(float));
        double dn = 0, df = 0;
        for (int t = s + 1; t < N_TOK; t++) {
            dn += fabs(got[t] - never[t]);
            df += fabs(got[t] - first[t]);
        }
        printf("start %d: mean |dlogprob| after it: vs never quantized %.3g, vs start 0 %.3g\n",
               s, dn / (N_TOK - 1 - s), df / (N_TOK - 1 - s));
        if (!(dn > 0 && df > 0))
            fail_msg("start %d: the scores after it equal a run that %s", s,
                     dn == 0 ? "never quantized" : "quantized from the first token");
    }
}

static void wait_idle(hr_engine *e) {
    hr_engine_stats st;
    const hr_kv *kq = hr_engine_kvq(e);
    for (int i = 0; i < 5000; i++) {
        hr_engine_stats_get(e, &st);
        if (st.kv_blocks_requests == 0 &&
            st.kv_blocks_free + st.kv_blocks_cached == st.kv_blocks_total &&
            (!kq || kq->n_free + st.kvq_blocks_cached == kq->n_blocks))
            return;
        usleep(1000);
    }
    fail_msg("%d KV blocks held by requests, %d free, %d cached of %d; quantized pool %d of %d "
             "free", st.kv_blocks_requests, st.kv_blocks_free, st.kv_blocks_cached,
             st.kv_blocks_total, kq ? kq->n_free : 0, kq ? kq->n_blocks : 0);
}

#define GEN 24
typedef struct run { int n; int32_t tok[GEN]; float lp[GEN]; int cached; } run;

static hr_request *submit_gen(hr_engine *e, const int32_t *p, int n, int max_tokens) {
    hr_req_params rp = {.prompt = p, .n_prompt = n, .max_tokens = max_tokens, .top_logprobs = 2};
    hr_sampler_params_default(&rp.sampler);
    hr_request *r;
    hr_error err = {0};
    if (hr_request_new(&r, e, &rp, &err) || hr_engine_submit(e, r, &err))
        fail_msg("%s", err.msg);
    return r;
}

static void collect(hr_request *r, run *out) {
    hr_step st;
    int rc;
    out->n = 0;
    while (out->n < GEN && (rc = hr_request_wait(r, out->n, &st, 20000)) == 1) {
        out->tok[out->n] = st.token;
        out->lp[out->n++] = st.logprob;
    }
    assert_int_not_equal(hr_request_finish(r, NULL), HR_FINISH_ERROR);
    out->cached = hr_request_cached_tokens(r);
    hr_request_release(r);
}

static void same_run(const run *a, const run *b, const char *what) {
    if (a->n != b->n || memcmp(a->tok, b->tok, (size_t)a->n * sizeof a->tok[0]) ||
        memcmp(a->lp, b->lp, (size_t)a->n * sizeof a->lp[0]))
        fail_msg("%s: %d tokens against %d, or other tokens / log-probabilities", what, a->n,
                 b->n);
}

/* Four requests at start 40: one crossing it in its decode (20 + 24), one
 * inside its prompt (50), one past it at once (70), one never (10 + 24 =
 * 34): batched, their steps mix rows of both pools; each equals itself
 * alone. */
static void test_mixed_rows_equal_alone(void **state) {
    (void)state;
    const int np[4] = {20, 50, 70, 10};
    int32_t p[4][70];
    run alone[4], batched[4];
    hr_engine *e = engine(BITS, 40, -1, 4);
    for (int i = 0; i < 4; i++) {
        tokens_of(p[i], np[i], 10 + i);
        collect(submit_gen(e, p[i], np[i], GEN), &alone[i]);
        assert_int_equal(alone[i].n, GEN);
    }
    hr_request *rs[4];
    for (int i = 0; i < 4; i++)
        rs[i] = submit_gen(e, p[i], np[i], GEN);
    for (int i = 0; i < 4; i++)
        collect(rs[i], &batched[i]);
    for (int i = 0; i < 4; i++)
        same_run(&batched[i], &alone[i], "batched against alone");
    wait_idle(e);
    hr_engine_free(e);
    /* the one that never reaches the start is the never-quantized run */
    e = engine(0, 0, -1, 1);
    run plain;
    collect(submit_gen(e, p[3], np[3], GEN), &plain);
    same_run(&plain, &alone[3], "below the start against no --kv-bits");
    collect(submit_gen(e, p[0], np[0], GEN), &plain);
    hr_engine_free(e);
    bool differ = false;
    for (int k = 40 - np[0]; k < GEN; k++)
        differ |= plain.lp[k] != alone[0].lp[k];
    assert_true(differ); /* after its conversion it is not the f32 run */
}

/* The prompt cache at start 40: A (60 tokens) converts; its 40-token
 * unquantized prefix goes to the cache, its quantized blocks (prompt and
 * answer) to the quantized one when it ends. B shares A's first 36 tokens
 * and stays below the start: it reuses them from the unquantized cache and
 * answers as without the cache. A again starts converted on its quantized
 * blocks (all but its last prompt token) and answers as the first time;
 * so does C, A's prompt and answer and more (the next turn of a chat). */
static void test_prompt_cache_converted_and_not(void **state) {
    (void)state;
    int32_t a[60], b[38];
    tokens_of(a, 60, 3);
    memcpy(b, a, 36 * sizeof *a);
    b[36] = 7;
    b[37] = 9;
    hr_engine *off = engine(BITS, 40, -1, 2), *on = engine(BITS, 40, 0, 2);
    run ra, rb, ra2, ref_b;
    collect(submit_gen(off, b, 38, 1), &ref_b);
    collect(submit_gen(on, a, 60, 4), &ra);
    assert_int_equal(ra.cached, 0);
    collect(submit_gen(on, b, 38, 1), &rb);
    assert_int_equal(rb.cached, 36);
    same_run(&rb, &ref_b, "B from A's unquantized prefix against B without the cache");
    collect(submit_gen(on, a, 60, 4), &ra2);
    assert_int_equal(ra2.cached, 59);
    same_run(&ra2, &ra, "A again (its quantized blocks) against A");
    hr_engine_stats st;
    hr_engine_stats_get(on, &st);
    assert_true(st.kvq_blocks_cached >= 2);
    run plain_a;
    collect(submit_gen(off, a, 60, 4), &plain_a);
    same_run(&plain_a, &ra, "A without the cache against A");
    /* C: A's prompt, its answer but the last token, and 5 more */
    int32_t c[70];
    memcpy(c, a, 60 * sizeof *a);
    for (int i = 0; i < 3; i++)
        c[60 + i] = ra.tok[i];
    for (int i = 63; i < 70; i++)
        c[i] = 100 + i;
    run rc, ref_c;
    collect(submit_gen(on, c, 70, 6), &rc);
    assert_true(rc.cached >= 62);
    collect(submit_gen(off, c, 70, 6), &ref_c);
    same_run(&rc, &ref_c, "C on A's quantized blocks against C without the cache");
    wait_idle(on);
    wait_idle(off);
    hr_engine_free(on);
    hr_engine_free(off);
}

/* One sequence's budget (max_batch 1: 8 quantized blocks of n_ctx 256) and
 * the cache on: each 100-token prompt (+ 24 tokens: 4 blocks) converts and
 * leaves its 4 quantized blocks to the cache; the third finds the pool's
 * spare blocks in the cache and evicts them for its promise; all answer as
 * without the cache, and the last one, sent again, reuses its own. */
static void test_quantized_cache_evicted(void **state) {
    (void)state;
    hr_engine *e = engine(BITS, 40, 0, 1), *off = engine(BITS, 40, -1, 1);
    assert_int_equal(hr_engine_kvq(e)->n_blocks, 8);
    int32_t p[4][100];
    run got, want;
    for (int i = 0; i < 4; i++) {
        tokens_of(p[i], 100, 20 + i);
        collect(submit_gen(e, p[i], 100, GEN), &got);
        collect(submit_gen(off, p[i], 100, GEN), &want);
        assert_int_equal(got.cached, 0);
        same_run(&got, &want, "a converted prompt in a full quantized pool");
    }
    collect(submit_gen(e, p[3], 100, GEN), &got);
    assert_int_equal(got.cached, 99);
    same_run(&got, &want, "the last one again");
    wait_idle(e);
    hr_engine_free(e);
    hr_engine_free(off);
}

static hr_engine *engine_ssd(int start, const char *dir) {
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 256, .kv_bits = BITS,
                        .kv_group = GROUP, .kv_start = start, .ssd_dir = dir};
    hr_engine *e;
    hr_error err = {0};
    if (hr_engine_new(&e, g_model, &o, &err))
        fail_msg("%s", err.msg);
    return e;
}

static int count_kv_files(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls %s/*.kv 2>/dev/null | wc -l", dir);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (f) {
        if (fscanf(f, "%d", &n) != 1)
            n = -1;
        pclose(f);
    }
    return n;
}

/* The SSD tier at start 40: A (100 tokens) converts; its quantized blocks
 * are written to a directory of their own (<fp>-q4g64-start40-f32), its
 * unquantized prefix to the f32 pool's (<fp>). After a restart A again
 * reads its converted blocks back (cached 99: three whole blocks and the
 * tail's rows but the last token's), starts converted and answers as the first
 * time. A server at start 48 shares neither: its converted blocks are keyed
 * by the start (A computes all but the unquantized prefix it can reuse: a
 * whole block and its tail, both from the SSD). A file of the quantized
 * directory moved over the f32 block's (the oldest file) is quarantined,
 * never read. */
static void test_ssd_converted(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_kvstart_ssdXXXXXX";
    assert_non_null(mkdtemp(dir));
    int32_t a[100];
    tokens_of(a, 100, 8);
    run r1, r2, r3;
    hr_engine *e = engine_ssd(40, dir);
    collect(submit_gen(e, a, 100, 6), &r1);
    assert_int_equal(r1.cached, 0);
    wait_idle(e);
    hr_engine_free(e); /* finishes the writes */
    char qdir[4300], udir[4300], cmd[9000];
    snprintf(qdir, sizeof qdir, "%s/%016llx-q4g64-start40-f32", dir,
             (unsigned long long)g_model->fingerprint);
    snprintf(udir, sizeof udir, "%s/%016llx", dir, (unsigned long long)g_model->fingerprint);
    assert_true(count_kv_files(qdir) >= 3); /* 105 tokens: 3 whole blocks */
    assert_int_equal(count_kv_files(udir), 2); /* the prefix of 40: a whole block, its tail */
    e = engine_ssd(40, dir);
    collect(submit_gen(e, a, 100, 6), &r2);
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    assert_int_equal(r2.cached, 99);
    assert_true(st.ssd_hits >= 3);
    same_run(&r2, &r1, "A after a restart (quantized blocks from the SSD) against A");
    wait_idle(e);
    hr_engine_free(e);
    e = engine_ssd(48, dir); /* another start: the f32 prefix of 40, nothing quantized */
    collect(submit_gen(e, a, 100, 6), &r3);
    assert_int_equal(r3.cached, 40);
    wait_idle(e);
    hr_engine_free(e);
    /* a quantized record under an f32 block's name: quarantined, a miss */
    snprintf(cmd, sizeof cmd, "f=$(ls -tr %s/*.kv | head -1); q=$(ls %s/*.kv | head -1); "
             "cp \"$q\" \"$f\"", udir, qdir);
    assert_int_equal(system(cmd), 0);
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 256, .ssd_dir = dir};
    hr_error err = {0};
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0); /* f32, no --kv-bits */
    collect(submit_gen(e, a, 40, 1), &r3);
    hr_engine_stats_get(e, &st);
    assert_int_equal(r3.cached, 0);
    assert_int_equal(st.ssd_quarantined, 1);
    hr_engine_free(e);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A pool "in device memory" (the CPU's ops, said to be a GPU's): a
 * sequence converts through the host (hr_kv_convert's device path) into the
 * same bytes as between host pools. */
static void convert_through_host(void) {
    hr_backend dev = *hr_backend_cpu();
    dev.device_mem = true;
    const hr_hparams *hp = &g_model->hp;
    hr_kv_fmt qf = {.dtype = HR_DTYPE_AFFINE, .bits = BITS, .group = GROUP};
    hr_kv u[2], q[2];
    hr_error err = {0};
    int32_t got[2][2];
    const int rows[2] = {HR_KV_BLOCK, 7};
    float k[256], v[256];
    assert_true(hp->head_dim <= 256);
    for (int d = 0; d < 2; d++) {
        hr_backend *be = d ? &dev : hr_backend_cpu();
        assert_int_equal(hr_kv_init_on(&u[d], be, hp, HR_DTYPE_F32, 3, &err), 0);
        assert_int_equal(hr_kv_init_fmt(&q[d], be, hp, &qf, 4, &err), 0);
        int32_t from[2] = {hr_kv_alloc(&u[d]), hr_kv_alloc(&u[d])};
        for (int b = 0; b < 2; b++)
            for (int l = 0; l < hp->n_layers; l++)
                for (int h = 0; h < hp->n_kv_heads; h++)
                    for (int sl = 0; sl < rows[b]; sl++) {
                        for (int i = 0; i < hp->head_dim; i++) {
                            k[i] = sinf((float)(b * 1000 + l * 100 + h * 10 + sl + i));
                            v[i] = cosf((float)(b * 999 + l * 77 + h * 5 + sl * 3 + i));
                        }
                        hr_kv_store(&u[d], l, from[b], h, sl, k, v);
                    }
        hr_kv_alloc(&q[d]); /* the new blocks are not 0, 1 */
        assert_int_equal(hr_kv_convert(&q[d], &u[d], from, rows, 2, got[d], &err), 0);
        assert_int_equal(u[d].n_free, 3);
    }
    size_t bb = hr_kv_pool_block_bytes(&q[0]);
    char *a = malloc(bb), *b = malloc(bb);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(hr_kv_block_read(&q[0], got[0][i], a, &err), 0);
        assert_int_equal(hr_kv_block_read(&q[1], got[1][i], b, &err), 0);
        for (int l = 0; l < hp->n_layers; l++) /* the rows written: slots [0, rows) */
            for (int side = 0; side < 2; side++) {
                size_t sb = hr_kv_stride_bytes(&q[0]), rb = side ? q[0].vrow_bytes : q[0].row_bytes;
                for (int h = 0; h < hp->n_kv_heads; h++) {
                    size_t at = (size_t)l * bb / hp->n_layers + (side ? sb : 0) +
                                (size_t)h * HR_KV_BLOCK * rb;
                    assert_memory_equal(a + at, b + at, (size_t)rows[i] * rb);
                }
            }
    }
    free(a);
    free(b);
    for (int d = 0; d < 2; d++) {
        hr_kv_deinit(&u[d]);
        hr_kv_deinit(&q[d]);
    }
}

/* Requests that do not fit either pool are refused; a start past the
 * context makes no second pool (nothing ever converts); a conversion of
 * device pools goes through the host (convert_through_host). */
static void test_options(void **state) {
    (void)state;
    convert_through_host();
    hr_engine *e = engine(BITS, 300, -1, 1); /* n_ctx 256 */
    assert_null(hr_engine_kvq(e));
    assert_int_equal(hr_engine_kv(e)->dtype, HR_DTYPE_F32);
    hr_engine_free(e);
    e = engine(BITS, 40, -1, 1);
    assert_non_null(hr_engine_kvq(e));
    assert_int_equal(hr_engine_kvq(e)->dtype, HR_DTYPE_AFFINE);
    assert_int_equal(hr_engine_kv(e)->dtype, HR_DTYPE_F32);
    hr_engine_free(e);
    /* a budget of less than one sequence's share (2 unquantized blocks: the
     * 40 tokens before the start and a decode step's drafts; 8 quantized):
     * a request of 200 tokens does not fit, one of 20 does */
    size_t bb = hr_kv_block_bytes(&g_model->hp, HR_DTYPE_F32);
    hr_engine_opts o = {.n_threads = 1, .max_batch = 1, .n_ctx = 256, .kv_bits = BITS,
                        .kv_group = GROUP, .kv_start = 40, .kv_bytes = 2 * bb,
                        .cache_blocks = -1};
    hr_error err = {0};
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    int32_t p[200];
    tokens_of(p, 200, 5);
    hr_req_params rp = {.prompt = p, .n_prompt = 199, .max_tokens = 1};
    hr_sampler_params_default(&rp.sampler);
    hr_request *r;
    assert_int_equal(hr_request_new(&r, e, &rp, &err), 0);
    assert_int_equal(hr_engine_submit(e, r, &err), HR_EFULL);
    assert_non_null(strstr(err.msg, "--kv-budget"));
    hr_request_release(r);
    run ok;
    collect(submit_gen(e, p, 20, 4), &ok);
    assert_int_equal(ok.n, 4);
    hr_engine_free(e);
}

int main(void) {
    const char *root = getenv("HEARTH_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/hearth-demo", root ? root : ".");
    hr_error err = {0};
    if (hr_model_open(&g_model, dir, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crossing_equals_reference),
        cmocka_unit_test(test_mixed_rows_equal_alone),
        cmocka_unit_test(test_prompt_cache_converted_and_not),
        cmocka_unit_test(test_quantized_cache_evicted),
        cmocka_unit_test(test_ssd_converted),
        cmocka_unit_test(test_options),
    };
    int rc = cmocka_run_group_tests_name("kvstart", tests, NULL, NULL);
    hr_model_free(g_model);
    return rc;
}
