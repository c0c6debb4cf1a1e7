/* JSON Schema entry points: a schema, any JSON object, or alternatives of a
 * schema between literal markers (tool calls), compiled through
 * json_schema.c's translation into the grammar IR. */
#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/internal.h"
#include "grammar/jsonc.h"

#include <stdlib.h>

int hr_grammar_from_json_schema(hr_grammar **out, const json_t *schema, hr_error *err) {
    if (!schema) {
        *out = NULL;
        return hr_err(err, HR_EINVAL, "json schema: no schema");
    }
    const char *none = NULL; /* the one-alternative case, nothing around it */
    return hr_grammar_from_wrapped_schemas(out, &none, &schema, &none, 1, err);
}

int hr_grammar_json_object(hr_grammar **out, hr_error *err) {
    json_t *s = json_pack("{s:s}", "type", "object");
    if (!s) {
        *out = NULL;
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    int rc = hr_grammar_from_json_schema(out, s, err);
    json_decref(s);
    return rc;
}

int hr_grammar_from_wrapped_schemas(hr_grammar **out, const char *const *prefix,
                                    const json_t *const *schema, const char *const *suffix,
                                    int n, hr_error *err) {
    *out = NULL;
    if (n <= 0)
        return hr_err(err, HR_EINVAL, "json schema: no alternatives");
    if (err)
        err->pos = -1;
    hr__gir ir;
    hr__gir_init(&ir);
    hr__js c = {.ir = &ir, .keep = json_array(), .err = err, .r_value = -1};
    int rc = 0;
    uint32_t *alts = malloc((size_t)n * sizeof *alts);
    if (!c.keep || !alts) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    int32_t root = hr__gir_rule(&ir, "root", 4);
    for (int i = 0; i < n && !c.rc; i++) {
        c.root = (json_t *)schema[i]; /* $ref resolves inside each alternative */
        uint32_t body = hr__js_schema(&c, schema[i]);
        if (prefix[i] && prefix[i][0])
            body = hr__gir_seq2(&ir, hr__gir_str(&ir, prefix[i]), body);
        if (suffix[i] && suffix[i][0])
            body = hr__gir_seq2(&ir, body, hr__gir_str(&ir, suffix[i]));
        alts[i] = body;
    }
    if ((rc = c.rc))
        goto done;
    if (ir.oom) {
        rc = hr_err(err, HR_ENOMEM, "json schema: out of memory");
        goto done;
    }
    hr__gir_define(&ir, root, n == 1 ? alts[0] : hr__gir_alt(&ir, alts, (size_t)n));
    if ((rc = hr__grammar_compile(out, &ir, root, err)) && err && rc != HR_ENOMEM)
        hr_err_wrap(err, "json schema");
done:
    free(alts);
    json_decref(c.keep);
    free(c.memo);
    hr__gir_deinit(&ir);
    return rc;
}
