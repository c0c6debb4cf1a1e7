/* Chat template parity: every template in tests/fixtures/chat/templates/
 * rendered over every case of conversations.json must equal jinja2's output
 * byte for byte (tests/fixtures/chat/expected/, made by
 * tools/chatref/gen.py), and fail where jinja2 raised. Prints the figure
 * "templates byte-identical: X/N". */
#include "chat/chat.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Templates whose renders differ from jinja2, each with the reason
 * (docs/chat-templates.md repeats the list). Keep empty when possible. */
static const char *const known_divergent[] = {NULL};

static char root[4096];

static json_t *load(const char *rel) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        fail_msg("%s: %s", path, je.text);
    return j;
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void show_diff(const char *name, size_t k, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i])
        i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr, "  %s case %zu differs at byte %zu:\n    want: %.140s\n    got:  %.140s\n",
            name, k, i, want + from, got + from);
}

/* Returns 1 when every case matches. */
static int check_template(const char *name, const char *src, json_t *conv, int verbose) {
    char rel[600];
    snprintf(rel, sizeof rel, "tests/fixtures/chat/expected/%.*s.json",
             (int)(strlen(name) - 6), name);
    json_t *exp = load(rel), *cases = json_object_get(conv, "cases");
    json_t *convs = json_object_get(conv, "conversations");
    assert_int_equal(json_array_size(exp), json_array_size(cases));
    hr_chat_opts o = {.bos_token = json_string_value(json_object_get(conv, "bos_token")),
                      .eos_token = json_string_value(json_object_get(conv, "eos_token")),
                      .has_now = 1,
                      .now = json_integer_value(json_object_get(conv, "now"))};
    hr_chat_template *t = NULL;
    hr_error err = {0};
    int compile_rc = hr_chat_template_new(&t, src, strlen(src), &err), ok = 1;
    size_t k;
    json_t *cs;
    json_array_foreach(cases, k, cs) {
        json_t *c = json_object_get(convs, json_string_value(json_object_get(cs, "conversation")));
        json_t *want = json_array_get(exp, k);
        const char *want_out = json_string_value(json_object_get(want, "output"));
        o.add_generation_prompt = json_is_true(json_object_get(cs, "add_generation_prompt"));
        char *out = NULL;
        int rc = compile_rc ? compile_rc
                            : hr_chat_template_render(t, json_object_get(c, "messages"),
                                                      json_object_get(c, "tools"),
                                                      json_object_get(cs, "kwargs"), &o, &out,
                                                      &err);
        if (!want_out && !rc) {
            if (verbose)
                fprintf(stderr, "  %s case %zu: jinja2 raised (%s), hearth rendered\n", name, k,
                        json_string_value(json_object_get(want, "error")));
            ok = 0;
        } else if (want_out && rc) {
            if (verbose)
                fprintf(stderr, "  %s case %zu: hearth failed: %s\n", name, k, err.msg);
            ok = 0;
        } else if (want_out && strcmp(want_out, out)) {
            if (verbose)
                show_diff(name, k, want_out, out);
            ok = 0;
        }
        free(out);
        if (!ok && !verbose)
            break;
    }
    hr_chat_template_free(t);
    json_decref(exp);
    return ok;
}

static void test_parity(void **state) {
    (void)state;
    json_t *conv = load("tests/fixtures/chat/conversations.json");
    char dir[8192];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/chat/templates", root);
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *names[512];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        size_t l = strlen(e->d_name);
        if (l > 6 && !strcmp(e->d_name + l - 6, ".jinja"))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    size_t same = 0, unexpected = 0;
    for (size_t i = 0; i < n; i++) {
        char path[12288];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        char *src = read_text(path);
        assert_non_null(src);
        int known = 0;
        for (const char *const *p = known_divergent; *p; p++)
            known |= !strcmp(*p, names[i]);
        int ok = check_template(names[i], src, conv, !known);
        same += ok;
        if (!ok && !known) {
            fprintf(stderr, "MISMATCH %s\n", names[i]);
            unexpected++;
        }
        if (ok && known)
            fprintf(stderr, "note: %s now matches; drop it from known_divergent\n", names[i]);
        free(src);
        free(names[i]);
    }
    printf("templates byte-identical on all %zu cases: %zu/%zu\n",
           json_array_size(json_object_get(conv, "cases")), same, n);
    json_decref(conv);
    assert_true(n >= 68);
    assert_int_equal(unexpected, 0);
}

int main(void) {
    const char *r = getenv("HEARTH_ROOT");
    snprintf(root, sizeof root, "%s", r ? r : ".");
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_parity)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
