/* hearth grammar: compile a grammar against a model's tokenizer; with
 * --check, run JSONSchemaBench's MaskBench method on test instances: each
 * instance is json.dumps(data) tokenized without special tokens; for each
 * token the mask is computed and the token committed; an instance is
 * accepted when every token was allowed. Prints per test results and mask
 * times (µs per token: mask + commit, as MaskBench times them). */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "core/timer.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct times {
    double *v;
    size_t n, cap;
} times;

static void times_push(times *t, double x) {
    if (t->n == t->cap) {
        size_t c = t->cap ? t->cap * 2 : 1024;
        double *p = realloc(t->v, c * sizeof *p);
        if (!p)
            return;
        t->v = p;
        t->cap = c;
    }
    t->v[t->n++] = x;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(times *t, double p) {
    if (!t->n)
        return 0;
    qsort(t->v, t->n, sizeof *t->v, cmp_d);
    size_t i = (size_t)(p * (double)(t->n - 1) + 0.5);
    return t->v[i];
}

typedef struct ctx {
    hr_tokenizer *tok;
    hr_grammar_vocab *voc;
    int32_t *eos;
    int n_eos;
    uint32_t *mask;
    int json;
    long generate, seed, max_tokens; /* --generate: samples per schema */
    uint64_t rng;
    uint8_t *closes; /* per token: its bytes hold '"', '}', ']' or ',' */
    times all; /* every mask time of the run */
    times cpu; /* the same, in thread CPU time */
} ctx;

static uint32_t rnd(ctx *c) {
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return (uint32_t)(c->rng >> 11);
}

/* An adversarial "model": tokens drawn uniformly from the mask; as the
 * output grows, draws favour tokens that can close something (a quote, a
 * bracket, a comma) and EOS, so that most samples end. */
static void generate(ctx *c, hr_matcher *m, const char *path, const char *name, long sample) {
    int32_t n = hr_grammar_vocab_n(c->voc);
    int32_t *cand = malloc((size_t)n * sizeof *cand), *close = malloc((size_t)n * sizeof *close);
    char *text = malloc(1 << 20);
    size_t len = 0;
    int ended = 0, stuck = 0;
    long steps = 0;
    hr_matcher_reset(m);
    for (; steps < c->max_tokens && cand && close && text; steps++) {
        hr_matcher_mask(m, c->mask);
        int nc = 0, ncl = 0, eos = -1;
        for (int32_t w = 0; w < (n + 31) / 32; w++)
            for (uint32_t x = c->mask[w]; x; x &= x - 1) {
                int32_t t = w * 32 + __builtin_ctz(x);
                cand[nc++] = t;
                int is_eos = 0;
                for (int k = 0; k < c->n_eos; k++)
                    is_eos |= c->eos[k] == t;
                if (is_eos) {
                    eos = t;
                    continue;
                }
                if (c->closes[t])
                    close[ncl++] = t;
            }
        if (!nc) {
            stuck = 1;
            break;
        }
        int32_t pick;
        uint32_t bias = (uint32_t)(steps > 200 ? 90 : steps * 9 / 20);
        if (eos >= 0 && rnd(c) % 100 < bias + 5)
            pick = eos;
        else if (ncl && rnd(c) % 100 < bias)
            pick = close[rnd(c) % (uint32_t)ncl];
        else
            pick = cand[rnd(c) % (uint32_t)nc];
        if (hr_matcher_accept(m, pick, NULL)) {
            stuck = 1;
            break;
        }
        int is_eos = 0;
        for (int k = 0; k < c->n_eos; k++)
            is_eos |= c->eos[k] == pick;
        if (is_eos) {
            ended = 1;
            break;
        }
        size_t pl = 0;
        if (len + 4096 < (1 << 20) &&
            !hr_tokenizer_token_bytes(c->tok, pick, text + len, 4096, &pl))
            len += pl;
    }
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(name));
    json_object_set_new(o, "file", json_string(path));
    json_object_set_new(o, "sample", json_integer(sample));
    json_object_set_new(o, "tokens", json_integer(steps));
    json_object_set_new(o, "ended", json_boolean(ended));
    if (stuck)
        json_object_set_new(o, "stuck", json_true());
    json_object_set_new(o, "text", text ? json_stringn_nocheck(text, len) : json_null());
    char *js = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    printf("%s\n", js);
    free(js);
    json_decref(o);
    free(cand);
    free(close);
    free(text);
}

/* One MaskBench test: 1 accepted, 0 rejected; *complete: EOS allowed at
 * the end; times pushed to t. */
static int run_test(ctx *c, hr_matcher *m, const json_t *data, times *t, int *ntok,
                    int *complete, hr_error *err) {
    char *text = hr_grammar_json_dumps(data);
    hr_tokens ids = {0};
    int rc = text ? hr_tokenizer_encode(c->tok, text, strlen(text), 0, &ids, err)
                  : hr_err(err, HR_ENOMEM, "out of memory");
    free(text);
    if (rc)
        return rc;
    hr_matcher_reset(m);
    int accepted = 1;
    *ntok = 0;
    for (size_t i = 0; i < ids.n && accepted; i++) {
        int32_t id = ids.ids[i];
        double t0 = hr_now(), c0 = hr_thread_cpu();
        hr_matcher_mask(m, c->mask);
        int ok = (c->mask[id >> 5] >> (id & 31)) & 1;
        if (ok && hr_matcher_accept(m, id, NULL))
            ok = 0; /* cannot happen: the mask said yes */
        double us = (hr_now() - t0) * 1e6;
        times_push(t, us);
        times_push(&c->all, us);
        times_push(&c->cpu, (hr_thread_cpu() - c0) * 1e6);
        (*ntok)++;
        accepted = ok;
    }
    *complete = accepted && hr_matcher_can_end(m);
    hr_tokens_free(&ids);
    return accepted;
}

/* Compile schema; with tests, run them. Prints one result (JSON or text).
 * Returns 0 when it ran (whatever the outcome), <0 on a usage error. */
static int run_one(ctx *c, const char *path, const char *name, const json_t *schema,
                   const json_t *tests) {
    hr_error err = {0};
    hr_grammar *g = NULL;
    hr_matcher *m = NULL;
    double t0 = hr_now();
    int rc = hr_grammar_from_json_schema(&g, schema, &err);
    double compile_us = (hr_now() - t0) * 1e6, warm_us = 0;
    json_t *out = json_object();
    json_object_set_new(out, "id", json_string(name));
    if (rc) {
        json_object_set_new(out, "compile_error", json_string(err.msg));
        goto print;
    }
    json_object_set_new(out, "states", json_integer(hr_grammar_n_states(g)));
    json_object_set_new(out, "compile_us", json_real(compile_us));
    if ((rc = hr_matcher_new(&m, g, c->voc, &err))) {
        json_object_set_new(out, "compile_error", json_string(err.msg));
        goto print;
    }
    if (c->generate > 0) {
        for (long i = 0; i < c->generate; i++)
            generate(c, m, path, name, i);
        json_decref(out);
        hr_matcher_free(m);
        hr_grammar_free(g);
        return 0;
    }
    int n_valid = 0, n_invalid = 0, fail = 0;
    json_t *res = json_array();
    times tt = {0};
    for (size_t i = 0; tests && i < json_array_size(tests); i++) {
        const json_t *tc = json_array_get(tests, i);
        int valid = json_is_true(json_object_get(tc, "valid"));
        int ntok = 0, complete = 0;
        times t1 = {0};
        int acc = run_test(c, m, json_object_get(tc, "data"), &t1, &ntok, &complete, &err);
        json_t *r = json_object();
        json_object_set_new(r, "valid", json_boolean(valid));
        if (acc < 0) {
            json_object_set_new(r, "error", json_string(err.msg));
            fail = 1;
        } else {
            json_object_set_new(r, "accepted", json_boolean(acc));
            json_object_set_new(r, "complete", json_boolean(complete));
            json_object_set_new(r, "tokens", json_integer(ntok));
            json_object_set_new(r, "mask_us_p50", json_real(pct(&t1, 0.5)));
            json_object_set_new(r, "mask_us_max", json_real(pct(&t1, 1.0)));
            if (acc == valid) {
                n_valid += valid;
                n_invalid += !valid;
            } else if (!json_object_get(out, "validation_error")) {
                char msg[96];
                snprintf(msg, sizeof msg, "test #%zu: %s", i,
                         valid ? "should accept but didn't" : "should reject but didn't");
                json_object_set_new(out, "validation_error", json_string(msg));
                fail = 1;
            }
        }
        for (size_t k = 0; k < t1.n; k++)
            times_push(&tt, t1.v[k]);
        free(t1.v);
        json_array_append_new(res, r);
    }
    (void)warm_us;
    json_object_set_new(out, "num_valid_tests", json_integer(n_valid));
    json_object_set_new(out, "num_invalid_tests", json_integer(n_invalid));
    json_object_set_new(out, "num_tokens", json_integer((json_int_t)tt.n));
    json_object_set_new(out, "mask_us_p50", json_real(pct(&tt, 0.5)));
    json_object_set_new(out, "mask_us_p99", json_real(pct(&tt, 0.99)));
    json_object_set_new(out, "mask_us_max", json_real(pct(&tt, 1.0)));
    json_object_set_new(out, "passed", json_boolean(!fail));
    if (!c->json || json_array_size(res) <= 50)
        json_object_set_new(out, "tests", res);
    else
        json_decref(res);
    free(tt.v);
print:
    if (c->json) {
        char *s = json_dumps(out, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
    } else {
        json_t *ce = json_object_get(out, "compile_error");
        if (ce) {
            printf("%s: compile error: %s\n", name, json_string_value(ce));
        } else {
            printf("%s: compiled in %.0f µs, %d parser states\n", name, compile_us,
                   (int)json_integer_value(json_object_get(out, "states")));
            json_t *ts = json_object_get(out, "tests"), *r;
            size_t i;
            json_array_foreach(ts, i, r) {
                printf("  test %zu: %s, %s (%d tokens, mask p50 %.1f µs, max %.1f µs)%s\n", i,
                       json_is_true(json_object_get(r, "valid")) ? "valid" : "invalid",
                       json_is_true(json_object_get(r, "accepted")) ? "accepted" : "rejected",
                       (int)json_integer_value(json_object_get(r, "tokens")),
                       json_real_value(json_object_get(r, "mask_us_p50")),
                       json_real_value(json_object_get(r, "mask_us_max")),
                       json_is_true(json_object_get(r, "accepted")) ==
                               json_is_true(json_object_get(r, "valid"))
                           ? "" : "  <-- WRONG");
            }
            if (tests)
                printf("%s: %s; mask µs/token p50 %.1f p99 %.1f max %.1f over %d tokens\n", name,
                       json_is_true(json_object_get(out, "passed")) ? "PASS" : "FAIL",
                       json_real_value(json_object_get(out, "mask_us_p50")),
                       json_real_value(json_object_get(out, "mask_us_p99")),
                       json_real_value(json_object_get(out, "mask_us_max")),
                       (int)json_integer_value(json_object_get(out, "num_tokens")));
        }
    }
    fflush(stdout);
    json_decref(out);
    hr_matcher_free(m);
    hr_grammar_free(g);
    return 0;
}

/* A file: a MaskBench file ({"schema", "tests"}) or a bare schema. */
static int run_file(ctx *c, const char *path, const char *check) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je), *tj = NULL;
    if (!j) {
        if (c->json) {
            json_t *o = json_pack("{s:s,s:s}", "id", path, "load_error", je.text);
            char *s = json_dumps(o, JSON_COMPACT);
            printf("%s\n", s);
            free(s);
            json_decref(o);
            return 0;
        }
        hr_error err;
        hr_err(&err, HR_EINVAL, "%s:%d: %s", path, je.line, je.text);
        return hr_cli_fail(&err);
    }
    const json_t *schema = j, *tests = NULL;
    if (json_is_object(j) && json_object_get(j, "schema") && json_is_array(json_object_get(j, "tests"))) {
        schema = json_object_get(j, "schema");
        tests = json_object_get(j, "tests");
    }
    if (check) {
        tj = json_load_file(check, 0, &je);
        if (!tj) {
            json_decref(j);
            hr_error err;
            hr_err(&err, HR_EINVAL, "%s:%d: %s", check, je.line, je.text);
            return hr_cli_fail(&err);
        }
        tests = json_is_array(tj) ? tj : json_object_get(tj, "tests");
    }
    const char *base = strrchr(path, '/');
    run_one(c, path, base ? base + 1 : path, schema, tests);
    json_decref(j);
    json_decref(tj);
    return 0;
}

int hr_cmd_grammar(int argc, char **argv) {
    const char *model = NULL, *schema = NULL, *check = NULL, *batch = NULL;
    int json = 0;
    long generate_n = 0, seed = 1, max_tokens = 2000;
    hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory or tokenizer directory (tokenizer.json); or ORG/NAME[@REV]"},
        {"schema", HR_OPT_STR, &schema, "JSON Schema file (or a MaskBench file: {schema, tests})"},
        {"check", HR_OPT_STR, &check, "MaskBench file (or array of {data, valid}) to check"},
        {"batch", HR_OPT_STR, &batch, "file listing MaskBench files, one per line: run each"},
        {"json", HR_OPT_FLAG, &json, "print one JSON object per schema"},
        {"generate", HR_OPT_INT, &generate_n,
         "instead of checking: N random constrained samples per schema (JSON lines)"},
        {"seed", HR_OPT_INT, &seed, "RNG seed for --generate (default 1)"},
        {"max-tokens", HR_OPT_INT, &max_tokens, "token cap per sample (default 2000)"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0],
                           "usage: hearth grammar --model PATH (--schema FILE.json [--check TESTS.json] | "
                           "--batch LIST) [--json]",
                           &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!model || (!schema && !batch)) {
        hr_err(&err, HR_EINVAL, "grammar: --model and --schema (or --batch) are required");
        return hr_cli_fail(&err);
    }
    ctx c = {.json = json, .generate = generate_n, .seed = seed, .max_tokens = max_tokens};
    c.rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)seed * 0xBF58476D1CE4E5B9ull;
    if (!c.rng)
        c.rng = 1;
    if (generate_n > 0)
        json = c.json = 1;
    if ((rc = hr_tokenizer_load(&c.tok, model, &err)))
        return hr_cli_fail(&err);
    /* EOS: the configured one plus the usual end-of-turn tokens */
    static const char *const EOS[] = {"<|eot_id|>", "<|end_of_text|>", "<|im_end|>", "<|endoftext|>",
                                      "</s>", "<end_of_turn>", "<eos>"};
    c.eos = malloc(16 * sizeof *c.eos);
    if (hr_tokenizer_eos(c.tok) >= 0)
        c.eos[c.n_eos++] = hr_tokenizer_eos(c.tok);
    for (size_t i = 0; i < sizeof EOS / sizeof EOS[0]; i++) {
        int32_t id = hr_tokenizer_find(c.tok, EOS[i]);
        if (id >= 0)
            c.eos[c.n_eos++] = id;
    }
    int32_t n_vocab = hr_tokenizer_n_vocab(c.tok);
    double t0 = hr_now();
    if ((rc = hr_grammar_vocab_new(&c.voc, c.tok, n_vocab, c.eos, c.n_eos, &err))) {
        hr_tokenizer_free(c.tok);
        free(c.eos);
        return hr_cli_fail(&err);
    }
    if (!json)
        printf("vocabulary: %d tokens indexed in %.0f ms\n", n_vocab, (hr_now() - t0) * 1e3);
    c.mask = calloc(((size_t)n_vocab + 31) / 32, sizeof *c.mask);
    c.closes = calloc((size_t)n_vocab, 1);
    for (int32_t t = 0; t < n_vocab && generate_n > 0; t++) {
        char b[256];
        size_t pl = 0;
        if (!hr_tokenizer_token_bytes(c.tok, t, b, sizeof b, &pl))
            c.closes[t] = memchr(b, '"', pl) || memchr(b, '}', pl) || memchr(b, ']', pl) ||
                          memchr(b, ',', pl);
    }
    if (schema) {
        rc = run_file(&c, schema, check);
    } else {
        FILE *f = fopen(batch, "r");
        char line[4096];
        if (!f) {
            hr_err(&err, HR_EIO, "%s: cannot open", batch);
            rc = hr_cli_fail(&err);
        }
        while (f && fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = 0;
            if (line[0])
                run_file(&c, line, NULL);
        }
        if (f)
            fclose(f);
    }
    if (!json && c.all.n > 1)
        printf("all: mask µs/token p50 %.1f p99 %.1f max %.1f over %zu tokens\n", pct(&c.all, 0.5),
               pct(&c.all, 0.99), pct(&c.all, 1.0), c.all.n);
    if (json && batch && !generate_n)
        printf("{\"summary\":{\"tokens\":%zu,\"mask_us_p50\":%.2f,\"mask_us_p90\":%.2f,"
               "\"mask_us_p99\":%.2f,\"mask_us_max\":%.2f,\"mask_cpu_us_p50\":%.2f,"
               "\"mask_cpu_us_p99\":%.2f,\"mask_cpu_us_max\":%.2f}}\n",
               c.all.n, pct(&c.all, 0.5), pct(&c.all, 0.9), pct(&c.all, 0.99), pct(&c.all, 1.0),
               pct(&c.cpu, 0.5), pct(&c.cpu, 0.99), pct(&c.cpu, 1.0));
    free(c.all.v);
    free(c.cpu.v);
    free(c.mask);
    free(c.closes);
    free(c.eos);
    hr_grammar_vocab_free(c.voc);
    hr_tokenizer_free(c.tok);
    return rc;
}
