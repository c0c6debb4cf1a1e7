/* LoRA adapters through the engine: requests of three peft fixtures'
 * adapters (tests/fixtures/lora) and of none, each alone and then all in
 * one batch: greedy tokens and logprobs are the same both ways (bit for
 * bit) and equal peft's greedy tokens; the prompt cache never gives one
 * adapter's blocks to another (or to the base), and does reuse them for
 * the same adapter. */
#include "core/error.h"
#include "engine/engine.h"
#include "model/adapter.h"
#include "model/model.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_GEN 16

static char g_root[4096];
static hr_model *g_model;

static const char *const NAMES[] = {"llama-r8", "llama-dora", "llama-mlx", NULL};
enum { N_AD = 4 };
static hr_adapter *g_ad[N_AD];
static json_t *g_ref[N_AD];

static hr_request *submit(hr_engine *e, const int32_t *prompt, int n, hr_adapter *a) {
    hr_req_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = N_GEN,
                       .top_logprobs = 3, .adapter = a};
    hr_sampler_params_default(&p.sampler);
    hr_request *r;
    hr_error err = {0};
    if (hr_request_new(&r, e, &p, &err) || hr_engine_submit(e, r, &err))
        fail_msg("%s", err.msg);
    return r;
}

static void collect(hr_request *r, hr_step *out) {
    for (int i = 0; i < N_GEN; i++)
        if (hr_request_wait(r, i, &out[i], 10000) != 1)
            fail_msg("request ended after %d tokens", i);
}

static int prompt_of(int k, int32_t *p) {
    json_t *pt = json_object_get(json_array_get(json_object_get(g_ref[0], "cases"), (size_t)k),
                                 "prompt_tokens");
    int n = (int)json_array_size(pt);
    for (int i = 0; i < n; i++)
        p[i] = (int32_t)json_integer_value(json_array_get(pt, (size_t)i));
    return n;
}

static void test_batched(void **state) {
    (void)state;
    hr_error err = {0};
    enum { P = 3 }; /* the fixtures' three prompts, under each adapter and none */
    int32_t prompt[P][64];
    int np[P];
    for (int k = 0; k < P; k++)
        np[k] = prompt_of(k, prompt[k]);
    static hr_step alone[N_AD][P][N_GEN], together[N_AD][P][N_GEN];
    hr_engine_opts one = {.n_threads = 2, .max_batch = 1, .n_ctx = 256, .prefill_chunk = 16,
                          .cache_blocks = -1};
    hr_engine *e;
    assert_int_equal(hr_engine_new(&e, g_model, &one, &err), 0);
    for (int a = 0; a < N_AD; a++)
        for (int k = 0; k < P; k++) {
            hr_request *r = submit(e, prompt[k], np[k], g_ad[a]);
            collect(r, alone[a][k]);
            hr_request_release(r);
        }
    hr_engine_free(e);
    /* alone == peft's greedy tokens (the oracle's margins are all > 1e-3 here
     * or the test says which step) */
    int checked = 0;
    for (int a = 0; a < N_AD; a++) {
        if (!g_ref[a])
            continue;
        for (int k = 0; k < P; k++) {
            json_t *cs = json_array_get(json_object_get(g_ref[a], "cases"), (size_t)k);
            json_t *gt = json_object_get(cs, "greedy_tokens"), *st = json_object_get(cs, "steps");
            for (int i = 0; i < N_GEN; i++) {
                int32_t want = (int32_t)json_integer_value(json_array_get(gt, (size_t)i));
                double margin = json_number_value(json_object_get(json_array_get(st, (size_t)i),
                                                                  "margin"));
                if (alone[a][k][i].token != want) {
                    if (margin < 1e-3)
                        break; /* a near-tie: the rest follows another path */
                    fail_msg("%s prompt %d step %d: %d, peft %d", NAMES[a], k, i,
                             alone[a][k][i].token, want);
                }
                checked++;
            }
        }
    }
    hr_engine_opts many = {.n_threads = 2, .max_batch = N_AD * P, .n_ctx = 256,
                           .prefill_chunk = 16, .cache_blocks = -1};
    assert_int_equal(hr_engine_new(&e, g_model, &many, &err), 0);
    hr_request *rs[N_AD][P];
    for (int k = 0; k < P; k++) /* interleaved: neighbours have other adapters */
        for (int a = 0; a < N_AD; a++)
            rs[a][k] = submit(e, prompt[k], np[k], g_ad[a]);
    for (int a = 0; a < N_AD; a++)
        for (int k = 0; k < P; k++) {
            collect(rs[a][k], together[a][k]);
            hr_request_release(rs[a][k]);
            if (memcmp(together[a][k], alone[a][k], sizeof alone[a][k]))
                fail_msg("%s prompt %d: batched with other adapters differs from alone",
                         NAMES[a] ? NAMES[a] : "no adapter", k);
        }
    hr_engine_free(e);
    /* the adapters change the output */
    assert_true(memcmp(alone[0], alone[3], sizeof alone[0]) != 0);
    printf("engine: %d requests (3 adapters + none) batched == alone (tokens and logprobs); "
           "%d greedy steps == peft\n", N_AD * P, checked);
}

/* The prompt cache keys blocks by adapter. */
static void test_cache(void **state) {
    (void)state;
    hr_error err = {0};
    int32_t prompt[64];
    int n = prompt_of(2, prompt); /* 61 tokens: a whole block and a tail */
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 256, .prefill_chunk = 64};
    hr_engine *e;
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    hr_step s0[N_GEN], s1[N_GEN], s2[N_GEN], s3[N_GEN];
    struct { hr_adapter *a; hr_step *out; int want_cached; } runs[] = {
        {g_ad[0], s0, 0},   /* first: nothing cached */
        {NULL, s1, 0},      /* the base: the adapter's blocks are not its */
        {g_ad[1], s2, 0},   /* another adapter: neither */
        {g_ad[0], s3, 1},   /* the first again: its own blocks */
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        hr_request *r = submit(e, prompt, n, runs[i].a);
        collect(r, runs[i].out);
        int cached = hr_request_cached_tokens(r);
        hr_request_release(r);
        if (runs[i].want_cached ? cached == 0 : cached != 0)
            fail_msg("run %zu: %d prompt tokens from the cache", i, cached);
    }
    assert_memory_equal(s0, s3, sizeof s0); /* reused blocks give the same output */
    hr_engine_free(e);
    printf("engine: the prompt cache reuses an adapter's blocks for that adapter only\n");
}

/* The SSD tier too: a new engine (a restart) over the blocks one adapter
 * wrote finds them for that adapter only. */
static void test_cache_ssd(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_ssd_lora_XXXXXX";
    assert_non_null(mkdtemp(dir));
    hr_error err = {0};
    int32_t prompt[64];
    /* 61 tokens: a whole block, the prompt's tail (its generation filled the
     * block) and its logits go to SSD, so it comes back whole */
    int n = prompt_of(2, prompt);
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 256, .prefill_chunk = 64,
                        .ssd_dir = dir};
    hr_step ref[N_GEN], out[N_GEN];
    hr_engine *e;
    assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0);
    hr_request *r = submit(e, prompt, n, g_ad[0]);
    collect(r, ref);
    hr_request_release(r);
    hr_engine_free(e); /* drains the writer */
    struct { hr_adapter *a; int want_cached; } runs[] = {{NULL, 0}, {g_ad[1], 0}, {g_ad[0], 61}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        assert_int_equal(hr_engine_new(&e, g_model, &o, &err), 0); /* RAM empty */
        r = submit(e, prompt, n, runs[i].a);
        collect(r, out);
        int cached = hr_request_cached_tokens(r);
        hr_request_release(r);
        hr_engine_free(e);
        if (cached != runs[i].want_cached)
            fail_msg("SSD run %zu: %d prompt tokens from the cache, want %d", i, cached,
                     runs[i].want_cached);
    }
    assert_memory_equal(out, ref, sizeof ref); /* the first adapter's, from SSD */
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    printf("engine: the SSD tier keys blocks by adapter too\n");
}

int main(void) {
    const char *root = getenv("HEARTH_ROOT");
    snprintf(g_root, sizeof g_root, "%s/tests/fixtures", root ? root : ".");
    char d[8300];
    snprintf(d, sizeof d, "%s/lora/llama-r8/ref.json", g_root);
    if (access(d, F_OK) != 0) {
        printf("skipped: no %s/lora (tools/refgen/lora.py makes it on the GPU machine)\n",
               g_root);
        return 77;
    }
    snprintf(d, sizeof d, "%s/models/llama", g_root);
    hr_error err = {0};
    if (hr_model_open(&g_model, d, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    for (int a = 0; a < N_AD; a++) {
        if (!NAMES[a])
            continue;
        snprintf(d, sizeof d, "%s/lora/%s", g_root, NAMES[a]);
        if (hr_adapter_open(&g_ad[a], g_model, d, NAMES[a], &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        snprintf(d, sizeof d, "%s/lora/%s/ref.json", g_root, NAMES[a]);
        json_error_t je;
        if (!(g_ref[a] = json_load_file(d, 0, &je))) {
            fprintf(stderr, "%s: %s\n", d, je.text);
            return 1;
        }
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_cache_ssd),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int a = 0; a < N_AD; a++) {
        hr_adapter_unref(g_ad[a]);
        json_decref(g_ref[a]);
    }
    hr_model_free(g_model);
    return rc;
}
