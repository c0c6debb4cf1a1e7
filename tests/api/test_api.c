/* The public API (include/hearth.h, src/api/) on the demo model: loading
 * and its errors, text helpers, sessions (options honoured), requests
 * through the pull iterator and the callback, stop strings, structured
 * output, cancel, usage, every parameter error, and prompt scoring
 * (score_from: teacher forcing through the engine, as perplexity uses it). */
#include "hearth.h"
#include "api/api.h" /* hr__kv_types_from_names: the CLI flags to the options */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <limits.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_model[4096];
static hr_llm *g_llm;
static hr_session *g_sess;

static int setup(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    snprintf(g_model, sizeof g_model, "%s/models/hearth-demo", root ? root : ".");
    hr_error err = {0};
    hr_llm_opts lo = {.n_threads = 1};
    if (hr_llm_load(&g_llm, g_model, &lo, &err) ||
        hr_session_new(&g_sess, g_llm, &(hr_session_opts){.max_batch = 4, .n_ctx = 512}, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    hr_session_free(g_sess);
    hr_llm_free(g_llm);
    return 0;
}

/* Run a request to the end through the pull iterator: the text, the last
 * event, the number of token events. */
static int collect(const hr_gen_params *p, char *text, size_t cap, hr_gen_event *last,
                   hr_error *err) {
    hr_gen *g = NULL;
    int rc = hr_gen_submit(&g, g_sess, p, err), n = 0;
    size_t len = 0;
    hr_gen_event ev;
    text[0] = 0;
    while (!rc && (rc = hr_gen_next(g, &ev, err)) == 1) {
        assert_true(len + ev.text_len < cap);
        memcpy(text + len, ev.text, ev.text_len);
        text[len += ev.text_len] = 0;
        if (ev.token >= 0)
            n++;
        else
            *last = ev;
        rc = 0;
        if (ev.finish != HR_GEN_RUNNING)
            break;
    }
    if (!rc)
        assert_int_equal(hr_gen_next(g, &ev, err), 0); /* nothing after the last event */
    hr_gen_free(g);
    return rc ? rc : n;
}

static void test_load_errors(void **state) {
    (void)state;
    hr_error err = {0};
    hr_llm *m = (hr_llm *)1;
    assert_true(hr_llm_load(&m, "/nonexistent/model", NULL, &err) < 0);
    assert_null(m);
    assert_non_null(strstr(err.msg, "/nonexistent/model"));
    assert_int_equal(hr_llm_load(&m, g_model, &(hr_llm_opts){.n_threads = -1}, &err), HR_ERANGE);
    /* the quantized activations: a load option, named in its error */
    assert_int_equal(hr_llm_load(&m, g_model, &(hr_llm_opts){.quant_act = "int4"}, &err),
                     HR_EINVAL);
    assert_non_null(strstr(err.msg, "'int4'"));
    assert_null(m);
    setenv("HEARTH_QUANT_ACT", "fast", 1); /* the environment's, when the option is NULL */
    assert_int_equal(hr_llm_load(&m, g_model, NULL, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "'fast'"));
    assert_int_equal(hr_llm_load(&m, g_model, &(hr_llm_opts){.quant_act = "f32"}, &err), 0);
    unsetenv("HEARTH_QUANT_ACT");
    hr_llm_free(m);
    m = NULL;
    /* the CPU kernels: process-wide, fixed by the first load (setup's: the best) */
    assert_int_equal(hr_llm_load(&m, g_model, &(hr_llm_opts){.isa = "avx1024"}, &err),
                     HR_EINVAL);
    assert_non_null(strstr(err.msg, "'avx1024'"));
    if (hr_llm_load(&m, g_model, &(hr_llm_opts){.isa = "scalar"}, &err) == 0) {
        hr_llm_free(m); /* only on a CPU whose best is the scalar code */
        m = NULL;
    } else {
        assert_non_null(strstr(err.msg, "chosen once"));
    }
    assert_int_equal(hr_llm_load(NULL, g_model, NULL, NULL), HR_EINVAL);
    hr_llm_free(NULL);
    hr_session_free(NULL);
    hr_gen_free(NULL);
    assert_string_equal(hr_version(), "0.1.0");
    assert_string_equal(hr_strerror(HR_ENOTFOUND), "not found");
}

/* A tokenizer whose added tokens reach past the model's embedding rows
 * (8192): a load error naming the first such token, not a failure at the
 * first request that has it. The directory links the demo model's files. */
static void test_load_rows(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth-rows-XXXXXX", p[4096], q[4096], model[PATH_MAX];
    assert_non_null(mkdtemp(dir));
    assert_non_null(realpath(g_model, model));
    const char *files[] = {"config.json", "generation_config.json", "tokenizer_config.json",
                           "model.safetensors.index.json", "model-00001-of-00003.safetensors",
                           "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", model, files[i]);
        snprintf(q, sizeof q, "%s/%s", dir, files[i]);
        assert_int_equal(symlink(p, q), 0);
    }
    snprintf(p, sizeof p, "%s/tokenizer.json", g_model);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    static char buf[1 << 21];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *at = strstr(buf, "\"added_tokens\"");
    assert_non_null(at);
    at = strchr(at, '[') + 1;
    snprintf(q, sizeof q, "%s/tokenizer.json", dir);
    f = fopen(q, "wb");
    assert_non_null(f);
    fwrite(buf, 1, (size_t)(at - buf), f);
    /* declared 9000: HF (and hearth) give it the next id, 8192 */
    fputs("{\"id\":9000,\"content\":\"<extra>\",\"single_word\":false,\"lstrip\":false,"
          "\"rstrip\":false,\"normalized\":false,\"special\":true},", f);
    fwrite(at, 1, n - (size_t)(at - buf), f);
    fclose(f);
    /* the model loads (a warning names the token), plain text is served,
     * a prompt with the token is refused */
    hr_llm *m = NULL;
    hr_session *s = NULL;
    hr_gen *g = NULL;
    hr_error err = {0};
    int rc = hr_llm_load(&m, dir, &(hr_llm_opts){.n_threads = 1}, &err);
    if (rc)
        fail_msg("load: %d %s", rc, err.msg);
    assert_int_equal(hr_session_new(&s, m, &(hr_session_opts){.n_ctx = 64}, &err), 0);
    hr_gen_params gp;
    hr_gen_params_default(&gp);
    gp.max_tokens = 1;
    gp.prompt_text = "plain text";
    assert_int_equal(hr_gen_submit(&g, s, &gp, &err), 0);
    hr_gen_free(g);
    g = NULL;
    gp.prompt_text = "text <extra>";
    rc = hr_gen_submit(&g, s, &gp, &err);
    if (!rc)
        fail_msg("a prompt with id 8192 was accepted");
    assert_null(g);
    assert_non_null(strstr(err.msg, "8192"));
    hr_session_free(s);
    hr_llm_free(m);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(q, sizeof q, "%s/%s", dir, files[i]);
        unlink(q);
    }
    snprintf(q, sizeof q, "%s/tokenizer.json", dir);
    unlink(q);
    rmdir(dir);
}

static void test_text(void **state) {
    (void)state;
    hr_error err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    const char *s = "What does abate mean?";
    assert_int_equal(hr_llm_tokenize(g_llm, s, strlen(s), 0, &ids, &n, &err), 0);
    assert_true(n > 2);
    char *back = NULL;
    assert_int_equal(hr_llm_detokenize(g_llm, ids, n, 0, &back, NULL, &err), 0);
    assert_string_equal(back, s);
    hr_free(back);
    hr_free(ids);
    int32_t bad = 1 << 30;
    assert_true(hr_llm_detokenize(g_llm, &bad, 1, 0, &back, NULL, &err) < 0);
    char *prompt = NULL;
    assert_int_equal(hr_llm_chat_render(g_llm, "[{\"role\": \"user\", \"content\": \"Hi\"}]",
                                        NULL, NULL, 1, &prompt, &err), 0);
    assert_non_null(strstr(prompt, "Hi"));
    assert_non_null(strstr(prompt, "<|im_start|>assistant"));
    hr_free(prompt);
    assert_int_equal(hr_llm_chat_render(g_llm, "[{\"content\": \"Hi\"}]", NULL, NULL, 1,
                                        &prompt, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "role"));
    assert_int_equal(hr_llm_chat_render(g_llm, "[1,", NULL, NULL, 1, &prompt, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "not valid JSON"));
    assert_true(hr_llm_n_vocab(g_llm) > 1000 && hr_llm_n_ctx_max(g_llm) >= 512);
}

static void test_session_options(void **state) {
    (void)state;
    hr_session_stats st;
    hr_session_stats_get(g_sess, &st);
    assert_int_equal(st.n_threads, 1); /* hr_llm_opts.n_threads */
    assert_int_equal(st.max_batch, 4);
    assert_int_equal(st.n_ctx, 512);
    hr_session *s = NULL;
    hr_error err = {0};
    assert_int_equal(hr_session_new(&s, g_llm, &(hr_session_opts){.n_threads = 2, .n_ctx = 64,
                                                                  .kv_dtype = HR_KV_F16,
                                                                  .prompt_cache = -1}, &err), 0);
    hr_session_stats_get(s, &st);
    assert_int_equal(st.n_threads, 2);
    assert_int_equal(st.n_ctx, 64);
    hr_session_free(s);
    assert_int_equal(hr_session_new(&s, g_llm, &(hr_session_opts){.kv_dtype = 9}, &err),
                     HR_EINVAL);
    assert_int_equal(hr_session_new(&s, g_llm, &(hr_session_opts){.max_batch = -1}, &err),
                     HR_ERANGE);
}

static void test_greedy_and_usage(void **state) {
    (void)state;
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.messages_json = "[{\"role\": \"user\", \"content\": \"What does abate mean?\"}]";
    p.max_tokens = 32;
    p.temperature = 0;
    char text[4096];
    hr_gen_event last;
    hr_error err = {0};
    int n = collect(&p, text, sizeof text, &last, &err);
    assert_true(n > 0);
    /* tests/fixtures/demo/golden.json, chat-abate */
    assert_string_equal(text, "To abate means to give a name to a name, as in \"The name of "
                              "the King referred\".");
    assert_int_equal(last.finish, HR_GEN_STOP);
    assert_int_equal(last.completion_tokens, n + 1); /* the end-of-turn token counts */
    assert_true(last.prompt_tokens > 5);
    /* the same request again: its prompt comes from the prompt cache */
    char again[4096];
    assert_true(collect(&p, again, sizeof again, &last, &err) == n);
    assert_string_equal(again, text);
    assert_true(last.cached_tokens > 0);
    p.max_tokens = 3;
    assert_int_equal(collect(&p, text, sizeof text, &last, &err), 3);
    assert_int_equal(last.finish, HR_GEN_LENGTH);
}

/* LoRA adapters of a session (docs/adapters.md): registered with
 * hr_session_opts.adapters, loaded on first use, listed, not removable
 * while a request uses one (HR_EBUSY), removable after; errors by code. */
static void test_adapters(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char llama[4200], ad[4200], spec[4300];
    snprintf(llama, sizeof llama, "%s/tests/fixtures/models/llama", root ? root : ".");
    snprintf(ad, sizeof ad, "%s/tests/fixtures/lora/llama-r8", root ? root : ".");
    snprintf(spec, sizeof spec, "r8=%s", ad);
    char ref[4300];
    snprintf(ref, sizeof ref, "%s/ref.json", ad);
    if (access(ref, F_OK) != 0) {
        printf("skipped: no %s (tools/refgen/lora.py makes it on the GPU machine)\n", ad);
        skip();
    }
    hr_error err = {0};
    hr_llm *m = NULL;
    hr_session *s = NULL;
    assert_int_equal(hr_llm_load(&m, llama, &(hr_llm_opts){.n_threads = 1}, &err), 0);
    /* n_ctx: room for a request that outlasts the checks below while it
     * runs (with 200 tokens this 3-layer model could end first on a loaded
     * machine, releasing the adapter) */
    assert_int_equal(hr_session_new(&s, m, &(hr_session_opts){.max_batch = 2, .n_ctx = 4096,
                                                               .adapters = spec}, &err), 0);
    char *list = hr_session_adapters_json(s);
    assert_non_null(strstr(list, "\"id\":\"r8\""));
    assert_non_null(strstr(list, "\"loaded\":false"));
    hr_free(list);
    const int32_t prompt[] = {5, 6, 7};
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_tokens = prompt;
    p.n_prompt_tokens = 3;
    p.max_tokens = 4000;
    p.ignore_eos = 1;
    p.temperature = 0;
    p.adapter = "r8";
    hr_gen *g = NULL;
    hr_gen_event ev;
    assert_int_equal(hr_gen_submit(&g, s, &p, &err), 0);
    assert_int_equal(hr_gen_next(g, &ev, &err), 1); /* running, holding the adapter */
    assert_int_equal(hr_session_adapter_remove(s, "r8", &err), HR_EBUSY);
    assert_non_null(strstr(err.msg, "in use"));
    list = hr_session_adapters_json(s);
    assert_non_null(strstr(list, "\"loaded\":true"));
    hr_free(list);
    hr_gen_cancel(g);
    while (hr_gen_next(g, &ev, &err) == 1)
        ;
    hr_gen_free(g);
    assert_int_equal(hr_session_adapter_remove(s, "r8", &err), 0);
    assert_int_equal(hr_session_adapter_remove(s, "r8", &err), HR_ENOTFOUND);
    assert_int_equal(hr_gen_submit(&g, s, &p, &err), HR_ENOTFOUND);
    assert_null(g);
    assert_int_equal(hr_session_adapter_add(s, "a b", ad, 0, &err), HR_EINVAL);
    assert_int_equal(hr_session_adapter_add(s, "x", "/nonexistent", 0, &err), HR_ENOTFOUND);
    assert_int_equal(hr_session_adapter_add(s, "r8", ad, 1, &err), 0);
    assert_int_equal(hr_session_adapter_add(s, "r8", ad, 1, &err), HR_EINVAL);
    p.max_tokens = 4;
    assert_int_equal(hr_gen_submit(&g, s, &p, &err), 0);
    int n = 0;
    while (hr_gen_next(g, &ev, &err) == 1 && ev.finish == HR_GEN_RUNNING)
        n++;
    assert_int_equal(n, 4);
    hr_gen_free(g);
    hr_session_free(s);
    hr_llm_free(m);
}

typedef struct cb_state {
    char text[4096];
    size_t len;
    int events, stop_after, finish;
} cb_state;

static int on_event(const hr_gen_event *ev, void *user) {
    cb_state *c = user;
    memcpy(c->text + c->len, ev->text, ev->text_len);
    c->text[c->len += ev->text_len] = 0;
    c->finish = ev->finish;
    return ++c->events == c->stop_after;
}

static void test_callback_and_cancel(void **state) {
    (void)state;
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_text = "In the beginning";
    p.max_tokens = 16;
    p.temperature = 0.8f;
    p.has_seed = 1;
    p.seed = 9;
    p.top_logprobs = 3;
    char pulled[4096];
    hr_gen_event last;
    hr_error err = {0};
    assert_int_equal(collect(&p, pulled, sizeof pulled, &last, &err), 16);
    cb_state c = {0};
    hr_gen *g = NULL;
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), 0);
    assert_int_equal(hr_gen_run(g, on_event, &c, &err), 0);
    hr_gen_free(g);
    assert_string_equal(c.text, pulled); /* seeded: the same text both ways */
    assert_int_equal(c.finish, HR_GEN_LENGTH);
    /* a callback returning non-zero cancels */
    cb_state d = {.stop_after = 2};
    p.max_tokens = 200;
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), 0);
    assert_int_equal(hr_gen_run(g, on_event, &d, &err), 0);
    assert_int_equal(d.events, 2);
    hr_gen_free(g);
    /* hr_gen_cancel: the reader gets a last event saying so */
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), 0);
    hr_gen_event ev;
    assert_int_equal(hr_gen_next(g, &ev, &err), 1);
    assert_int_equal(ev.n_top, 3);
    assert_true(ev.top_logprobs[0] >= ev.top_logprobs[1] && ev.logprob <= 0);
    hr_gen_cancel(g);
    while (hr_gen_next(g, &ev, &err) == 1 && ev.finish == HR_GEN_RUNNING)
        ;
    assert_int_equal(ev.finish, HR_GEN_CANCELLED);
    hr_gen_free(g);
}

static void test_stop_and_structured(void **state) {
    (void)state;
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_text = "In the beginning";
    p.max_tokens = 24;
    p.temperature = 0;
    char full[4096], cut[4096];
    hr_gen_event last;
    hr_error err = {0};
    assert_true(collect(&p, full, sizeof full, &last, &err) > 0);
    const char *at = strstr(full, "day");
    assert_non_null(at); /* the greedy text has it */
    const char *stops[] = {"zzz", "day"};
    p.stop = stops;
    p.n_stop = 2;
    assert_true(collect(&p, cut, sizeof cut, &last, &err) > 0);
    assert_int_equal(strlen(cut), (size_t)(at - full));
    assert_memory_equal(cut, full, strlen(cut));
    assert_int_equal(last.finish, HR_GEN_STOP);
    /* a regex: the whole text matches it */
    hr_gen_params_default(&p);
    p.prompt_text = "The number is";
    p.max_tokens = 16;
    p.temperature = 0.7f;
    p.has_seed = 1;
    p.regex = "[0-9]{3}-[a-z]+";
    assert_true(collect(&p, cut, sizeof cut, &last, &err) > 0);
    regex_t re;
    assert_int_equal(regcomp(&re, "^[0-9]{3}-[a-z]+$", REG_EXTENDED), 0);
    assert_int_equal(regexec(&re, cut, 0, NULL, 0), 0);
    regfree(&re);
    /* choices */
    hr_gen_params_default(&p);
    p.prompt_text = "Yes or no?";
    const char *ch[] = {"yes", "no"};
    p.choices = ch;
    p.n_choices = 2;
    p.max_tokens = 8;
    assert_true(collect(&p, cut, sizeof cut, &last, &err) > 0);
    assert_true(!strcmp(cut, "yes") || !strcmp(cut, "no"));
    assert_int_equal(last.finish, HR_GEN_STOP);
}

static void test_param_errors(void **state) {
    (void)state;
    hr_gen *g = NULL;
    hr_error err = {0};
    hr_gen_params p;
    int32_t toks[] = {1, 2, 3};
    hr_gen_params_default(&p);
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), HR_EINVAL); /* no prompt */
    assert_non_null(strstr(err.msg, "exactly one"));
    p.prompt_text = "x";
    p.prompt_tokens = toks;
    p.n_prompt_tokens = 3;
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), HR_EINVAL); /* two prompts */
    p.prompt_text = NULL;
    p.regex = "a";
    p.json_object = 1;
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "at most one"));
    p.regex = NULL;
    p.json_object = 0;
    p.json_schema = "{not json";
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), HR_EINVAL);
    p.json_schema = NULL;
    p.top_logprobs = 99;
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), HR_ERANGE);
    p.top_logprobs = 0;
    p.top_k = 1 << 30;
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), HR_ERANGE);
    p.top_k = -1;
    p.n_stop = 17;
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), HR_ERANGE);
    p.n_stop = 0;
    toks[1] = 1 << 30;
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), HR_ERANGE);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    toks[1] = 2;
    p.temperature = 0;
    p.top_p = 2;
    assert_true(hr_gen_submit(&g, g_sess, &p, &err) < 0);
    assert_non_null(strstr(err.msg, "top_p"));
    p.top_p = -1;
    int32_t *big = calloc(600, sizeof *big);
    p.prompt_tokens = big;
    p.n_prompt_tokens = 600;
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), HR_ERANGE); /* past n_ctx 512 */
    assert_non_null(strstr(err.msg, "context limit is 512"));
    free(big);
    assert_null(g);
    assert_int_equal(hr_gen_next(NULL, NULL, &err), HR_EINVAL);
}

/* Score ids[0..n) from index from with a session: *lp gets a copy (n). */
static void score(hr_session *s, const int32_t *ids, int n, int from, int max_tokens,
                  float *lp, int *cached) {
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_tokens = ids;
    p.n_prompt_tokens = n;
    p.max_tokens = max_tokens;
    p.temperature = 0;
    p.score_from = from;
    hr_gen *g = NULL;
    hr_error err = {0};
    if (hr_gen_submit(&g, s, &p, &err))
        fail_msg("%s", err.msg);
    hr_gen_event ev;
    int rc, k = 0;
    while ((rc = hr_gen_next(g, &ev, &err)) == 1 && ev.finish == HR_GEN_RUNNING)
        k++;
    assert_int_equal(rc, 1);
    assert_int_equal(k, max_tokens);
    assert_int_equal(ev.finish, HR_GEN_LENGTH);
    *cached = ev.cached_tokens;
    int m = 0;
    const float *l = hr_gen_prompt_logprobs(g, &m);
    assert_non_null(l);
    assert_int_equal(m, n);
    memcpy(lp, l, (size_t)n * sizeof *lp);
    hr_gen_free(g);
}

/* Prompt scoring equals generation's own log-probabilities (the same
 * logits, teacher-forced), never comes from the prompt cache, fills the
 * whole context with max_tokens 0, and is refused outside the prompt. */
static void test_score_prompt(void **state) {
    (void)state;
    enum { P = 40, G = 24 };
    int32_t ids[P + G];
    for (int i = 0; i < P; i++)
        ids[i] = 5 + (i * 37) % 400;
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_tokens = ids;
    p.n_prompt_tokens = P;
    p.max_tokens = G;
    p.temperature = 0;
    p.ignore_eos = 1;
    float gen_lp[G];
    hr_gen *g = NULL;
    hr_error err = {0};
    assert_int_equal(hr_gen_submit(&g, g_sess, &p, &err), 0);
    assert_null(hr_gen_prompt_logprobs(g, NULL)); /* not asked */
    hr_gen_event ev;
    for (int i = 0; i < G; i++) {
        assert_int_equal(hr_gen_next(g, &ev, &err), 1);
        ids[P + i] = ev.token;
        gen_lp[i] = ev.logprob;
    }
    hr_gen_free(g);

    float lp[P + G], again[P + G];
    int cached = -1;
    score(g_sess, ids, P + G, P, 0, lp, &cached);
    for (int i = 0; i < P; i++)
        assert_true(isnan(lp[i]));
    for (int i = 0; i < G; i++)
        if (fabsf(lp[P + i] - gen_lp[i]) > 1e-4f)
            fail_msg("token %d: scored %g, generated %g", i, lp[P + i], gen_lp[i]);
    /* again, from index 1, with the sequence now in the prompt cache */
    score(g_sess, ids, P + G, 1, 0, lp, &cached);
    score(g_sess, ids, P + G, 1, 2, again, &cached);
    assert_int_equal(cached, 0);
    assert_true(isnan(lp[0]));
    for (int i = 1; i < P + G; i++) {
        assert_true(lp[i] <= 0 && isfinite(lp[i]));
        assert_true(lp[i] == again[i]);
    }
    for (int i = 0; i < G; i++)
        assert_true(fabsf(lp[P + i] - gen_lp[i]) <= 1e-4f);

    /* a prompt that fills the context is fine with max_tokens 0 only */
    hr_session *small = NULL;
    assert_int_equal(hr_session_new(&small, g_llm, &(hr_session_opts){.max_batch = 2,
                                                                        .n_ctx = 64}, &err), 0);
    float full[64];
    score(small, ids, 64, 1, 0, full, &cached);
    for (int i = 1; i < 40; i++)
        assert_true(fabsf(full[i] - lp[i]) <= 1e-4f);
    hr_gen_params_default(&p);
    p.prompt_tokens = ids;
    p.n_prompt_tokens = 64;
    p.max_tokens = 1;
    p.score_from = 1;
    assert_int_equal(hr_gen_submit(&g, small, &p, &err), HR_ERANGE);
    p.max_tokens = 0;
    p.score_from = 64;
    assert_int_equal(hr_gen_submit(&g, small, &p, &err), HR_ERANGE);
    assert_non_null(strstr(err.msg, "scoring"));
    assert_null(g);
    hr_session_free(small);
}

/* The mean |dlogprob| per token of a short text scored on a session made
 * with o, against g_sess's f32 KV; -1 when such a session is refused as
 * not supported yet (a GPU's pool: TurboQuant is CPU-only yet). */
static double kv_drift(hr_session_opts o) {
    enum { N = 160 };
    int32_t *ids = NULL;
    size_t n = 0;
    hr_error err = {0};
    const char *text = "The old lighthouse keeper climbed the stairs every evening. He lit the "
                       "lamp, wound the clock and watched the ships pass the rocks below. One "
                       "night a storm came in from the west, and the keeper saw a small boat "
                       "struggling against the waves near the harbour wall. He ran down.";
    assert_int_equal(hr_llm_tokenize(g_llm, text, strlen(text), HR_TOKENIZE_ADD_SPECIAL, &ids,
                                     &n, &err), 0);
    assert_true(n > 40 && n < N);
    float ref[N], got[N];
    int cached;
    score(g_sess, ids, (int)n, 1, 0, ref, &cached);
    o.max_batch = 1;
    o.n_ctx = 256;
    hr_session *s = NULL;
    int rc = hr_session_new(&s, g_llm, &o, &err);
    if (rc == HR_EUNSUPPORTED) {
        assert_non_null(strstr(err.msg, "not supported yet"));
        printf("skipped: %s\n", err.msg);
        hr_free(ids);
        return -1;
    }
    assert_int_equal(rc, 0);
    score(s, ids, (int)n, 1, 0, got, &cached);
    hr_session_free(s);
    double d = 0;
    for (size_t i = 1; i < n; i++)
        d += fabs((double)got[i] - ref[i]);
    hr_free(ids);
    return d / (double)(n - 1);
}

/* TurboQuant KV (--kv-quant turbo): the scores of a text move by a bounded
 * amount per token from f32 KV, more at fewer bits (measured: 4-bit 0.26,
 * 3.5-bit 0.38, 2.5-bit 0.62, K 4 / V 2 0.54; 0.29, 0.48, 0.73, 0.73 with
 * the first format's norm and one rotation round); the options refuse a bad
 * rate and other quantized caches beside it. */
static void test_score_kv_quant(void **state) {
    (void)state;
    hr_error err = {0};
    const char *specs[] = {"turbo:4", "turbo", "turbo:2.5", "turbo:4,2"};
    double d[4];
    for (int c = 0; c < 4; c++)
        if ((d[c] = kv_drift((hr_session_opts){.kv_quant = specs[c]})) < 0)
            return;
    printf("mean |dlogprob| turbo 4-bit %g, 3.5-bit %g, 2.5-bit %g, K 4 / V 2 %g\n", d[0], d[1],
           d[2], d[3]);
    if (!(d[0] > 0 && d[0] < 0.45 && d[1] > d[0] && d[1] < 0.8 && d[2] > d[1] && d[2] < 1.2 &&
          d[3] > 0 && d[3] < 1.2))
        fail_msg("mean |dlogprob|: turbo 4 %g, 3.5 %g, 2.5 %g, 4/2 %g", d[0], d[1], d[2], d[3]);
    hr_session *s = NULL;
    assert_int_equal(hr_session_new(&s, g_llm, &(hr_session_opts){.kv_quant = "turbo:5"}, &err),
                     HR_EINVAL);
    assert_non_null(strstr(err.msg, "--kv-quant"));
    assert_int_equal(hr_session_new(&s, g_llm, &(hr_session_opts){.kv_quant = "turbo",
                                                                  .kv_bits = 4}, &err),
                     HR_EINVAL);
    assert_int_equal(hr_session_new(&s, g_llm, &(hr_session_opts){.kv_quant = "turbo",
                                                                  .kv_dtype = HR_KV_Q8_0}, &err),
                     HR_EINVAL);
    assert_non_null(strstr(err.msg, "pick one"));
}

/* llama.cpp's cache types (--cache-type-k / -v): the scores of a text move
 * by little at q8_0, by more at q4_0, K and V may differ; the options' bad
 * combinations are refused. */
static void test_score_cache_types(void **state) {
    (void)state;
    hr_error err = {0};
    const int kv[][2] = {{HR_KV_Q8_0, 0}, {HR_KV_Q4_0, 0}, {HR_KV_Q8_0, HR_KV_F16},
                         {HR_KV_F32, HR_KV_Q4_0}};
    double d[4];
    for (int c = 0; c < 4; c++)
        if ((d[c] = kv_drift((hr_session_opts){.kv_dtype = kv[c][0],
                                               .kv_dtype_v = kv[c][1]})) < 0)
            return;
    printf("mean |dlogprob| q8_0 %g, q4_0 %g, q8_0/f16 %g, f32/q4_0 %g\n", d[0], d[1], d[2],
           d[3]);
    if (!(d[0] > 0 && d[0] < 0.03 && d[1] > d[0] && d[1] < 0.6 && d[2] > 0 && d[2] < 0.03 &&
          d[3] > 0 && d[3] < 0.6))
        fail_msg("mean |dlogprob|: q8_0 %g, q4_0 %g, q8_0/f16 %g, f32/q4_0 %g", d[0], d[1], d[2],
                 d[3]);
    hr_session *s = NULL;
    assert_int_equal(hr_session_new(&s, g_llm, &(hr_session_opts){.kv_dtype_v = 9}, &err),
                     HR_EINVAL);
    assert_int_equal(hr_session_new(&s, g_llm, &(hr_session_opts){.kv_dtype = HR_KV_Q8_0,
                                                                  .kv_bits = 4}, &err),
                     HR_EINVAL);
    assert_non_null(strstr(err.msg, "--kv-bits"));
    /* the flags' names, and a cache type not given with --kv-dtype auto: f16 */
    int k, v;
    assert_int_equal(hr__kv_types_from_names(NULL, "q8_0", NULL, &k, &v, &err), 0);
    assert_true(k == HR_KV_Q8_0 && v == HR_KV_F16);
    assert_int_equal(hr__kv_types_from_names("bf16", NULL, "Q4_0", &k, &v, &err), 0);
    assert_true(k == HR_KV_BF16 && v == HR_KV_Q4_0);
    assert_int_equal(hr__kv_types_from_names(NULL, "q4_0", "q4_0", &k, &v, &err), 0);
    assert_true(k == HR_KV_Q4_0 && v == 0);
    assert_int_equal(hr__kv_types_from_names(NULL, NULL, "q5_1", &k, &v, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "--cache-type-v"));
}

/* The 8-bit KV cache (mlx-lm's affine, from the first token) scores a text
 * within a small distance of the f32 cache (mean |dlogprob| per token);
 * 4 bits further. */
static void test_score_kv_bits(void **state) {
    (void)state;
    double d8 = kv_drift((hr_session_opts){.kv_bits = 8}), d4;
    if (d8 < 0 || (d4 = kv_drift((hr_session_opts){.kv_bits = 4})) < 0)
        return;
    if (!(d8 > 0 && d8 < 0.03 && d4 > d8 && d4 < 0.6)) /* 0.014, 0.35 measured */
        fail_msg("mean |dlogprob|: 8-bit %g, 4-bit %g", d8, d4);
}

/* Tool calls through the API: a forced call (tool_choice "required" or a
 * name) in the Qwen3 template's format comes back as call pieces apart
 * from the text, and the server's parser is the one that splits them. */
static void test_tool_calls(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/fixtures/chat/templates/Qwen-Qwen3-0.6B.jinja",
             root ? root : ".");
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char tmpl[65536];
    size_t n = fread(tmpl, 1, sizeof tmpl - 1, f);
    fclose(f);
    tmpl[n] = 0;
    hr_error err = {0};
    hr_llm *m = NULL;
    hr_session *s = NULL;
    assert_int_equal(hr_llm_load(&m, g_model, &(hr_llm_opts){.n_threads = 1,
                                                             .chat_template = tmpl}, &err), 0);
    assert_int_equal(hr_session_new(&s, m, &(hr_session_opts){.max_batch = 2, .n_ctx = 1024},
                                    &err), 0);
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                        "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
                        "{\"type\": \"string\", \"maxLength\": 12}}, \"required\": [\"city\"]}}}]";
    const char *choices[] = {"required", "get_weather", "none"};
    for (int c = 0; c < 3; c++) {
        hr_gen_params p;
        hr_gen_params_default(&p);
        p.messages_json = "[{\"role\": \"user\", \"content\": \"Weather in Paris?\"}]";
        p.tools_json = tools;
        p.tool_choice = choices[c];
        p.max_tokens = 96;
        p.temperature = 0;
        hr_gen *g = NULL;
        assert_int_equal(hr_gen_submit(&g, s, &p, &err), 0);
        hr_gen_event ev;
        char args[1024] = "", name[64] = "";
        int starts = 0, ends = 0, rc;
        size_t al = 0;
        while ((rc = hr_gen_next(g, &ev, &err)) == 1) {
            for (int i = 0; i < ev.n_tool_events; i++) {
                const hr_gen_tool_event *t = &ev.tool_events[i];
                assert_int_equal(t->index, 0);
                if (t->kind == HR_TOOL_CALL_START) {
                    starts++;
                    snprintf(name, sizeof name, "%s", t->name);
                    assert_non_null(strstr(t->id, "call_"));
                } else if (t->kind == HR_TOOL_CALL_ARGS) {
                    assert_true(al + t->args_len < sizeof args);
                    memcpy(args + al, t->args, t->args_len);
                    args[al += t->args_len] = 0;
                } else {
                    assert_int_equal(t->kind, HR_TOOL_CALL_END);
                    ends++;
                }
            }
            if (ev.finish != HR_GEN_RUNNING)
                break;
        }
        assert_int_equal(rc, 1);
        if (c < 2) { /* forced: one whole call, valid arguments */
            assert_int_equal(ev.finish, HR_GEN_STOP);
            assert_int_equal(ev.n_tool_calls, 1);
            assert_int_equal(starts, 1);
            assert_int_equal(ends, 1);
            assert_string_equal(name, "get_weather");
            assert_non_null(strstr(args, "\"city\""));
            assert_true(args[0] == '{' && args[al - 1] == '}');
        } else { /* none: text only */
            assert_int_equal(starts + ends, 0);
            assert_int_equal(ev.n_tool_calls, 0);
        }
        hr_gen_free(g);
    }
    /* a forced call needs tools; a name must be one of them */
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.messages_json = "[{\"role\": \"user\", \"content\": \"Hi\"}]";
    p.tool_choice = "required";
    hr_gen *g = NULL;
    assert_int_equal(hr_gen_submit(&g, s, &p, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "tools_json"));
    p.tools_json = tools;
    p.tool_choice = "get_time";
    assert_true(hr_gen_submit(&g, s, &p, &err) < 0);
    assert_non_null(strstr(err.msg, "get_time"));
    p.tool_choice = "required";
    p.json_object = 1;
    assert_int_equal(hr_gen_submit(&g, s, &p, &err), HR_EINVAL);
    assert_null(g);
    hr_session_free(s);
    hr_llm_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_errors),        cmocka_unit_test(test_text),
        cmocka_unit_test(test_session_options),    cmocka_unit_test(test_greedy_and_usage),
        cmocka_unit_test(test_callback_and_cancel), cmocka_unit_test(test_stop_and_structured),
        cmocka_unit_test(test_param_errors),       cmocka_unit_test(test_score_prompt),
        cmocka_unit_test(test_score_kv_bits),      cmocka_unit_test(test_tool_calls),
        cmocka_unit_test(test_score_cache_types),
        cmocka_unit_test(test_score_kv_quant),
        cmocka_unit_test(test_adapters),
        cmocka_unit_test(test_load_rows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
