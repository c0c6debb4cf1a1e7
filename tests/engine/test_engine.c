/* The engine: greedy output through the batched scheduler equals the
 * transformers oracle, and every request's tokens are identical whether it
 * ran alone or in a batch of 8 with requests of other lengths; cancel, stop
 * tokens, limits and errors. */
#include "core/error.h"
#include "engine/engine.h"
#include "model/kv.h"
#include "model/model.h"

#include "../device_arg.h"

#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <xxhash.h>
#include <jansson.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *g_device; /* --device NAME: the backend under test */
static hr_model *g_model;
static json_t *g_ref;

static hr_request *submit(hr_engine *e, const int32_t *prompt, int n, int max_tokens,
                          const int32_t *stop, int n_stop) {
    hr_req_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = max_tokens,
                       .stop_ids = stop, .n_stop_ids = n_stop, .top_logprobs = 2};
    hr_sampler_params_default(&p.sampler);
    hr_request *r;
    hr_error err;
    if (hr_request_new(&r, e, &p, &err) || hr_engine_submit(e, r, &err))
        fail_msg("%s", err.msg);
    return r;
}

static int collect(hr_request *r, int32_t *out, int cap) {
    int n = 0;
    hr_step s;
    int rc;
    while ((rc = hr_request_wait(r, n, &s, 5000)) == 1 && n < cap)
        out[n++] = s.token;
    if (rc != 0)
        fail_msg("request ended with wait rc %d after %d tokens (finish %d)", rc, n, hr_request_finish(r, NULL));
    return n;
}

/* No request holds KV blocks (the prompt cache may index some); the stat
 * is published at the end of an engine step: poll for it. */
static void expect_all_blocks_free(hr_engine *e) {
    hr_engine_stats st;
    for (int i = 0; i < 5000; i++) {
        hr_engine_stats_get(e, &st);
        if (st.kv_blocks_requests == 0 &&
            st.kv_blocks_free + st.kv_blocks_cached == st.kv_blocks_total)
            return;
        usleep(1000);
    }
    fail_msg("%d KV blocks held by requests, %d free, %d cached of %d", st.kv_blocks_requests,
             st.kv_blocks_free, st.kv_blocks_cached, st.kv_blocks_total);
}

static int prompt_of(int i, int32_t *p) {
    /* eight prompts of different lengths: the oracle's three, then variants */
    json_t *cs = json_object_get(g_ref, "cases");
    json_t *pt = json_object_get(json_array_get(cs, (size_t)(i % 3)), "prompt_tokens");
    int n = (int)json_array_size(pt) - (i / 3) * 2;
    for (int k = 0; k < n; k++)
        p[k] = (int32_t)json_integer_value(json_array_get(pt, (size_t)k));
    return n;
}

static void test_batched_equals_alone_equals_oracle(void **state) {
    (void)state;
    hr_error err;
    int32_t prompts[8][64], alone[8][32], batched[8][32];
    int np[8], na[8], nb[8];
    for (int i = 0; i < 8; i++)
        np[i] = prompt_of(i, prompts[i]);

    hr_engine_opts one = {.n_threads = 2, .max_batch = 1, .n_ctx = 256, .prefill_chunk = 16};
    hr_engine *e;
    assert_int_equal(hr_engine_new(&e, g_model, &one, &err), 0);
    for (int i = 0; i < 8; i++) {
        hr_request *r = submit(e, prompts[i], np[i], 16, NULL, 0);
        na[i] = collect(r, alone[i], 32);
        assert_int_equal(hr_request_finish(r, NULL), HR_FINISH_LENGTH);
        hr_request_release(r);
    }
    hr_engine_free(e);

    /* the oracle's greedy tokens for the first three */
    json_t *cs = json_object_get(g_ref, "cases");
    for (int i = 0; i < 3; i++) {
        json_t *gt = json_object_get(json_array_get(cs, (size_t)i), "greedy_tokens");
        assert_int_equal(na[i], 16);
        for (int k = 0; k < 16; k++)
            assert_int_equal(alone[i][k], json_integer_value(json_array_get(gt, (size_t)k)));
    }

    /* with a warm-up token first: nothing of it in the output or the stats */
    hr_engine_opts eight = {.n_threads = 2, .max_batch = 8, .n_ctx = 256, .prefill_chunk = 16,
                            .warmup = true};
    assert_int_equal(hr_engine_new(&e, g_model, &eight, &err), 0);
    hr_request *rs[8];
    for (int i = 0; i < 8; i++)
        rs[i] = submit(e, prompts[i], np[i], 16, NULL, 0);
    for (int i = 0; i < 8; i++) {
        nb[i] = collect(rs[i], batched[i], 32);
        hr_request_release(rs[i]);
        assert_int_equal(nb[i], na[i]);
        assert_memory_equal(batched[i], alone[i], (size_t)na[i] * sizeof(int32_t));
    }
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    assert_int_equal(st.requests_total, 8);
    assert_int_equal(st.generated_tokens, 8 * 16);
    int sum = 0;
    for (int i = 0; i < 8; i++)
        sum += np[i];
    assert_int_equal(st.prompt_tokens, sum);
    expect_all_blocks_free(e);
    hr_engine_free(e);
    printf("engine: 8 requests batched == alone; first 3 == transformers oracle\n");
}

/* Seeded sampling with top logprobs: a batch's rows are sampled on the
 * pool's threads, each with its own request's sampler; every step (token,
 * logprob, alternatives) equals the same request run alone. */
static void run_sampled(const hr_engine_opts *o, hr_step out[8][12]) {
    hr_error err;
    hr_engine *e;
    assert_int_equal(hr_engine_new(&e, g_model, o, &err), 0);
    hr_request *rs[8];
    int32_t prompts[8][64];
    for (int i = 0; i < 8; i++) {
        hr_req_params p = {.n_prompt = prompt_of(i, prompts[i]), .prompt = prompts[i],
                           .max_tokens = 12, .top_logprobs = 3};
        hr_sampler_params_default(&p.sampler);
        p.sampler.temp = 0.9f;
        p.sampler.top_p = 0.95f;
        p.sampler.seed = 1000 + (uint64_t)i;
        if (hr_request_new(&rs[i], e, &p, &err) || hr_engine_submit(e, rs[i], &err))
            fail_msg("%s", err.msg);
        if (o->max_batch == 1) { /* alone: one after the other */
            for (int k = 0; k < 12; k++)
                assert_int_equal(hr_request_wait(rs[i], k, &out[i][k], 5000), 1);
        }
    }
    for (int i = 0; i < 8; i++) {
        for (int k = 0; k < 12; k++)
            assert_int_equal(hr_request_wait(rs[i], k, &out[i][k], 5000), 1);
        hr_request_release(rs[i]);
    }
    hr_engine_free(e);
}

static void test_sampled_rows_batched_equal_alone(void **state) {
    (void)state;
    static hr_step alone[8][12], batched[8][12];
    run_sampled(&(hr_engine_opts){.n_threads = 2, .max_batch = 1, .n_ctx = 256}, alone);
    run_sampled(&(hr_engine_opts){.n_threads = 2, .max_batch = 8, .n_ctx = 256}, batched);
    int differ = 0;
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 12; k++) {
            const hr_step *a = &alone[i][k], *b = &batched[i][k];
            assert_int_equal(b->token, a->token);
            assert_true(b->logprob == a->logprob);
            assert_int_equal(b->n_top, 3);
            assert_int_equal(a->n_top, 3);
            assert_memory_equal(b->top_ids, a->top_ids, 3 * sizeof(int32_t));
            assert_memory_equal(b->top_lps, a->top_lps, 3 * sizeof(float));
            differ += a->token != alone[0][k].token;
        }
    assert_true(differ > 0); /* the seeds make the requests differ */
}

/* The three prompts of a fixture's oracle run together through e; each must
 * equal the oracle's greedy continuation and have `cached` prompt tokens
 * from the cache (-1: all of them, the last logits from the logits cache;
 * -2: whole blocks before the last token). */
static void run_oracle_cases(hr_engine *e, json_t *ref, const char *name, int cached) {
    hr_error err;
    hr_request *rs[3];
    json_t *cs = json_object_get(ref, "cases");
    int np[3];
    for (int i = 0; i < 3; i++) {
        json_t *pt = json_object_get(json_array_get(cs, (size_t)i), "prompt_tokens");
        int32_t p[128];
        np[i] = (int)json_array_size(pt);
        for (int k = 0; k < np[i]; k++)
            p[k] = (int32_t)json_integer_value(json_array_get(pt, (size_t)k));
        hr_req_params rp = {.prompt = p, .n_prompt = np[i], .max_tokens = 16};
        hr_sampler_params_default(&rp.sampler);
        assert_int_equal(hr_request_new(&rs[i], e, &rp, &err), 0);
        assert_int_equal(hr_engine_submit(e, rs[i], &err), 0);
    }
    for (int i = 0; i < 3; i++) {
        int32_t out[32];
        int n = collect(rs[i], out, 32);
        json_t *gt = json_object_get(json_array_get(cs, (size_t)i), "greedy_tokens");
        assert_int_equal(n, 16);
        for (int k = 0; k < 16; k++)
            if (out[k] != json_integer_value(json_array_get(gt, (size_t)k)))
                fail_msg("%s prompt %d step %d: %d, oracle %d", name, i, k, out[k],
                         (int)json_integer_value(json_array_get(gt, (size_t)k)));
        if (cached >= 0)
            assert_int_equal(hr_request_cached_tokens(rs[i]), cached);
        else if (cached == -2)
            assert_int_equal(hr_request_cached_tokens(rs[i]), (np[i] - 1) / 32 * 32);
        else /* the whole prompt, its first token from the logits cache */
            assert_int_equal(hr_request_cached_tokens(rs[i]), np[i]);
        hr_request_release(rs[i]);
    }
    expect_all_blocks_free(e);
}

/* Through the batched engine, the three prompts of several fixtures run
 * together and each equals the oracle's greedy continuation: longrope
 * (recomputed when a sequence passes its original length), sliding windows,
 * q/k norms, experts (batch-invariant routing), attention sinks, gated
 * DeltaNet and Mamba-2 (a recurrent state per sequence). A second round reuses the whole
 * prompt from the prompt cache and its last logits from the logits cache (longrope runs
 * without them; hybrid models whole blocks up to the last block boundary before the last
 * token) and still equals the oracle. */
static void test_engine_oracle_archs(void **state) {
    (void)state;
    static const char *cases[] = {"phi3-longrope", "gemma3_text", "qwen3", "gemma2",
                                  "qwen3-bf16", "gemma3_text-bf16",
                                  "qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "gpt_oss",
                                  "qwen3_next", "glm4_moe", "granitemoe", "granitemoehybrid",
                                  "gemma4_moe"};
    const char *root = getenv("HEARTH_ROOT");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char dir[4096], refp[4200];
        snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", root ? root : ".", cases[c]);
        snprintf(refp, sizeof refp, "%s/ref.json", dir);
        hr_model *m;
        hr_error err;
        int rc = hr_model_open_on(&m, dir, g_device, &err);
        if (rc == HR_EUNSUPPORTED && strstr(err.msg, "not supported yet on ")) {
            printf("%s skipped: %s\n", cases[c], err.msg); /* CPU-only families */
            continue;
        }
        assert_int_equal(rc, 0);
        json_t *ref = json_load_file(refp, 0, NULL);
        hr_engine_opts o = {.n_threads = 2, .max_batch = 3, .n_ctx = 128, .prefill_chunk = 16};
        hr_engine *e;
        assert_int_equal(hr_engine_new(&e, m, &o, &err), 0);
        run_oracle_cases(e, ref, cases[c], 0);
        /* longrope runs without the cache; recurrent state (qwen3_next) reuses whole
         * blocks up to the last block boundary before the prompt's last token */
        bool uncached = !strcmp(cases[c], "phi3-longrope");
        bool hybrid = m->hp.n_linear > 0;
        run_oracle_cases(e, ref, cases[c], uncached ? 0 : hybrid ? -2 : -1);
        hr_engine_free(e);
        json_decref(ref);
        hr_model_free(m);
    }
}

/* Hybrid models (recurrent layers): the prompt cache keeps the layers' state
 * at block boundaries. A request's greedy tokens and every logprob are
 * bit-identical with the cache (RAM, then the SSD tier of a new engine) and
 * without it: an equal prompt, and a prompt that continues an earlier
 * request's prompt and answer (its state at the last boundary the answer
 * crossed). */
typedef struct run_out {
    int n, cached;
    hr_step steps[24];
} run_out;

static void run_one(hr_engine *e, const int32_t *p, int n, run_out *o) {
    hr_req_params rp = {.prompt = p, .n_prompt = n, .max_tokens = 24, .top_logprobs = 4};
    hr_sampler_params_default(&rp.sampler);
    hr_request *r;
    hr_error err;
    if (hr_request_new(&r, e, &rp, &err) || hr_engine_submit(e, r, &err))
        fail_msg("%s", err.msg);
    o->n = 0;
    while (o->n < 24 && hr_request_wait(r, o->n, &o->steps[o->n], 5000) == 1)
        o->n++;
    assert_int_equal(o->n, 24);
    o->cached = hr_request_cached_tokens(r);
    hr_request_release(r);
}

static void expect_same(const run_out *a, const run_out *b, const char *what) {
    for (int k = 0; k < 24; k++)
        if (memcmp(&a->steps[k], &b->steps[k], sizeof a->steps[k]))
            fail_msg("%s: step %d differs (token %d vs %d, logprob %.9g vs %.9g)", what, k,
                     a->steps[k].token, b->steps[k].token, a->steps[k].logprob,
                     b->steps[k].logprob);
}

static void hybrid_cache_case(const char *name) {
    const char *root = getenv("HEARTH_ROOT");
    char dir[4096], refp[4200], ssd[64];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", root ? root : ".", name);
    snprintf(refp, sizeof refp, "%s/ref.json", dir);
    hr_model *m;
    hr_error err;
    int rc = hr_model_open_on(&m, dir, g_device, &err);
    if (rc == HR_EUNSUPPORTED && strstr(err.msg, "not supported yet on ")) {
        printf("%s skipped: %s\n", name, err.msg);
        return;
    }
    assert_int_equal(rc, 0);
    assert_true(m->hp.n_linear > 0);
    json_t *ref = json_load_file(refp, 0, NULL);
    json_t *pt = json_object_get(json_array_get(json_object_get(ref, "cases"), 2),
                                 "prompt_tokens");
    int32_t a[160];
    int na = (int)json_array_size(pt);
    for (int k = 0; k < na; k++)
        a[k] = (int32_t)json_integer_value(json_array_get(pt, (size_t)k));
    hr_engine_opts off = {.n_threads = 2, .max_batch = 2, .n_ctx = 160, .prefill_chunk = 16,
                          .cache_blocks = -1};
    hr_engine *e;
    assert_int_equal(hr_engine_new(&e, m, &off, &err), 0);
    run_out plain, cont_plain, got;
    run_one(e, a, na, &plain);
    int32_t b[160]; /* a, its answer but the last token, and more */
    int nb = 0;
    for (int k = 0; k < na; k++)
        b[nb++] = a[k];
    for (int k = 0; k < 23; k++)
        b[nb++] = plain.steps[k].token;
    for (int k = 0; k < 10; k++)
        b[nb++] = (int32_t)(3 + (k * 37) % 500);
    run_one(e, b, nb, &cont_plain);
    hr_engine_free(e);

    snprintf(ssd, sizeof ssd, "/tmp/hearth-hybrid-ssd-%d", (int)getpid());
    hr_engine_opts on = {.n_threads = 2, .max_batch = 2, .n_ctx = 160, .prefill_chunk = 16,
                         .ssd_dir = ssd, .ssd_max_bytes = (size_t)1 << 30,
                         .warmup = true}; /* its token's state neither cached nor kept */
    assert_int_equal(hr_engine_new(&e, m, &on, &err), 0);
    run_one(e, a, na, &got); /* nothing cached yet */
    assert_int_equal(got.cached, 0);
    expect_same(&plain, &got, "first run with the cache on");
    run_one(e, a, na, &got); /* the state at the last boundary before a's last token */
    assert_int_equal(got.cached, (na - 1) / 32 * 32);
    assert_true(got.cached > 0);
    expect_same(&plain, &got, "an equal prompt from the cache");
    run_one(e, b, nb, &got); /* a's answer crossed boundaries: the latest one's state */
    assert_int_equal(got.cached, (na + 23 - 1) / 32 * 32);
    assert_true(got.cached > (na - 1) / 32 * 32);
    expect_same(&cont_plain, &got, "a continued prompt from the cache");
    hr_engine_free(e);

    /* a new engine: the blocks and their states come back from the SSD tier */
    assert_int_equal(hr_engine_new(&e, m, &on, &err), 0);
    run_one(e, b, nb, &got);
    assert_true(got.cached > (na - 1) / 32 * 32);
    expect_same(&cont_plain, &got, "a continued prompt from the SSD tier");
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    assert_true(st.ssd_hits > 0);
    hr_engine_free(e);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ssd);
    assert_int_equal(system(cmd), 0);
    printf("%s: cached == uncached, bit-identical (prompt cache RAM and SSD, %d and %d "
           "tokens reused)\n", name, (na - 1) / 32 * 32, got.cached);
    json_decref(ref);
    hr_model_free(m);
}

static void test_hybrid_prompt_cache(void **state) {
    (void)state;
    hybrid_cache_case("qwen3_next");
    hybrid_cache_case("granitemoehybrid");
}

static void test_stop_cancel_limits(void **state) {
    (void)state;
    hr_error err;
    hr_engine_opts o = {.n_threads = 1, .max_batch = 2, .n_ctx = 64};
    hr_engine *e;
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    int32_t p[64], out[64];
    int n = prompt_of(0, p);
    json_t *gt = json_object_get(json_array_get(json_object_get(g_ref, "cases"), 0), "greedy_tokens");
    int32_t stop = (int32_t)json_integer_value(json_array_get(gt, 3));
    hr_request *r = submit(e, p, n, 16, &stop, 1);
    int got = collect(r, out, 64);
    assert_true(got <= 3); /* ends at the first occurrence of the stop token */
    assert_int_equal(hr_request_finish(r, NULL), HR_FINISH_STOP);
    hr_request_release(r);

    /* context limit: max_tokens is capped so prompt + output fit n_ctx */
    r = submit(e, p, n, 1000, NULL, 0);
    assert_int_equal(collect(r, out, 64), 64 - n);
    assert_int_equal(hr_request_finish(r, NULL), HR_FINISH_LENGTH);
    hr_request_release(r);

    /* cancel: the request ends and its blocks come back (a long request, so
     * the cancel lands long before it could finish) */
    hr_engine *big;
    hr_engine_opts bo = {.n_threads = 1, .max_batch = 1, .n_ctx = 4096};
    assert_int_equal(hr_engine_new(&big, g_model, &bo, &err), 0);
    r = submit(big, p, n, 4000, NULL, 0);
    hr_step s;
    assert_int_equal(hr_request_wait(r, 0, &s, 5000), 1);
    hr_request_cancel(r);
    int seen = 1;
    while (hr_request_wait(r, seen, &s, 5000) == 1)
        seen++;
    assert_true(seen < 4000);
    assert_int_equal(hr_request_finish(r, NULL), HR_FINISH_CANCELLED);
    hr_request_release(r);
    expect_all_blocks_free(big);
    hr_engine_free(big);

    /* errors */
    int32_t longp[80] = {0};
    hr_req_params rp = {.prompt = longp, .n_prompt = 80, .max_tokens = 1};
    hr_sampler_params_default(&rp.sampler);
    assert_int_equal(hr_request_new(&r, e, &rp, &err), 0);
    assert_int_equal(hr_engine_submit(e, r, &err), HR_ERANGE);
    assert_non_null(strstr(err.msg, "context limit is 64 tokens"));
    hr_request_release(r);
    rp.n_prompt = 2;
    longp[1] = 1 << 20;
    assert_int_equal(hr_request_new(&r, e, &rp, &err), HR_ERANGE);
    rp.n_prompt = 0;
    assert_int_equal(hr_request_new(&r, e, &rp, &err), HR_EINVAL);
    longp[1] = 0;
    rp.n_prompt = 2;
    rp.sampler.top_p = 2;
    assert_int_equal(hr_request_new(&r, e, &rp, &err), HR_ERANGE);
    assert_non_null(strstr(err.msg, "top_p"));

    /* shutdown with work in flight: everything ends cancelled */
    hr_request *a = submit(e, p, n, 40, NULL, 0), *b = submit(e, p, n, 40, NULL, 0),
               *c = submit(e, p, n, 40, NULL, 0);
    hr_engine_free(e);
    assert_int_not_equal(hr_request_finish(a, NULL), HR_FINISH_NONE);
    assert_int_not_equal(hr_request_finish(c, NULL), HR_FINISH_NONE);
    hr_request_release(a);
    hr_request_release(b);
    hr_request_release(c);
}

static void test_prompt_cache(void **state) {
    (void)state;
    hr_error err;
    hr_engine_opts o = {.n_threads = 2, .max_batch = 4, .n_ctx = 256};
    hr_engine *e, *nocache;
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    hr_engine_opts off = o;
    off.cache_blocks = -1;
    assert_int_equal(hr_engine_new(&nocache, g_model, &off, &err), 0);
    /* a 100-token shared prefix, two different tails */
    int32_t a[120], b[120], out1[32], out2[32], ref[32];
    for (int i = 0; i < 120; i++)
        a[i] = b[i] = (int32_t)((i * 37 + 11) % 500);
    for (int i = 100; i < 120; i++)
        b[i] = (int32_t)((i * 13 + 5) % 500);
    hr_request *r = submit(nocache, a, 120, 12, NULL, 0);
    int nref = collect(r, ref, 32);
    hr_request_release(r);

    r = submit(e, a, 120, 12, NULL, 0); /* cold */
    assert_int_equal(collect(r, out1, 32), nref);
    assert_int_equal(hr_request_cached_tokens(r), 0);
    hr_request_release(r);
    r = submit(e, a, 120, 12, NULL, 0); /* warm: same tokens, KV reused */
    assert_int_equal(collect(r, out2, 32), nref);
    assert_int_equal(hr_request_cached_tokens(r), 120); /* the last one's logits cached too */
    assert_memory_equal(out2, ref, (size_t)nref * sizeof(int32_t));
    assert_memory_equal(out1, ref, (size_t)nref * sizeof(int32_t));
    hr_request_release(r);
    /* a different tail shares the 100-token prefix: 3 blocks and 4 rows */
    r = submit(nocache, b, 120, 12, NULL, 0);
    nref = collect(r, ref, 32);
    hr_request_release(r);
    r = submit(e, b, 120, 12, NULL, 0);
    assert_int_equal(collect(r, out1, 32), nref);
    assert_memory_equal(out1, ref, (size_t)nref * sizeof(int32_t));
    assert_int_equal(hr_request_cached_tokens(r), 100);
    hr_request_release(r);
    expect_all_blocks_free(e);
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    /* a: 131 tokens in KV -> 4 full blocks and a tail; b adds its block 3
     * and its tail */
    assert_int_equal(st.kv_blocks_cached, 7);
    assert_int_equal(st.cached_tokens, 220);
    hr_engine_free(e);
    hr_engine_free(nocache);

    /* a pool too small for the cache and the work: the cache gives way */
    hr_engine_opts tiny = {.n_threads = 1, .max_batch = 2, .n_ctx = 128,
                           .kv_bytes = 8 * hr_kv_block_bytes(&g_model->hp, HR_DTYPE_F32)};
    assert_int_equal(hr_engine_new(&e, g_model, &tiny, &err), 0);
    for (int k = 0; k < 6; k++) {
        int32_t p[100];
        for (int i = 0; i < 100; i++)
            p[i] = (int32_t)((i * 7 + k * 101) % 500);
        r = submit(e, p, 100, 20, NULL, 0);
        assert_int_equal(collect(r, out1, 32), 20);
        hr_request_release(r);
    }
    expect_all_blocks_free(e);
    hr_engine_free(e);
}

/* A prompt's whole blocks are in the cache once its prefill completes, not
 * only when its request ends: a request for the same prompt admitted while
 * the first still decodes reuses them (the other choices of an n > 1
 * request), and answers as without the cache. */
static void test_prompt_cache_while_running(void **state) {
    (void)state;
    hr_error err;
    hr_engine_opts o = {.n_threads = 2, .max_batch = 4, .n_ctx = 512};
    hr_engine *e, *nocache;
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    hr_engine_opts off = o;
    off.cache_blocks = -1;
    assert_int_equal(hr_engine_new(&nocache, g_model, &off, &err), 0);
    int32_t a[120], out[32], ref[32];
    for (int i = 0; i < 120; i++)
        a[i] = (int32_t)((i * 41 + 7) % 500);
    hr_request *r = submit(nocache, a, 120, 12, NULL, 0);
    int nref = collect(r, ref, 32);
    hr_request_release(r);
    hr_request *first = submit(e, a, 120, 380, NULL, 0);
    hr_step st;
    assert_int_equal(hr_request_wait(first, 0, &st, 5000), 1); /* its prompt is computed */
    r = submit(e, a, 120, 12, NULL, 0);
    assert_int_equal(hr_request_wait(r, 0, &st, 5000), 1);
    /* still running: its tail block (tokens 96..119) is its own until it ends */
    assert_int_equal(hr_request_finish(first, NULL), HR_FINISH_NONE);
    assert_int_equal(hr_request_cached_tokens(r), 96);
    assert_int_equal(collect(r, out, 32), nref);
    assert_memory_equal(out, ref, (size_t)nref * sizeof(int32_t));
    hr_request_release(r);
    hr_request_cancel(first);
    hr_request_release(first);
    expect_all_blocks_free(e);
    hr_engine_free(e);
    hr_engine_free(nocache);
}

/* Token-granular reuse: a prompt shorter than a block sent twice reuses all
 * but its last token; a prompt sharing part of a block reuses exactly the
 * common tokens; a conversation's next turn reuses the previous answer's
 * tail. Alone and batched, every answer equals the uncached one. */
static void test_prompt_cache_tokens(void **state) {
    (void)state;
    hr_error err;
    hr_engine_opts o = {.n_threads = 2, .max_batch = 4, .n_ctx = 256, .prefill_chunk = 16};
    hr_engine *e, *nocache;
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    hr_engine_opts off = o;
    off.cache_blocks = -1;
    assert_int_equal(hr_engine_new(&nocache, g_model, &off, &err), 0);
    /* p0: 20 tokens; p1: p0's first 12, then others; p2: p0, its answer
     * (11 tokens in KV) and a new turn; p3: p0's first 5, then others */
    int32_t p[4][48], ref[4][16], out[16];
    int np[4] = {20, 20, 45, 9}, nref[4];
    for (int i = 0; i < 20; i++)
        p[0][i] = p[1][i] = (int32_t)((i * 29 + 3) % 500);
    for (int i = 12; i < 20; i++)
        p[1][i] = (int32_t)(400 + i);
    memcpy(p[3], p[0], 5 * sizeof(int32_t));
    for (int i = 5; i < 9; i++)
        p[3][i] = (int32_t)(450 + i);
    hr_request *r = submit(nocache, p[0], 20, 12, NULL, 0);
    nref[0] = collect(r, ref[0], 16);
    hr_request_release(r);
    assert_int_equal(nref[0], 12);
    memcpy(p[2], p[0], 20 * sizeof(int32_t));
    memcpy(p[2] + 20, ref[0], 11 * sizeof(int32_t));
    for (int i = 31; i < 45; i++)
        p[2][i] = (int32_t)((i * 17 + 1) % 500);
    for (int i = 1; i < 4; i++) {
        r = submit(nocache, p[i], np[i], 12, NULL, 0);
        nref[i] = collect(r, ref[i], 16);
        hr_request_release(r);
    }
    /* one at a time: cold, the same again, part of a block, the next turn */
    static const int order[] = {0, 0, 1, 2}, want[] = {0, 20, 12, 31};
    for (int k = 0; k < 4; k++) {
        int i = order[k];
        r = submit(e, p[i], np[i], 12, NULL, 0);
        assert_int_equal(collect(r, out, 16), nref[i]);
        assert_memory_equal(out, ref[i], (size_t)nref[i] * sizeof(int32_t));
        assert_int_equal(hr_request_cached_tokens(r), want[k]);
        hr_request_release(r);
    }
    /* batched: p0..p2 are cached whole with their last logits, p3 shares 5
     * tokens with them */
    hr_request *rs[4];
    for (int i = 0; i < 4; i++)
        rs[i] = submit(e, p[i], np[i], 12, NULL, 0);
    static const int want_b[] = {20, 20, 45, 5};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(collect(rs[i], out, 16), nref[i]);
        assert_memory_equal(out, ref[i], (size_t)nref[i] * sizeof(int32_t));
        assert_int_equal(hr_request_cached_tokens(rs[i]), want_b[i]);
        hr_request_release(rs[i]);
    }
    expect_all_blocks_free(e);
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    assert_int_equal(st.cached_tokens, 20 + 12 + 31 + 20 + 20 + 45 + 5);
    hr_engine_free(e);
    hr_engine_free(nocache);
}

static hr_request *run_prompt(hr_engine *e, const int32_t *p, int n, int32_t *out, int *n_out) {
    hr_request *r = submit(e, p, n, 12, NULL, 0);
    *n_out = collect(r, out, 32);
    return r;
}

static int count_files(const char *dir, const char *suffix) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "find %s -name '*%s' | wc -l", dir, suffix);
    FILE *f = popen(cmd, "r");
    int n = -1;
    if (fscanf(f, "%d", &n) != 1)
        n = -1;
    pclose(f);
    return n;
}

/* A run of blocks read back from the SSD tier is left in flight under the
 * step that reads it (the forward waits for each layer of it). When a
 * block then fails its checks, the request that got it is cut back to the
 * blocks before it (its cached count says so) and the step is dropped and
 * computed again: a request decoding beside it gives what it gives alone. */
static void test_ssd_overlap_fault(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_ssd_ov_XXXXXX", cmd[4400];
    assert_non_null(mkdtemp(dir));
    hr_error err;
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 256, .ssd_dir = dir};
    hr_engine_opts plain = {.n_threads = 2, .max_batch = 2, .n_ctx = 256};
    int32_t p[120], q[16], ref[32], out[32], qref[160], qout[160];
    for (int i = 0; i < 120; i++)
        p[i] = (int32_t)((i * 53 + 7) % 500);
    for (int i = 0; i < 16; i++)
        q[i] = (int32_t)((i * 31 + 5) % 400);
    int nref, n;
    hr_engine *e;
    assert_int_equal(hr_engine_new(&e, g_model, &plain, &err), 0);
    hr_request *a = submit(e, q, 16, 160, NULL, 0);
    assert_int_equal(collect(a, qref, 160), 160);
    hr_request_release(a);
    hr_engine_free(e);
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    hr_request_release(run_prompt(e, p, 120, ref, &nref)); /* 3 whole blocks, a tail */
    hr_engine_free(e);

    for (int round = 0; round < 2; round++) {
        /* round 0: block 2's file fails its checksum, found after the step
         * that read it (dropped); round 1: block 1's is truncated, found
         * when the run opens it */
        uint64_t key = 0;
        for (int b = 0; b <= 2 - round; b++)
            key = XXH3_64bits_withSeed(p + b * 32, 32 * sizeof *p, key);
        if (round == 0)
            snprintf(cmd, sizeof cmd, "printf 'X' | dd of=$(ls %s/*/%016llx.kv) bs=1 "
                     "seek=7000 conv=notrunc status=none", dir, (unsigned long long)key);
        else
            snprintf(cmd, sizeof cmd, "f=$(ls %s/*/%016llx.kv); head -c 2000 $f > $f.x && "
                     "mv $f.x $f", dir, (unsigned long long)key);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
        a = submit(e, q, 16, 160, NULL, 0);
        hr_step s0;
        assert_int_equal(hr_request_wait(a, 0, &s0, 5000), 1); /* decoding when b comes */
        hr_request *b = submit(e, p, 120, 12, NULL, 0);
        n = collect(b, out, 32);
        assert_int_equal(n, nref);
        assert_memory_equal(out, ref, (size_t)n * sizeof(int32_t));
        assert_int_equal(hr_request_cached_tokens(b), 64 - 32 * round);
        assert_int_equal(collect(a, qout, 160), 160);
        assert_memory_equal(qout, qref, sizeof qref);
        hr_request_release(a);
        hr_request_release(b);
        hr_engine_stats st;
        hr_engine_stats_get(e, &st);
        assert_int_equal(st.ssd_quarantined, 1);
        hr_engine_free(e);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* A sampled request's steps (token, logprob, top logprobs): n of them
 * (g_cached: its prompt tokens from the prompt cache). */
static int g_cached;
static int sampled(hr_engine *e, const int32_t *prompt, int n, hr_step *out, int cap) {
    hr_req_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = cap, .top_logprobs = 3};
    hr_sampler_params_default(&p.sampler);
    p.sampler.temp = 0.9f;
    p.sampler.seed = 1234;
    hr_request *r;
    hr_error err;
    if (hr_request_new(&r, e, &p, &err) || hr_engine_submit(e, r, &err))
        fail_msg("%s", err.msg);
    int k = 0, rc;
    while (k < cap && (rc = hr_request_wait(r, k, &out[k], 5000)) == 1)
        k++;
    g_cached = hr_request_cached_tokens(r);
    hr_request_release(r);
    return k;
}

static long logits_hits(hr_engine *e) {
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    return st.cache_logits_hits;
}

/* The logits cache (lcache.h): a prompt sent again whole, in RAM or after a
 * restart from the SSD tier, samples its first token from its first
 * request's logits (no forward) and gives what an engine without a cache
 * gives, logprobs and all, bit for bit; a prompt that only begins the same
 * (or extends it) computes its last token; a short prompt's logits stay
 * off the disk; a logits file that does not verify is quarantined and the
 * request computes it. */
static void test_logits_cache(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_lg_XXXXXX", cmd[4400];
    assert_non_null(mkdtemp(dir));
    hr_error err;
    hr_engine_opts plain = {.n_threads = 2, .max_batch = 2, .n_ctx = 256, .cache_blocks = -1};
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 256, .ssd_dir = dir};
    enum { N = 70, G = 10 };
    int32_t p[N + 1];
    for (int i = 0; i <= N; i++)
        p[i] = (int32_t)((i * 37 + 11) % 500);
    hr_step ref[G], ref_short[G], ref_long[G], got[G];
    hr_engine *e;
    assert_int_equal(hr_engine_new(&e, g_model, &plain, &err), 0);
    assert_int_equal(sampled(e, p, N, ref, G), G);
    assert_int_equal(sampled(e, p, N - 5, ref_short, G), G);
    assert_int_equal(sampled(e, p, N + 1, ref_long, G), G);
    assert_int_equal(logits_hits(e), 0);
    hr_engine_free(e);

    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    for (int round = 0; round < 2; round++) { /* computed, then from RAM */
        assert_int_equal(sampled(e, p, N, got, G), G);
        assert_memory_equal(got, ref, sizeof ref);
        assert_int_equal(logits_hits(e), round);
        assert_int_equal(g_cached, round ? N : 0);
    }
    assert_int_equal(sampled(e, p, N - 5, got, G), G); /* a prefix: not its logits */
    assert_memory_equal(got, ref_short, sizeof ref_short);
    assert_int_equal(sampled(e, p, N + 1, got, G), G); /* one token more */
    assert_memory_equal(got, ref_long, sizeof ref_long);
    assert_int_equal(logits_hits(e), 1);
    /* a prompt whose KV is smaller than its logits (2 tokens of this model:
     * 1.5 KB against 2 KB): kept in RAM only */
    hr_step tiny[G];
    assert_int_equal(sampled(e, p, 2, tiny, G), G);
    assert_int_equal(sampled(e, p, 2, got, G), G);
    assert_memory_equal(got, tiny, sizeof tiny);
    assert_int_equal(logits_hits(e), 2);
    hr_engine_free(e);
    assert_int_equal(count_files(dir, ".lg"), 3); /* one a long enough prompt */

    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0); /* a restart */
    assert_int_equal(sampled(e, p, N, got, G), G);
    assert_memory_equal(got, ref, sizeof ref);
    assert_int_equal(logits_hits(e), 1);
    assert_int_equal(g_cached, N);
    hr_engine_free(e);

    /* every .lg file's logits damaged: quarantined, computed */
    snprintf(cmd, sizeof cmd, "for f in $(find %s -name '*.lg'); do printf 'X' | dd of=$f bs=1 "
             "seek=1000 conv=notrunc status=none; done", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    assert_int_equal(sampled(e, p, N, got, G), G);
    assert_memory_equal(got, ref, sizeof ref);
    assert_int_equal(logits_hits(e), 0);
    assert_int_equal(g_cached, N - 1);
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    assert_true(st.ssd_quarantined >= 1);
    hr_engine_free(e);

    /* a prompt of whole blocks (all of them on disk as its own, whatever
     * its generation wrote after them): after a restart its first token
     * comes from its logits file; when its last block then fails its
     * checksum (found once the run is read, after the lookup), the request
     * is cut back, computes that block and its first token itself (the
     * logits not used, nor counted) and still gives the same answer */
    enum { W = 96 };
    int32_t pw[W];
    for (int i = 0; i < W; i++)
        pw[i] = (int32_t)((i * 41 + 3) % 500);
    hr_step ref_w[G];
    assert_int_equal(hr_engine_new(&e, g_model, &plain, &err), 0);
    assert_int_equal(sampled(e, pw, W, ref_w, G), G);
    hr_engine_free(e);
    for (int round = 0; round < 3; round++) { /* computed; from disk; a block damaged */
        if (round == 2) {
            uint64_t key = 0;
            for (int b = 0; b < W / 32; b++)
                key = XXH3_64bits_withSeed(pw + b * 32, 32 * sizeof *pw, key);
            snprintf(cmd, sizeof cmd, "printf 'X' | dd of=$(ls %s/*/%016llx.kv) bs=1 "
                     "seek=7000 conv=notrunc status=none", dir, (unsigned long long)key);
            assert_int_equal(system(cmd), 0);
        }
        assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
        assert_int_equal(sampled(e, pw, W, got, G), G);
        assert_memory_equal(got, ref_w, sizeof ref_w);
        assert_int_equal(logits_hits(e), round == 1);
        assert_int_equal(g_cached, round == 1 ? W : round == 2 ? W - 32 : 0);
        hr_engine_free(e);
    }

    /* a prompt whose last, not-full block its generation filled (50 + 20
     * tokens: the block of tokens 32-63 is a full block of prompt and
     * generated tokens, named by them): the prompt's 18 rows of it are on
     * disk as its own tail too, so after a restart the whole prompt is
     * found and its first token comes from its logits file */
    enum { F = 50, FG = 20 };
    int32_t pf[F];
    for (int i = 0; i < F; i++)
        pf[i] = (int32_t)((i * 29 + 17) % 500);
    hr_step ref_f[FG], got_f[FG];
    assert_int_equal(hr_engine_new(&e, g_model, &plain, &err), 0);
    assert_int_equal(sampled(e, pf, F, ref_f, FG), FG);
    hr_engine_free(e);
    char before[4096] = "", after[4096] = "";
    for (int round = 0; round < 2; round++) { /* computed; from disk */
        assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
        assert_int_equal(sampled(e, pf, F, got_f, FG), FG);
        assert_memory_equal(got_f, ref_f, sizeof ref_f);
        assert_int_equal(logits_hits(e), round);
        assert_int_equal(g_cached, round ? F : 0);
        hr_engine_free(e);
        /* the files' inodes: the second request's tails (the prompt's own,
         * the sequence's), the same tokens as on disk, are not written
         * again (a rename would give a new inode) */
        snprintf(cmd, sizeof cmd, "find %s -name '*.kv' -printf '%%i %%f\\n' | sort", dir);
        FILE *f = popen(cmd, "r");
        size_t got = fread(round ? after : before, 1, sizeof before - 1, f);
        pclose(f);
        assert_true(got > 0);
    }
    assert_string_equal(after, before);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* The SSD writer's syncs (hr__ssd_write_file's), held back while a test
 * says so: this definition is the one the engine's code links to. */
static atomic_bool g_sync_hold;
int fdatasync(int fd) {
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    while (atomic_load(&g_sync_hold))
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    return real(fd);
}

/* More blocks indexed at once than the SSD writer's queue holds (6 prompts
 * of 49 whole blocks and 22 tokens: 294 against 256), then their logits,
 * then each prompt's own 22 rows of its last block (which its generation
 * filled): those waiting for room are queued as it comes, and a graceful
 * stop right after the answers drains them (the writer held at its first
 * file until then, so that they are all still waiting); after a restart
 * every prompt is found whole, its first token from its logits file. */
static void test_ssd_drain(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_drain_XXXXXX", cmd[4200];
    assert_non_null(mkdtemp(dir));
    hr_error err;
    hr_engine_opts o = {.n_threads = 2, .max_batch = 6, .n_ctx = 1664, .ssd_dir = dir};
    enum { R = 6, L = 1590, G = 12 };
    static int32_t p[R][L];
    int32_t ref[R][G], out[G];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < L; i++)
            p[r][i] = (int32_t)((i * 37 + r * 101 + 11) % 500);
    for (int round = 0; round < 2; round++) { /* computed and written; from disk */
        hr_engine *e;
        atomic_store(&g_sync_hold, round == 0);
        assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
        hr_request *q[R];
        for (int r = 0; r < R; r++)
            q[r] = submit(e, p[r], L, G, NULL, 0);
        for (int r = 0; r < R; r++) {
            assert_int_equal(collect(q[r], round ? out : ref[r], G), G);
            if (round) {
                assert_memory_equal(out, ref[r], sizeof out);
                assert_int_equal(hr_request_cached_tokens(q[r]), L);
            }
            hr_request_release(q[r]);
        }
        assert_int_equal(logits_hits(e), round ? R : 0);
        atomic_store(&g_sync_hold, false);
        hr_engine_free(e); /* at once: the writes still waiting are drained */
        if (!round)
            assert_int_equal(count_files(dir, ".lg"), R);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_ssd_tier(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_ssd_XXXXXX";
    assert_non_null(mkdtemp(dir));
    hr_error err;
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 256, .ssd_dir = dir};
    int32_t p[120], ref[32], out[32];
    int nref, n;
    for (int i = 0; i < 120; i++)
        p[i] = (int32_t)((i * 53 + 7) % 500);
    hr_engine *e;
    /* run 1: computes and writes 4 blocks and the tail (132 tokens in KV) in
     * the background, and the prompt's own 24 rows of block 3 (filled by the
     * generation) as the tail after its 3 whole blocks */
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    hr_request *r = run_prompt(e, p, 120, ref, &nref);
    assert_int_equal(hr_request_cached_tokens(r), 0);
    hr_request_release(r);
    hr_engine_free(e); /* drains the writer */
    assert_int_equal(count_files(dir, ".kv"), 6);

    /* the conversation resent with its answer after a restart: 4 blocks and
     * 3 of the tail's 4 rows from the SSD (the last token computed), the
     * same tokens as without any cache */
    int32_t p2[132], ref2[32];
    int nref2;
    memcpy(p2, p, sizeof p);
    memcpy(p2 + 120, ref, 12 * sizeof *ref);
    hr_engine_opts plain = {.n_threads = 2, .max_batch = 2, .n_ctx = 256};
    assert_int_equal(hr_engine_new(&e, g_model, &plain, &err), 0);
    hr_request_release(run_prompt(e, p2, 132, ref2, &nref2));
    hr_engine_free(e);
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    r = run_prompt(e, p2, 132, out, &n);
    assert_int_equal(hr_request_cached_tokens(r), 131);
    assert_int_equal(n, nref2);
    assert_memory_equal(out, ref2, (size_t)n * sizeof(int32_t));
    hr_request_release(r);
    hr_engine_free(e);

    /* run 2, a new engine (a restart): the whole prompt comes back from
     * SSD (3 blocks, its own tail) with its logits */
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    r = run_prompt(e, p, 120, out, &n);
    assert_int_equal(hr_request_cached_tokens(r), 120);
    assert_int_equal(n, nref);
    assert_memory_equal(out, ref, (size_t)n * sizeof(int32_t));
    hr_request_release(r);
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    assert_true(st.ssd && st.ssd_hits == 4); /* its 3 blocks and its tail */
    hr_engine_free(e);

    /* corrupt block 2's payload, truncate block 3: quarantined, still right */
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "cd %s/*/ && ls -tr *.kv > /tmp/hearth_ssd_order", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "cd %s/*/ && for f in *.kv; do printf 'X' | dd of=$f bs=1 "
             "seek=5000 conv=notrunc status=none; done", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    r = run_prompt(e, p, 120, out, &n);
    assert_int_equal(hr_request_cached_tokens(r), 0); /* block 0 fails: nothing reused */
    assert_memory_equal(out, ref, (size_t)n * sizeof(int32_t));
    hr_request_release(r);
    hr_engine_stats_get(e, &st);
    /* block 0's file, and those the other readers had taken (all corrupt) */
    assert_true(st.ssd_quarantined >= 1 && st.ssd_quarantined <= 3);
    hr_engine_free(e);
    assert_int_equal(count_files(dir, ".kv") >= 1, 1);
    snprintf(cmd, sizeof cmd, "%s/quarantine", dir);
    assert_int_equal(count_files(cmd, ".kv"), st.ssd_quarantined);

    /* truncated files are quarantined too */
    snprintf(cmd, sizeof cmd, "cd %s/*/ && for f in *.kv; do truncate -s 100 $f; done", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    r = run_prompt(e, p, 120, out, &n);
    assert_memory_equal(out, ref, (size_t)n * sizeof(int32_t));
    hr_request_release(r);
    hr_engine_free(e);

    /* a directory that cannot be written: the engine runs without the tier */
    hr_engine_opts bad = o;
    bad.ssd_dir = "/proc/hearth-no-such-dir";
    assert_int_equal(hr_engine_new(&e, g_model, &bad, &err), 0);
    r = run_prompt(e, p, 120, out, &n);
    assert_memory_equal(out, ref, (size_t)n * sizeof(int32_t));
    hr_request_release(r);
    hr_engine_stats_get(e, &st);
    assert_false(st.ssd);
    hr_engine_free(e);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* --kv-bits 4 --quantized-kv-start 40 with the prompt cache and the SSD
 * tier on the backend under test (the demo model: head_dim 64): a 70-token
 * prompt converts at 40; sent again it starts converted on its quantized
 * blocks (cached_tokens 69: two shared blocks and a copy of the third's
 * rows through the backend's copy), and after a restart on the same read
 * back from the SSD tier (69: the third block's rows from its tail's
 * file); a 38-token prompt sharing 36
 * reuses the unquantized prefix. Every answer's tokens equal an engine's
 * without the cache, its logprobs within 1e-4 (bit for bit on the CPU:
 * test_engine_kvstart). */
static void test_kv_start_prompt_cache(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char mdir[4096], dir[] = "/tmp/hearth_kvq_XXXXXX";
    snprintf(mdir, sizeof mdir, "%s/models/hearth-demo", root ? root : ".");
    assert_non_null(mkdtemp(dir));
    hr_model *m;
    hr_error err = {0};
    if (hr_model_open_on(&m, mdir, g_device, &err))
        fail_msg("%s", err.msg);
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 256, .kv_bits = 4,
                        .kv_group = 64, .kv_start = 40, .ssd_dir = dir};
    hr_engine_opts off = o;
    off.cache_blocks = -1;
    off.ssd_dir = NULL;
    enum { GEN = 12, N = 4 };
    static const int np[N] = {70, 70, 38, 70}, want[N] = {0, 69, 36, 69};
    int32_t p[70], b[38];
    for (int i = 0; i < 70; i++)
        p[i] = (int32_t)((i * 7919 + 13) % 8000);
    memcpy(b, p, 36 * sizeof *p);
    b[36] = 5;
    b[37] = 6;
    hr_step ref[2][GEN], got[GEN];
    hr_engine *e;
    assert_int_equal(hr_engine_new(&e, m, &off, &err), 0);
    for (int k = 0; k < 2; k++) {
        hr_request *r = submit(e, k ? b : p, k ? 38 : 70, GEN, NULL, 0);
        for (int t = 0; t < GEN; t++)
            assert_int_equal(hr_request_wait(r, t, &ref[k][t], 10000), 1);
        hr_request_release(r);
    }
    hr_engine_free(e);
    assert_int_equal(hr_engine_new(&e, m, &o, &err), 0);
    for (int i = 0; i < N; i++) {
        if (i == 3) { /* a restart: the RAM cache is gone, the files stay */
            hr_engine_free(e);
            assert_int_equal(hr_engine_new(&e, m, &o, &err), 0);
        }
        hr_request *r = submit(e, np[i] == 38 ? b : p, np[i], GEN, NULL, 0);
        for (int t = 0; t < GEN; t++)
            assert_int_equal(hr_request_wait(r, t, &got[t], 10000), 1);
        const hr_step *w = ref[np[i] == 38];
        for (int t = 0; t < GEN; t++)
            if (got[t].token != w[t].token || fabsf(got[t].logprob - w[t].logprob) > 1e-4f)
                fail_msg("request %d step %d: token %d logprob %g, without the cache %d %g", i,
                         t, got[t].token, (double)got[t].logprob, w[t].token,
                         (double)w[t].logprob);
        assert_int_equal(hr_request_cached_tokens(r), want[i]);
        hr_request_release(r);
    }
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    assert_true(st.ssd_hits >= 2 && st.kvq_blocks_cached >= 2);
    hr_engine_free(e);
    hr_model_free(m);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* The quantized KV cache on the backend under test against the CPU under
 * the same cache type (q8_0, q4_0, K q8_0 / V f16, K f16 / V q4_0, mlx
 * affine 8 bits in groups of 64 and 4 bits in groups of 32, the latter also
 * from 40 tokens on (--quantized-kv-start: a second pool that the prompts
 * of 40 and 70 tokens convert into), TurboQuant 3.5 bits and K 4 / V 2),
 * over the demo model (head_dim 64; the fixtures' heads are too short for
 * these rows): three prompts (5, 40 and 70 tokens: one block, two, three)
 * and 24 greedy tokens each, run together. The two backends' K/V rows
 * differ by float noise before they are quantized, so a value can land one
 * quantization step apart: a prompt's tokens are compared up to the first
 * that differs, which must be a near tie (the CPU's top-2 margin below
 * 0.2), the chosen tokens' logprobs within a mean of 0.01 (8-bit rows) or
 * 0.05 (4 bits and fewer) and a worst of 0.1 (0.5), over at least 24
 * steps. On the CPU itself: skipped. */
static void test_kv_types_vs_cpu(void **state) {
    (void)state;
    if (!strcmp(g_device, "cpu")) {
        printf("kv types against the CPU: skipped on the CPU\n");
        return;
    }
    static const struct {
        const char *name;
        hr_dtype k, v;
        int bits, group, turbo_k, turbo_v, start;
        double mean, worst;
    } cases[] = {
        {"q8_0", HR_DTYPE_Q8_0, HR_DTYPE_Q8_0, 0, 0, 0, 0, 0, 0.01, 0.1},
        {"q4_0", HR_DTYPE_Q4_0, HR_DTYPE_Q4_0, 0, 0, 0, 0, 0, 0.05, 0.5},
        {"q8_0/f16", HR_DTYPE_Q8_0, HR_DTYPE_F16, 0, 0, 0, 0, 0, 0.01, 0.1},
        {"f16/q4_0", HR_DTYPE_F16, HR_DTYPE_Q4_0, 0, 0, 0, 0, 0, 0.05, 0.5},
        {"affine 8/64", HR_DTYPE_F32, HR_DTYPE_F32, 8, 64, 0, 0, 0, 0.01, 0.1},
        {"affine 4/32", HR_DTYPE_F32, HR_DTYPE_F32, 4, 32, 0, 0, 0, 0.05, 0.5},
        {"turbo 3.5", HR_DTYPE_F32, HR_DTYPE_F32, 0, 0, 7, 7, 0, 0.05, 0.5},
        {"turbo 4/2", HR_DTYPE_F32, HR_DTYPE_F32, 0, 0, 8, 4, 0, 0.05, 0.5},
        {"affine 4/32 from 40", HR_DTYPE_F32, HR_DTYPE_F32, 4, 32, 0, 0, 40, 0.05, 0.5},
    };
    const char *root = getenv("HEARTH_ROOT");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/hearth-demo", root ? root : ".");
    hr_model *m[2];
    hr_error err = {0};
    if (hr_model_open_on(&m[0], dir, g_device, &err) || hr_model_open_on(&m[1], dir, "cpu", &err))
        fail_msg("%s", err.msg);
    enum { NP = 3, GEN = 24 };
    static const int np[NP] = {5, 40, 70};
    int32_t prompts[NP][70];
    for (int i = 0; i < NP; i++)
        for (int k = 0; k < np[i]; k++) /* tokens spread over the vocabulary */
            prompts[i][k] = (int32_t)((7919u * (unsigned)(k + 1) + 104729u * (unsigned)i) %
                                      (unsigned)m[1]->hp.n_vocab);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        hr_step st[2][NP][GEN];
        for (int b = 0; b < 2; b++) {
            hr_engine_opts o = {.n_threads = 2, .max_batch = NP, .n_ctx = 128,
                                .prefill_chunk = 32, .kv_dtype = cases[c].k,
                                .kv_vown = cases[c].v != cases[c].k, .kv_dtype_v = cases[c].v,
                                .kv_bits = cases[c].bits, .kv_group = cases[c].group,
                                .kv_start = cases[c].start, .kv_turbo_k = cases[c].turbo_k,
                                .kv_turbo_v = cases[c].turbo_v};
            hr_engine *e;
            if (hr_engine_new(&e, m[b], &o, &err))
                fail_msg("%s on %s: %s", cases[c].name, b ? "cpu" : g_device, err.msg);
            hr_request *r[NP];
            for (int i = 0; i < NP; i++) {
                hr_req_params p = {.prompt = prompts[i], .n_prompt = np[i], .max_tokens = GEN,
                                   .top_logprobs = 2};
                hr_sampler_params_default(&p.sampler);
                if (hr_request_new(&r[i], e, &p, &err) || hr_engine_submit(e, r[i], &err))
                    fail_msg("%s", err.msg);
            }
            for (int i = 0; i < NP; i++) {
                for (int k = 0; k < GEN; k++)
                    if (hr_request_wait(r[i], k, &st[b][i][k], 10000) != 1)
                        fail_msg("%s: prompt %d ended at %d tokens", cases[c].name, i, k);
                hr_request_release(r[i]);
            }
            hr_engine_free(e);
        }
        double sum = 0, worst = 0;
        int n = 0;
        for (int i = 0; i < NP; i++)
            for (int k = 0; k < GEN; k++) {
                const hr_step *g = &st[0][i][k], *w = &st[1][i][k];
                double margin = w->top_lps[0] - w->top_lps[1];
                if (g->token != w->token) {
                    if (margin >= 0.2)
                        fail_msg("%s prompt %d step %d: token %d, the CPU's %d (margin %.3f)",
                                 cases[c].name, i, k, g->token, w->token, margin);
                    break; /* a near tie went the other way: the rest is another text */
                }
                double d = fabs((double)g->logprob - w->logprob);
                sum += d;
                worst = fmax(worst, d);
                n++;
            }
        printf("%s: %d steps compared, |dlogprob| mean %.2g worst %.2g\n", cases[c].name, n,
               sum / n, worst);
        if (!(n >= GEN && sum / n <= cases[c].mean && worst <= cases[c].worst))
            fail_msg("%s: %d steps, |dlogprob| mean %g (%g), worst %g (%g)", cases[c].name, n,
                     sum / n, cases[c].mean, worst, cases[c].worst);
    }
    hr_model_free(m[0]);
    hr_model_free(m[1]);
}

/* test_engine [--device NAME]: the whole engine (batching, prompt cache,
 * SSD tier) over the model on that backend; a GPU that is not there skips,
 * saying why. */
static int open_fixture(const char *name) {
    hr_error err = {0};
    const char *root = getenv("HEARTH_ROOT");
    char dir[4096], ref[4200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", root ? root : ".", name);
    snprintf(ref, sizeof ref, "%s/ref.json", dir);
    int rc = hr_model_open_on(&g_model, dir, g_device, &err);
    if (rc == HR_EUNSUPPORTED && strstr(err.msg, "not supported yet on ")) {
        printf("%s skipped: %s\n", name, err.msg); /* CPU-only families */
        return -1;
    }
    if (rc) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    json_error_t je;
    g_ref = json_load_file(ref, 0, &je);
    return g_ref ? 0 : 1;
}

static void close_fixture(void) {
    json_decref(g_ref);
    hr_model_free(g_model);
}

/* test_engine [--device NAME]: the whole engine (batching, prompt cache,
 * SSD tier) over the model on that backend; a GPU that is not there skips,
 * saying why. Batched == alone again over bf16 weights (the GPU's
 * tensor-core products), and over experts (each row's routing and expert
 * products) and recurrent layers (a state per sequence). */
int main(int argc, char **argv) {
    if (!hr_test_device(argc, argv, &g_device))
        return 0;
    if (open_fixture("llama"))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_alone_equals_oracle),
        cmocka_unit_test(test_sampled_rows_batched_equal_alone),
        cmocka_unit_test(test_engine_oracle_archs),
        cmocka_unit_test(test_hybrid_prompt_cache),
        cmocka_unit_test(test_stop_cancel_limits),
        cmocka_unit_test(test_prompt_cache),
        cmocka_unit_test(test_prompt_cache_while_running),
        cmocka_unit_test(test_prompt_cache_tokens),
        cmocka_unit_test(test_ssd_tier),
        cmocka_unit_test(test_ssd_overlap_fault),
        cmocka_unit_test(test_logits_cache),
        cmocka_unit_test(test_ssd_drain),
        cmocka_unit_test(test_kv_types_vs_cpu),
        cmocka_unit_test(test_kv_start_prompt_cache),
    };
    int rc = cmocka_run_group_tests_name("llama", tests, NULL, NULL);
    close_fixture();
    if (open_fixture("llama-bf16"))
        return 1;
    const struct CMUnitTest bf16[] = {
        cmocka_unit_test(test_batched_equals_alone_equals_oracle),
        cmocka_unit_test(test_sampled_rows_batched_equal_alone),
    };
    rc |= cmocka_run_group_tests_name("llama-bf16", bf16, NULL, NULL);
    close_fixture();
    static const char *moe[] = {"qwen2_moe", "glm4_moe", "granitemoehybrid", "qwen3_next"};
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) {
        int o = open_fixture(moe[i]);
        if (o > 0)
            return 1;
        if (o < 0)
            continue;
        const struct CMUnitTest alone[] = {
            cmocka_unit_test(test_batched_equals_alone_equals_oracle),
        };
        rc |= cmocka_run_group_tests_name(moe[i], alone, NULL, NULL);
        close_fixture();
    }
    return rc;
}
