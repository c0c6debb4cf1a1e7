/* JSON Schema "patternProperties": the keys an object may add beyond its
 * declared properties, and the schema their values follow.
 *
 * Supported: one pattern, or several that give the same schema (their
 * regexes are joined by "|": a key matching two of them follows that one
 * schema once, as the specification asks). Refused: patterns with different
 * schemas (a key matching two must satisfy both: an intersection the IR
 * cannot express), and a declared or required property name that matches a
 * pattern (its value would have to satisfy both schemas, and the pattern
 * keys would have to exclude it). */
#include "grammar/jsonc.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* 1 if the JSON text of name is a key the string-body regex re accepts,
 * 0 if not, <0 on error (c->rc set). */
static int key_matches(hr__js *c, const char *re, const char *name) {
    hr__gir ir;
    hr__gir_init(&ir);
    hr_grammar *g = NULL;
    hr_matcher *m = NULL;
    char *text = NULL;
    json_t *js = json_string(name);
    hr_error e = {0};
    uint32_t body;
    int rc = hr__regex_ir(&ir, re, strlen(re), 1, &body, &e);
    if (!rc) {
        int32_t root = hr__gir_rule(&ir, "root", 4);
        if (root < 0)
            rc = HR_ENOMEM;
        else {
            hr__gir_define(&ir, root, hr__gir_seq3(&ir, hr__gir_str(&ir, "\""), body,
                                                   hr__gir_str(&ir, "\"")));
            rc = hr__grammar_compile(&g, &ir, root, &e);
        }
    }
    if (!rc && !(text = js ? hr_grammar_json_dumps(js) : NULL))
        rc = HR_ENOMEM;
    if (!rc)
        rc = hr_matcher_new(&m, g, NULL, &e);
    int r = 0;
    if (!rc)
        r = !hr_matcher_accept_bytes(m, text, strlen(text), NULL) && hr_matcher_can_end(m);
    if (rc)
        r = hr__js_fail(c, rc, "patternProperties: %s", e.msg);
    hr_matcher_free(m);
    free(text);
    json_decref(js);
    hr_grammar_free(g);
    hr__gir_deinit(&ir);
    return r;
}

uint32_t hr__js_pattern_keys(hr__js *c, const json_t *pp, const char *const *names,
                             size_t n, const json_t **schema) {
    const char *k;
    json_t *v;
    size_t len = 0;
    *schema = NULL;
    json_object_foreach((json_t *)pp, k, v) {
        if (*schema && !json_equal((json_t *)*schema, v))
            return hr__js_fail(c, HR_EUNSUPPORTED, "'patternProperties' with patterns of "
                               "different schemas is not supported"), 0;
        *schema = v;
        len += strlen(k) + 1;
    }
    char *re = malloc(len + 1);
    if (!re) {
        c->ir->oom = 1;
        return 0;
    }
    size_t o = 0;
    json_object_foreach((json_t *)pp, k, v) {
        if (o)
            re[o++] = '|';
        memcpy(re + o, k, strlen(k));
        o += strlen(k);
    }
    re[o] = 0;
    uint32_t body = 0;
    for (size_t i = 0; i < n && !c->rc; i++) {
        int m = key_matches(c, re, names[i]);
        if (m > 0)
            hr__js_fail(c, HR_EUNSUPPORTED, "property '%s' matching a 'patternProperties' "
                        "pattern is not supported", names[i]);
    }
    if (!c->rc) {
        hr_error e = {0};
        int rc = hr__regex_ir(c->ir, re, o, 1, &body, &e);
        if (rc)
            hr__js_fail(c, rc, "patternProperties: %s", e.msg);
    }
    free(re);
    return c->rc ? 0 : body;
}
