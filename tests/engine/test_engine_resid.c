/* The residual window through the engine (--kv-residual, engine/residual.c,
 * docs/kv-quant.md), on the demo model with TurboQuant 3.5, q8_0 KV, and
 * 4-bit affine KV from position 100 (--quantized-kv-start 100: a sequence
 * converts inside the window [64, 128), whose rows it stored unconverted),
 * each with a window of 64 positions:
 *  - a scored prompt's log-probabilities are the same bits whatever the
 *    prefill chunk (512, 37, 64, 1 tokens a step), and closer to f32 KV's
 *    than without the window;
 *  - a greedy generation gives the same tokens and log-probabilities alone
 *    and batched with two other requests;
 *  - a request that reuses a cached prefix (cut back to its window's start)
 *    gives the bits of the same request on a session without the cache;
 *  - speculative decoding (prompt lookup, the draft model) gives the plain
 *    decode's tokens and log-probabilities;
 *  - the options are refused with one line naming --kv-residual where the
 *    window does not apply. */
#include "hearth.h"
#include "core/file.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hr_llm *g_llm;
static int32_t *g_ids;
static size_t g_n;

static int setup(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char model[4096], file[4096];
    snprintf(model, sizeof model, "%s/models/hearth-demo", root ? root : ".");
    snprintf(file, sizeof file, "%s/tests/fixtures/demo/valid.txt", root ? root : ".");
    hr_error err = {0};
    hr_llm_opts lo = {.n_threads = 2};
    if (hr_llm_load(&g_llm, model, &lo, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    char *text = NULL;
    size_t len = 0; /* its first 8191 bytes: 400 tokens and more */
    int rc = hr_file_read(file, &text, &len, &err) ||
             hr_llm_tokenize(g_llm, text, len < 8191 ? len : 8191, HR_TOKENIZE_ADD_SPECIAL,
                             &g_ids, &g_n, &err) ||
             g_n < 400;
    free(text);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    return rc ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    hr_free(g_ids);
    hr_llm_free(g_llm);
    return 0;
}

static hr_session *session(hr_session_opts o) {
    hr_session *s = NULL;
    hr_error err = {0};
    if (!o.n_ctx)
        o.n_ctx = 512;
    if (hr_session_new(&s, g_llm, &o, &err))
        fail_msg("%s", err.msg);
    return s;
}

/* The log-probabilities of g_ids[0, n) scored from position 1 */
static void score(hr_session *s, int n, float *lp) {
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_tokens = g_ids;
    p.n_prompt_tokens = n;
    p.max_tokens = 0;
    p.temperature = 0;
    p.score_from = 1;
    hr_gen *g = NULL;
    hr_error err = {0};
    hr_gen_event ev;
    if (hr_gen_submit(&g, s, &p, &err))
        fail_msg("%s", err.msg);
    while (hr_gen_next(g, &ev, &err) == 1 && ev.finish == HR_GEN_RUNNING)
        ;
    int m = 0;
    const float *l = hr_gen_prompt_logprobs(g, &m);
    assert_int_equal(m, n);
    memcpy(lp, l, (size_t)n * sizeof *lp);
    hr_gen_free(g);
}

/* A prefix-aligned mean |dlogprob| of a against b over [1, n) */
static double drift(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 1; i < n; i++)
        d += fabs((double)a[i] - b[i]);
    return d / (n - 1);
}

static const hr_session_opts g_fmts[] = {
    {.kv_quant = "turbo", .kv_residual = 64},
    {.kv_dtype = HR_KV_Q8_0, .kv_residual = 64},
    {.kv_bits = 4, .quantized_kv_start = 100, .kv_residual = 64},
};
#define N_FMTS (int)(sizeof g_fmts / sizeof *g_fmts)

static void test_chunks(void **state) {
    (void)state;
    enum { N = 300 };
    float ref[N], plain[N], got[N];
    hr_session *s = session((hr_session_opts){0});
    score(s, N, ref); /* f32 KV */
    hr_session_free(s);
    for (int f = 0; f < N_FMTS; f++) {
        hr_session_opts o = g_fmts[f];
        o.kv_residual = 0;
        s = session(o);
        score(s, N, plain);
        hr_session_free(s);
        float first[N];
        const int chunks[] = {512, 37, 64, 1};
        for (int c = 0; c < 4; c++) {
            o = g_fmts[f];
            o.prefill_chunk = chunks[c];
            s = session(o);
            score(s, N, c ? got : first);
            hr_session_free(s);
            if (c && memcmp(got + 1, first + 1, (N - 1) * sizeof *got))
                fail_msg("format %d: a prefill chunk of %d tokens changes the scores", f,
                         chunks[c]);
        }
        if (g_fmts[f].quantized_kv_start) { /* rows before the start: f32 KV's, bit for bit */
            int n0 = g_fmts[f].quantized_kv_start;
            if (memcmp(first + 1, ref + 1, (size_t)(n0 - 1) * sizeof *ref))
                fail_msg("format %d: the scores before the start are not f32 KV's", f);
            /* a window as long as the context: every row read at full
             * precision, the unconverted rows from where they were stored
             * before the conversion */
            o = g_fmts[f];
            o.kv_residual = 512;
            s = session(o);
            score(s, N, got);
            hr_session_free(s);
            for (int i = 1; i < N; i++)
                if (fabsf(got[i] - ref[i]) > 1e-5f)
                    fail_msg("format %d, a window of the context: position %d scores %g, f32 KV "
                             "%g", f, i, got[i], ref[i]);
        }
        double dw = drift(first, ref, N), dn = drift(plain, ref, N);
        printf("format %d: mean |dlogprob| against f32 KV %.4f without the window, %.4f with "
               "64 positions\n", f, dn, dw);
        if (!(dw < dn && dw > 0))
            fail_msg("format %d: the window's drift %g, without it %g", f, dw, dn);
    }
}

typedef struct run {
    hr_gen *g;
    int32_t tok[64];
    float lp[64];
    int n, cached;
} run;

static void submit_ids(hr_session *s, run *r, const int32_t *ids, int n, int max_tokens) {
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_tokens = ids;
    p.n_prompt_tokens = n;
    p.max_tokens = max_tokens;
    p.temperature = 0;
    p.ignore_eos = 1;
    hr_error err = {0};
    r->n = 0;
    if (hr_gen_submit(&r->g, s, &p, &err))
        fail_msg("%s", err.msg);
}

static void submit(hr_session *s, run *r, int from, int n, int max_tokens) {
    submit_ids(s, r, g_ids + from, n, max_tokens);
}

static void finish(run *r) {
    hr_gen_event ev;
    hr_error err = {0};
    int rc;
    while ((rc = hr_gen_next(r->g, &ev, &err)) == 1 && ev.finish == HR_GEN_RUNNING) {
        assert_true(r->n < 64);
        r->tok[r->n] = ev.token;
        r->lp[r->n++] = ev.logprob;
    }
    assert_int_equal(rc, 1);
    r->cached = ev.cached_tokens;
    hr_gen_free(r->g);
}

static void same(const run *a, const run *b, const char *what) {
    if (a->n != b->n || memcmp(a->tok, b->tok, (size_t)a->n * sizeof *a->tok) ||
        memcmp(a->lp, b->lp, (size_t)a->n * sizeof *a->lp))
        fail_msg("%s: the tokens or their log-probabilities differ", what);
}

static void test_batched_and_cached(void **state) {
    (void)state;
    for (int f = 0; f < N_FMTS; f++) {
        hr_session_opts o = g_fmts[f];
        o.max_batch = 4;
        o.prompt_cache = -1;
        hr_session *s = session(o);
        run alone, with[3];
        submit(s, &alone, 0, 150, 40);
        finish(&alone);
        for (int i = 0; i < 3; i++) /* beside two others of other lengths */
            submit(s, &with[i], i == 1 ? 0 : 200 * i, i == 1 ? 150 : 90 + 20 * i, 40);
        for (int i = 0; i < 3; i++)
            finish(&with[i]);
        same(&alone, &with[1], "batched against alone");
        /* on a session without the cache: the prompt 230 tokens long, and
         * one that leaves the text after 100 */
        int32_t other[140];
        memcpy(other, g_ids, 100 * sizeof *other);
        memcpy(other + 100, g_ids + 300, 40 * sizeof *other);
        run nocache, nocache2;
        submit(s, &nocache, 0, 230, 30);
        finish(&nocache);
        submit_ids(s, &nocache2, other, 140, 20);
        finish(&nocache2);
        hr_session_free(s);
        /* ... and after a request that leaves 180 of them (and what it
         * generated) in the cache, and its last window's rows */
        o.prompt_cache = 0;
        s = session(o);
        run first, hit, cut;
        submit(s, &first, 0, 180, 5);
        finish(&first);
        submit(s, &hit, 0, 230, 30);
        finish(&hit);
        submit_ids(s, &cut, other, 140, 20);
        finish(&cut);
        hr_session_free(s);
        printf("format %d: %d cached tokens reused where the first request's last window "
               "holds the rest; %d of 100 where none does (a window starts every 64)\n", f,
               hit.cached, cut.cached);
        assert_true(hit.cached >= 180 && hit.cached % 64);
        assert_int_equal(cut.cached, 64);
        same(&nocache, &hit, "resumed in a kept window against without the cache");
        same(&nocache2, &cut, "cut back to a window's start against without the cache");
    }
}

/* A request that resumes in a kept window but must wait for KV blocks
 * (another request holds them) gives the window's rows back each time it
 * waits: it waits through the other's whole decode, and answers as
 * without the cache after it (a leak of them ran the window pool dry:
 * an abort) */
static void test_wait_in_window(void **state) {
    (void)state;
    hr_session_opts o = g_fmts[0];
    o.max_batch = 2;
    o.prompt_cache = -1;
    hr_session *s = session(o);
    run ref;
    submit(s, &ref, 0, 230, 30);
    finish(&ref);
    hr_session_free(s);
    o.prompt_cache = 0;
    o.kv_bytes = 12 * 32 * 1280; /* 12 blocks of TurboQuant 3.5 */
    s = session(o);
    run first, busy, hit;
    submit(s, &first, 0, 180, 5); /* 6 blocks, its last window kept */
    finish(&first);
    submit(s, &busy, 300, 60, 60); /* 4 blocks, decoding 60 tokens */
    submit(s, &hit, 0, 230, 30);   /* 9 blocks (6 cached, some evicted as it waits) */
    finish(&busy);
    finish(&hit);
    hr_session_free(s);
    printf("waited in a kept window: %d cached tokens\n", hit.cached);
    assert_true(hit.cached > 128 && hit.cached % 64); /* inside the kept window [128, 184) */
    same(&ref, &hit, "resumed in a kept window after a wait against without the cache");
}

/* Speculative decoding (prompt lookup and the draft model) over the
 * window: the verify steps write past the sequence's end and roll back
 * across blocks and windows; the output stays the plain decode's. */
static void test_speculative(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char draft[4096];
    snprintf(draft, sizeof draft, "%s/models/hearth-demo-draft", root ? root : ".");
    for (int mode = 0; mode < 4; mode++) { /* TurboQuant, then 4-bit affine from 96 */
        hr_session_opts o = g_fmts[mode < 2 ? 0 : 2];
        /* with a start (96 here, a block's end): a prompt of 90, so that
         * verify steps cross it unconverted, into the blocks reserved past
         * it for the drafts */
        int n = mode < 2 ? 100 : 90;
        if (mode >= 2)
            o.quantized_kv_start = 96;
        o.prompt_cache = -1;
        hr_session *s = session(o);
        run plain, spec;
        submit(s, &plain, 40, n, 60);
        finish(&plain);
        hr_session_free(s);
        o.spec = mode % 2 ? "draft" : "ngram";
        o.draft_model = mode % 2 ? draft : NULL;
        o.num_draft_tokens = 5;
        s = session(o);
        submit(s, &spec, 40, n, 60);
        finish(&spec);
        hr_session_stats st;
        hr_session_stats_get(s, &st);
        hr_session_free(s);
        printf("%s over the window: %ld drafted, %ld accepted\n", o.spec,
               (long)st.spec_drafted, (long)st.spec_accepted);
        assert_true(st.spec_drafted > 0);
        same(&plain, &spec, mode % 2 ? "the draft model against plain decoding"
                                 : "prompt lookup against plain decoding");
    }
}

static void test_refusals(void **state) {
    (void)state;
    hr_error err = {0};
    hr_session *s = NULL;
    const hr_session_opts bad[] = {
        {.kv_quant = "turbo", .kv_residual = 48},          /* not whole blocks */
        {.kv_residual = 64},                               /* f32 KV: nothing to keep */
        {.kv_bits = 4, .quantized_kv_start = 100000, .kv_residual = 64}, /* never converts */
    };
    const int want[] = {HR_EINVAL, HR_EINVAL, HR_EINVAL};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(hr_session_new(&s, g_llm, &bad[i], &err), want[i]);
        assert_non_null(strstr(err.msg, "--kv-residual"));
    }
    assert_int_equal(hr_session_new(&s, g_llm, &(hr_session_opts){.kv_residual = -32}, &err),
                     HR_ERANGE);
    assert_non_null(strstr(err.msg, "--kv-residual"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_batched_and_cached),
        cmocka_unit_test(test_wait_in_window),
        cmocka_unit_test(test_speculative),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
