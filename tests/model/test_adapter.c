/* LoRA adapters (model/adapter.h) against peft: every fixture under
 * tests/fixtures/lora/<case>/ (tools/refgen/lora.py) is a random-weight
 * adapter (peft or mlx-lm layout) on one of tests/fixtures/models' bases
 * with peft's greedy tokens and top-10 logprobs, unmerged and after
 * merge_and_unload. Teacher-forced like test_parity: argmax equal unless
 * the oracle's margin is below NEAR_TIE, every top-10 logprob within 1e-4.
 *
 * Also: the same fixtures on the base converted to GGUF (F32) and in one
 * batch with rows of the other adapters and of none (each row's logits
 * equal, bit for bit, to its row alone), and every load error: unknown
 * module, shape mismatch, non-LoRA types, rank mismatch, DoRA without
 * magnitude, missing files. */
#include "core/error.h"
#include "io/safetensors.h"
#include "model/adapter.h"
#include "model/convert.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "support/kl.h"
#include "support/runner.h"
#include "support/tree.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NEAR_TIE 1e-3
#define TOL 1e-4

static char g_root[4096];   /* tests/fixtures */
static char g_tmp[4096];    /* scratch directory */

static json_t *load_ref(const char *name) {
    char p[8300];
    snprintf(p, sizeof p, "%s/lora/%s/ref.json", g_root, name);
    json_error_t je;
    json_t *ref = json_load_file(p, 0, &je);
    if (!ref)
        fail_msg("%s: %s", p, je.text);
    return ref;
}

static hr_model *open_base(const char *base) {
    char d[8300];
    snprintf(d, sizeof d, "%s/models/%s", g_root, base);
    hr_error err = {0};
    hr_model *m = NULL;
    if (hr_model_open(&m, d, &err))
        fail_msg("%s: %s", d, err.msg);
    return m;
}

static hr_adapter *open_adapter(const hr_model *m, const char *name) {
    char d[8300];
    snprintf(d, sizeof d, "%s/lora/%s", g_root, name);
    hr_error err = {0};
    hr_adapter *a = NULL;
    if (hr_adapter_open(&a, m, d, name, &err))
        fail_msg("%s: %s", name, err.msg);
    return a;
}

/* Teacher-force one reference list (cases or merged_cases); worst |dlogprob|. */
static double check_cases(const char *name, const char *what, hr_runner *r, int V,
                          json_t *cases) {
    float *logits = malloc((size_t)V * sizeof *logits);
    hr_error err = {0};
    double worst = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        json_t *pt = json_object_get(cs, "prompt_tokens"), *gt = json_object_get(cs, "greedy_tokens");
        json_t *st = json_object_get(cs, "steps");
        int np = (int)json_array_size(pt);
        int32_t *prompt = malloc((size_t)np * sizeof *prompt);
        for (int i = 0; i < np; i++)
            prompt[i] = (int32_t)json_integer_value(json_array_get(pt, (size_t)i));
        hr_runner_reset(r);
        if (hr_runner_eval(r, prompt, np, logits, &err))
            fail_msg("%s: %s", name, err.msg);
        free(prompt);
        for (size_t s = 0; s < json_array_size(gt); s++) {
            int32_t want = (int32_t)json_integer_value(json_array_get(gt, s));
            json_t *step = json_array_get(st, s);
            double margin = json_number_value(json_object_get(step, "margin"));
            int32_t got = hr_argmax(logits, V);
            if (got != want && margin >= NEAR_TIE)
                fail_msg("%s %s prompt %zu step %zu: argmax %d, peft %d (margin %g)", name,
                         what, c, s, got, want, margin);
            double l = hr_logsumexp_f64(logits, V);
            json_t *top = json_object_get(step, "top");
            for (size_t k = 0; k < json_array_size(top); k++) {
                json_t *e = json_array_get(top, k);
                int id = (int)json_integer_value(json_array_get(e, 0));
                double lp = json_number_value(json_array_get(e, 1));
                double d = fabs((logits[id] - l) - lp);
                worst = d > worst ? d : worst;
                if (d > TOL)
                    fail_msg("%s %s prompt %zu step %zu: logprob of %d is %.7f, peft %.7f",
                             name, what, c, s, id, logits[id] - l, lp);
            }
            if (hr_runner_eval(r, &want, 1, logits, &err))
                fail_msg("%s: %s", name, err.msg);
        }
    }
    free(logits);
    return worst;
}

/* ---- parity ------------------------------------------------------------------ */

static void run_parity(const char *name, const char *model_dir) {
    json_t *ref = load_ref(name);
    const char *base = json_string_value(json_object_get(ref, "base"));
    hr_model *m;
    if (model_dir) {
        hr_error err = {0};
        if (hr_model_open(&m, model_dir, &err))
            fail_msg("%s: %s", model_dir, err.msg);
    } else {
        m = open_base(base);
    }
    hr_adapter *a = open_adapter(m, name);
    hr_runner *r = NULL;
    hr_error err = {0};
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 256, .prefill_chunk = 64};
    assert_int_equal(hr_runner_new(&r, m, &ro, &err), 0);
    hr_runner_set_adapter(r, a);
    int V = m->hp.n_vocab;
    double w1 = check_cases(name, "unmerged", r, V, json_object_get(ref, "cases"));
    double w2 = check_cases(name, "merged", r, V, json_object_get(ref, "merged_cases"));
    printf("adapter %-16s %-4s on %-6s%s %2d projections rank<=%d%s: max |dlogprob| %.2e "
           "unmerged, %.2e merged\n", name, a->format, base, model_dir ? " (gguf)" : "",
           a->n_mats, a->max_rank, a->dora ? " dora" : "", w1, w2);
    hr_runner_free(r);
    hr_adapter_unref(a);
    hr_model_free(m);
    json_decref(ref);
}

static void test_parity(void **state) { run_parity(*state, NULL); }

/* The base converted to GGUF F32 by `hearth convert` (llama: q/k rows in
 * llama.cpp's permuted order): the adapter's rows follow. */
static void test_parity_gguf(void **state) {
    const char *name = *state;
    json_t *ref = load_ref(name);
    char gguf[8300], cmd[20000];
    const char *base = json_string_value(json_object_get(ref, "base"));
    snprintf(gguf, sizeof gguf, "%s/%s-f32.gguf", g_tmp, base);
    if (access(gguf, F_OK) != 0) {
        const char *bin = getenv("HEARTH_BIN");
        snprintf(cmd, sizeof cmd, "'%s' convert --model '%s/models/%s' --gguf F32 --out '%s' >/dev/null",
                 bin ? bin : "build/hearth", g_root, base, gguf);
        if (system(cmd) != 0)
            fail_msg("%s failed", cmd);
    }
    json_decref(ref);
    run_parity(name, gguf);
}

/* hearth fuse's model (convert.h with an adapter) against peft's
 * merge_and_unload: the fused weights, no adapter at run time. */
static void test_fused(void **state) {
    const char *name = *state;
    json_t *ref = load_ref(name);
    const char *base = json_string_value(json_object_get(ref, "base"));
    char src[8300], adir[8300], out[8300];
    snprintf(src, sizeof src, "%s/models/%s", g_root, base);
    snprintf(adir, sizeof adir, "%s/lora/%s", g_root, name);
    snprintf(out, sizeof out, "%s/fused-%s", g_tmp, name);
    assert_int_equal(hr_test_put(g_tmp, "x", ""), 0);
    hr_error err = {0};
    hr_convert_opts o = {.src = src, .out = out, .bits = 4, .group = 64, .dtype = HR_DTYPE_COUNT,
                         .gguf = HR_DTYPE_COUNT, .adapter = adir};
    if (hr_convert(&o, &err))
        fail_msg("fuse %s: %s", name, err.msg);
    hr_model *m = NULL;
    if (hr_model_open(&m, out, &err))
        fail_msg("%s: %s", out, err.msg);
    hr_runner *r = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 256, .prefill_chunk = 64};
    assert_int_equal(hr_runner_new(&r, m, &ro, &err), 0);
    double w = check_cases(name, "fused", r, m->hp.n_vocab, json_object_get(ref, "merged_cases"));
    printf("fused   %-16s == peft merge_and_unload: max |dlogprob| %.2e\n", name, w);
    hr_runner_free(r);
    hr_model_free(m);
    json_decref(ref);
}

/* A quantized base (GGUF Q8_0): the adapter's delta is f32 on the
 * quantized product; the greedy tokens agree with peft's on the f32 base
 * (teacher-forced) at almost every step, the logprobs within Q8_0's error
 * (on this random model Q8_0 alone moves the top logprob by up to 0.2:
 * the base's Q8_0 against its f32 on the same prompts). */
static void test_quant_base(void **state) {
    (void)state;
    const char *name = "llama-r8";
    json_t *ref = load_ref(name);
    char gguf[8300], cmd[20000];
    snprintf(gguf, sizeof gguf, "%s/llama-q8.gguf", g_tmp);
    const char *bin = getenv("HEARTH_BIN");
    snprintf(cmd, sizeof cmd, "'%s' convert --model '%s/models/llama' --gguf Q8_0 --out '%s' "
             ">/dev/null 2>&1", bin ? bin : "build/hearth", g_root, gguf);
    assert_int_equal(hr_test_put(g_tmp, "x", ""), 0);
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
    hr_error err = {0};
    hr_model *m = NULL;
    if (hr_model_open(&m, gguf, &err))
        fail_msg("%s: %s", gguf, err.msg);
    hr_adapter *a = open_adapter(m, name);
    hr_runner *r = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 256, .prefill_chunk = 64};
    assert_int_equal(hr_runner_new(&r, m, &ro, &err), 0);
    int V = m->hp.n_vocab, steps = 0, agree = 0;
    double worst = 0;
    float *logits = malloc((size_t)V * sizeof *logits), *base_lg = malloc((size_t)V * sizeof *base_lg);
    json_t *cases = json_object_get(ref, "cases");
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        json_t *pt = json_object_get(cs, "prompt_tokens"), *gt = json_object_get(cs, "greedy_tokens");
        json_t *st = json_object_get(cs, "steps");
        int np = (int)json_array_size(pt);
        int32_t *prompt = malloc((size_t)np * sizeof *prompt);
        for (int i = 0; i < np; i++)
            prompt[i] = (int32_t)json_integer_value(json_array_get(pt, (size_t)i));
        hr_runner_reset(r);
        hr_runner_set_adapter(r, a);
        assert_int_equal(hr_runner_eval(r, prompt, np, logits, &err), 0);
        for (size_t s = 0; s < json_array_size(gt); s++) {
            int32_t want = (int32_t)json_integer_value(json_array_get(gt, s));
            steps++;
            agree += hr_argmax(logits, V) == want;
            double l = hr_logsumexp_f64(logits, V);
            json_t *e = json_array_get(json_object_get(json_array_get(st, s), "top"), 0);
            double d = fabs(logits[json_integer_value(json_array_get(e, 0))] - l -
                            json_number_value(json_array_get(e, 1)));
            worst = d > worst ? d : worst;
            assert_int_equal(hr_runner_eval(r, &want, 1, logits, &err), 0);
        }
        free(prompt);
    }
    printf("q8_0    %-16s %d/%d greedy steps == peft (f32 base), max |dlogprob| of the top "
           "token %.3f\n", name, agree, steps, worst);
    assert_true(agree * 10 >= steps * 9);
    assert_true(worst < 0.35);
    free(logits);
    free(base_lg);
    hr_runner_free(r);
    hr_adapter_unref(a);
    hr_model_free(m);
    json_decref(ref);
}

/* ---- batched: rows of several adapters and none in one forward ---------------- */

static void test_batched(void **state) {
    (void)state;
    const char *names[] = {"llama-r8", "llama-dora", "llama-mlx", NULL, "llama-patterns"};
    enum { S = 5, N = 12 };
    hr_model *m = open_base("llama");
    hr_adapter *ad[S] = {0};
    for (int s = 0; s < S; s++)
        ad[s] = names[s] ? open_adapter(m, names[s]) : NULL;
    hr_error err = {0};
    int V = m->hp.n_vocab;
    int32_t tok[S][N];
    for (int s = 0; s < S; s++)
        for (int i = 0; i < N; i++)
            tok[s][i] = 3 + (s * 37 + i * 11) % 500;
    /* alone: the runner's logits after each token */
    float *alone = malloc((size_t)S * N * V * sizeof *alone);
    hr_runner *r = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 64, .prefill_chunk = 64};
    assert_int_equal(hr_runner_new(&r, m, &ro, &err), 0);
    for (int s = 0; s < S; s++) {
        hr_runner_reset(r);
        hr_runner_set_adapter(r, ad[s]);
        for (int i = 0; i < N; i++)
            assert_int_equal(hr_runner_eval(r, &tok[s][i], 1, alone + ((size_t)s * N + i) * V,
                                            &err), 0);
    }
    hr_runner_free(r);
    /* together: one decode row per sequence per step */
    hr_kv kv;
    assert_int_equal(hr_kv_init(&kv, &m->hp, HR_DTYPE_F32, S * 2, &err), 0);
    hr_fwd *f = NULL;
    assert_int_equal(hr_fwd_new(&f, m, S, S, 64, 2, &err), 0);
    int32_t blocks[S];
    hr_seq_blocks sb[S];
    for (int s = 0; s < S; s++) {
        blocks[s] = hr_kv_alloc(&kv);
        sb[s] = (hr_seq_blocks){&blocks[s], 1, 0, (uint64_t)s + 1};
    }
    float *lg = malloc((size_t)S * V * sizeof *lg);
    int32_t t[S], pos[S], seq[S];
    uint8_t want[S];
    const hr_adapter *bad[S];
    for (int s = 0; s < S; s++) {
        seq[s] = s;
        want[s] = 1;
        bad[s] = ad[s];
    }
    for (int i = 0; i < N; i++) {
        for (int s = 0; s < S; s++) {
            t[s] = tok[s][i];
            pos[s] = i;
        }
        hr_batch b = {.n_tokens = S, .token = t, .pos = pos, .seq = seq, .logits = want,
                      .n_seqs = S, .seqs = sb, .adapter = bad};
        assert_int_equal(hr_forward(f, &kv, &b, lg, &err), 0);
        for (int s = 0; s < S; s++)
            if (memcmp(lg + (size_t)s * V, alone + ((size_t)s * N + i) * V, V * sizeof *lg))
                fail_msg("step %d row %d (%s): batched logits differ from the row alone", i, s,
                         names[s] ? names[s] : "no adapter");
    }
    /* an adapter changes the logits (the rows are not all the base's) */
    assert_true(memcmp(alone, alone + 3 * (size_t)N * V, (size_t)N * V * sizeof *alone) != 0);
    printf("batched: %d steps of %d rows (3 adapters, one row of none, 1 more) equal to each "
           "row alone\n", N, S);
    free(lg);
    free(alone);
    hr_fwd_free(f);
    hr_kv_deinit(&kv);
    for (int s = 0; s < S; s++)
        hr_adapter_unref(ad[s]);
    hr_model_free(m);
}

/* ---- errors -------------------------------------------------------------------- */

/* An adapter directory under g_tmp: config text and F32 tensors, each
 * name with shape (rows, cols) filled with 0.01. */
typedef struct tdesc {
    const char *name;
    int64_t rows, cols; /* cols 0: 1-D */
} tdesc;

static void make_adapter(const char *dir, const char *file, const char *config,
                         const tdesc *t, int n) {
    char path[8300];
    assert_int_equal(hr_test_put(g_tmp, "x", ""), 0);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char rel[8300];
    snprintf(rel, sizeof rel, "%s/adapter_config.json", dir + strlen(g_tmp) + 1);
    assert_int_equal(hr_test_put(g_tmp, rel, config), 0);
    hr_tensor ts[8];
    float *bufs[8];
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)t[i].rows * (size_t)(t[i].cols ? t[i].cols : 1);
        bufs[i] = malloc(cnt * sizeof(float));
        for (size_t k = 0; k < cnt; k++)
            bufs[i][k] = 0.01f;
        ts[i] = (hr_tensor){.name = t[i].name, .dtype = HR_DTYPE_F32,
                            .ndim = t[i].cols ? 2 : 1, .shape = {t[i].rows, t[i].cols},
                            .data = bufs[i], .nbytes = cnt * sizeof(float)};
    }
    snprintf(path, sizeof path, "%s/%s", dir, file);
    hr_error err = {0};
    assert_int_equal(hr_st_write(path, ts, (size_t)n, NULL, 0, &err), 0);
    for (int i = 0; i < n; i++)
        free(bufs[i]);
}

static void expect_error(const hr_model *m, const char *case_name, const char *file,
                         const char *config, const tdesc *t, int n, int code,
                         const char *needle) {
    char dir[8300];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, case_name);
    if (file)
        make_adapter(dir, file, config, t, n);
    hr_adapter *a = NULL;
    hr_error err = {0};
    int rc = hr_adapter_open(&a, m, dir, case_name, &err);
    if (rc != code || !strstr(err.msg, needle))
        fail_msg("%s: rc %d (%s), want %d with '%s'", case_name, rc, err.msg, code, needle);
    assert_null(a);
    printf("error %-14s %s\n", case_name, err.msg);
}

#define PEFT(extra) "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, " \
                    "\"target_modules\": [\"q_proj\"]" extra "}"
#define QA "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
#define QB "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"

static void test_errors(void **state) {
    (void)state;
    hr_model *m = open_base("llama"); /* d 64, q 64 out, 3 layers */
    const char *ST = "adapter_model.safetensors";
    expect_error(m, "ia3", ST, "{\"peft_type\": \"IA3\", \"target_modules\": [\"k_proj\"]}",
                 (tdesc[]){{QA, 4, 64}, {QB, 64, 4}}, 2, HR_EUNSUPPORTED,
                 "unsupported adapter type IA3");
    expect_error(m, "shape", ST, PEFT(""), (tdesc[]){{QA, 4, 32}, {QB, 64, 4}}, 2, HR_EINVAL,
                 "shape mismatch with the base");
    expect_error(m, "shape-out", ST, PEFT(""), (tdesc[]){{QA, 4, 64}, {QB, 96, 4}}, 2,
                 HR_EINVAL, "shape mismatch with the base");
    expect_error(m, "module", ST, PEFT(""),
                 (tdesc[]){{"base_model.model.model.layers.0.self_attn.c_attn.lora_A.weight", 4, 64},
                           {"base_model.model.model.layers.0.self_attn.c_attn.lora_B.weight", 64, 4}},
                 2, HR_EUNSUPPORTED, "unknown target module");
    expect_error(m, "lm-head", ST, PEFT(""),
                 (tdesc[]){{"base_model.model.lm_head.lora_A.weight", 4, 64},
                           {"base_model.model.lm_head.lora_B.weight", 512, 4}},
                 2, HR_EUNSUPPORTED, "unknown target module");
    expect_error(m, "target", ST,
                 "{\"peft_type\": \"LORA\", \"r\": 4, \"target_modules\": [\"c_attn\"]}",
                 (tdesc[]){{QA, 4, 64}, {QB, 64, 4}}, 2, HR_EUNSUPPORTED,
                 "'c_attn' is an unknown target module");
    expect_error(m, "layer", ST, PEFT(""),
                 (tdesc[]){{"base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight", 4, 64},
                           {"base_model.model.model.layers.7.self_attn.q_proj.lora_B.weight", 64, 4}},
                 2, HR_EINVAL, "names layer 7");
    expect_error(m, "rank", ST, PEFT(""), (tdesc[]){{QA, 8, 64}, {QB, 64, 8}}, 2, HR_EINVAL,
                 "has rank 8; the config says 4");
    expect_error(m, "half", ST, PEFT(""), (tdesc[]){{QA, 4, 64}}, 1, HR_EFORMAT,
                 "has lora_A but not lora_B");
    expect_error(m, "dora", ST, PEFT(", \"use_dora\": true"),
                 (tdesc[]){{QA, 4, 64}, {QB, 64, 4}}, 2, HR_EFORMAT,
                 "DoRA without a magnitude vector");
    expect_error(m, "bias", ST, PEFT(", \"bias\": \"all\""),
                 (tdesc[]){{QA, 4, 64}, {QB, 64, 4}}, 2, HR_EUNSUPPORTED, "train biases");
    expect_error(m, "embed", ST, PEFT(""),
                 (tdesc[]){{"base_model.model.model.embed_tokens.lora_embedding_A", 4, 512},
                           {QB, 64, 4}}, 2, HR_EUNSUPPORTED, "is not a LoRA matrix");
    expect_error(m, "mlx-full", "adapters.safetensors",
                 "{\"fine_tune_type\": \"full\", \"num_layers\": 2}",
                 (tdesc[]){{"model.layers.2.self_attn.q_proj.weight", 64, 64}}, 1,
                 HR_EUNSUPPORTED, "unsupported adapter type full");
    expect_error(m, "mlx-layers", "adapters.safetensors",
                 "{\"fine_tune_type\": \"lora\", \"num_layers\": 1, "
                 "\"lora_parameters\": {\"rank\": 4, \"scale\": 2.0}}",
                 (tdesc[]){{"model.layers.0.self_attn.q_proj.lora_a", 64, 4},
                           {"model.layers.0.self_attn.q_proj.lora_b", 4, 64}}, 2, HR_EINVAL,
                 "outside the adapter's num_layers");
    expect_error(m, "mlx-shape", "adapters.safetensors",
                 "{\"fine_tune_type\": \"lora\", \"num_layers\": 3, "
                 "\"lora_parameters\": {\"rank\": 4, \"scale\": 2.0}}",
                 (tdesc[]){{"model.layers.0.mlp.down_proj.lora_a", 64, 4},
                           {"model.layers.0.mlp.down_proj.lora_b", 4, 64}}, 2, HR_EINVAL,
                 "shape mismatch with the base");
    expect_error(m, "missing", NULL, NULL, NULL, 0, HR_ENOTFOUND, "does not exist");
    assert_int_equal(hr_test_put(g_tmp, "empty/readme.txt", "x"), 0);
    expect_error(m, "empty", NULL, NULL, NULL, 0, HR_ENOTFOUND, "holds no adapter");

    /* a valid one: B = 0.01 everywhere moves the logits; no error */
    char dir[8300];
    snprintf(dir, sizeof dir, "%s/ok", g_tmp);
    make_adapter(dir, ST, PEFT(""), (tdesc[]){{QA, 4, 64}, {QB, 64, 4}}, 2);
    hr_adapter *a = NULL;
    hr_error err = {0};
    assert_int_equal(hr_adapter_open(&a, m, dir, "ok", &err), 0);
    assert_int_equal(a->n_mats, 1);
    assert_non_null(hr_adapter_mat(a, 0, HR_LORA_Q));
    assert_null(hr_adapter_mat(a, 1, HR_LORA_Q));
    assert_true(fabsf(a->mats[0].scale - 2.0f) < 1e-7f);
    hr_adapter_unref(a);
    hr_model_free(m);
}

/* ---- main ---------------------------------------------------------------------- */

static int cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void) {
    const char *root = getenv("HEARTH_ROOT");
    snprintf(g_root, sizeof g_root, "%s/tests/fixtures", root ? root : ".");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hearth_test_adapter_%d", (int)getpid());
    char d[8300];
    snprintf(d, sizeof d, "%s/lora", g_root);
    char *names[64];
    size_t n = 0;
    DIR *dh = opendir(d);
    struct dirent *e;
    while (dh && (e = readdir(dh)) && n < 64) {
        char rp[8600];
        snprintf(rp, sizeof rp, "%s/%s/ref.json", d, e->d_name);
        if (e->d_name[0] != '.' && access(rp, F_OK) == 0)
            names[n++] = strdup(e->d_name);
    }
    if (dh)
        closedir(dh);
    qsort(names, n, sizeof *names, cmp);
    if (n == 0)
        printf("NOTE: no fixtures in %s (tools/refgen/lora.py makes them on the GPU machine): "
               "only the load errors are tested\n", d);
    if (hr_test_put(g_tmp, "x", "") != 0) {
        fprintf(stderr, "cannot create %s\n", g_tmp);
        return 1;
    }
    struct CMUnitTest *tests = calloc(3 * n + 3, sizeof *tests);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        tests[k++] = (struct CMUnitTest){.name = names[i], .test_func = test_parity,
                                         .initial_state = names[i]};
    for (size_t i = 0; i < n; i++)
        if (!strncmp(names[i], "llama", 5)) /* a GGUF llama permutes q/k */
            tests[k++] = (struct CMUnitTest){.name = "gguf", .test_func = test_parity_gguf,
                                             .initial_state = names[i]};
    for (size_t i = 0; i < n; i++)
        tests[k++] = (struct CMUnitTest){.name = "fused", .test_func = test_fused,
                                         .initial_state = names[i]};
    if (n) {
        tests[k++] = (struct CMUnitTest){.name = "batched", .test_func = test_batched};
        tests[k++] = (struct CMUnitTest){.name = "quant-base", .test_func = test_quant_base};
    }
    tests[k++] = (struct CMUnitTest){.name = "errors", .test_func = test_errors};
    int rc = _cmocka_run_group_tests("adapter", tests, k, NULL, NULL);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0)
        rc = 1;
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(tests);
    return rc;
}
