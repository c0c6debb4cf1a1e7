/* JSON Schema -> IR.
 *
 * A schema compiles to the set of JSON texts (in the whitespace policy of
 * jsonc.h) that validate against it. Objects list their properties in the
 * order of "properties" (required ones must appear), then additional
 * properties. $ref targets become rules (so recursion works); allOf is
 * merged into one schema; anyOf/oneOf become alternatives (oneOf only when
 * no value can match two of its branches). Validation keywords
 * that are not supported are errors naming the keyword and its location;
 * keywords that do not constrain values (title, description, ...) and
 * unknown keywords are ignored, as validators do. */
#include "grammar/jsonc.h"
#include "core/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

int hr__js_fail(hr__js *c, int code, const char *fmt, ...) {
    if (c->rc)
        return c->rc;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->rc = hr_err(c->err, code, "json schema: %s (at #%s)", msg, c->path);
    return c->rc;
}

static size_t path_push(hr__js *c, const char *a, const char *b) {
    size_t save = c->plen;
    int n = snprintf(c->path + c->plen, sizeof c->path - c->plen, "/%s%s%s", a,
                     b ? "/" : "", b ? b : "");
    if (n > 0)
        c->plen = c->plen + (size_t)n < sizeof c->path ? c->plen + (size_t)n : sizeof c->path - 1;
    return save;
}

static void path_pop(hr__js *c, size_t save) {
    c->plen = save;
    c->path[save] = 0;
}

static uint32_t S(hr__js *c, const char *s) { return hr__gir_str(c->ir, s); }

/* ---- keywords -------------------------------------------------------------------- */

static const char *const VALIDATION[] = {
    "type", "enum", "const", "properties", "required", "additionalProperties",
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "nullable", "multipleOf",
    "uniqueItems", "not", "if", "patternProperties", "propertyNames", "minProperties",
    "maxProperties", "contains", "minContains", "maxContains", "dependencies",
    "dependentRequired", "dependentSchemas", "unevaluatedProperties",
    "unevaluatedItems", "$dynamicRef", "$recursiveRef",
};

static int is_validation(const char *k) {
    for (size_t i = 0; i < sizeof VALIDATION / sizeof VALIDATION[0]; i++)
        if (!strcmp(k, VALIDATION[i]))
            return 1;
    return 0;
}

/* Has s validation keywords other than those in skip (NULL-terminated)? */
static int constrains(const json_t *s, const char *const *skip) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        int sk = 0;
        for (const char *const *p = skip; p && *p; p++)
            sk |= !strcmp(*p, k);
        if (!sk && is_validation(k))
            return 1;
    }
    return 0;
}

static json_t *keep(hr__js *c, json_t *j) {
    if (j && json_array_append_new(c->keep, j)) {
        c->ir->oom = 1;
        return NULL;
    }
    return j;
}

/* ---- $ref --------------------------------------------------------------------------- */

static const json_t *resolve(hr__js *c, const char *ref) {
    const char *frag = NULL;
    if (ref[0] == '#') {
        frag = ref + 1;
    } else {
        json_t *id = json_object_get(c->root, "$id");
        if (!id)
            id = json_object_get(c->root, "id");
        const char *base = id && json_is_string(id) ? json_string_value(id) : NULL;
        size_t bl = base ? strcspn(base, "#") : 0;
        if (base && !strncmp(ref, base, bl) && (ref[bl] == '#' || ref[bl] == 0))
            frag = ref[bl] ? ref + bl + 1 : "";
    }
    if (!frag)
        return hr__js_fail(c, HR_EUNSUPPORTED, "$ref '%s' points outside the schema", ref), NULL;
    if (frag[0] && frag[0] != '/')
        return hr__js_fail(c, HR_EUNSUPPORTED, "$ref '%s': anchors are not supported", ref), NULL;
    const json_t *at = c->root;
    const char *p = frag;
    while (*p == '/') {
        p++;
        char seg[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            if (p[0] == '~' && p[1] == '0') {
                seg[n++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                seg[n++] = '/';
                p += 2;
            } else if (p[0] == '%' && p[1] && p[2] && strchr("0123456789abcdefABCDEF", p[1]) &&
                       strchr("0123456789abcdefABCDEF", p[2])) {
                char h[3] = {p[1], p[2], 0};
                seg[n++] = (char)strtol(h, NULL, 16);
                p += 3;
            } else {
                seg[n++] = *p++;
            }
        }
        if (*p && *p != '/')
            return hr__js_fail(c, HR_EUNSUPPORTED, "$ref '%s': a name longer than 255 bytes",
                               ref), NULL;
        seg[n] = 0;
        if (json_is_object(at)) {
            at = json_object_get(at, seg);
        } else if (json_is_array(at)) {
            char *end;
            long i = strtol(seg, &end, 10);
            at = *end || i < 0 ? NULL : json_array_get(at, (size_t)i);
        } else {
            at = NULL;
        }
        if (!at)
            return hr__js_fail(c, HR_EINVAL, "$ref '%s' does not resolve", ref), NULL;
    }
    return at;
}

/* ---- allOf: merging two schemas ------------------------------------------------------ */

static json_t *merge(hr__js *c, const json_t *a, const json_t *b, int depth);

int hr__js_type_bits(const json_t *t) {
    static const char *const N[] = {"null", "boolean", "object", "array", "string", "number", "integer"};
    int bits = 0;
    if (!t)
        return 0x7F;
    for (size_t i = 0; i < (json_is_array(t) ? json_array_size(t) : 1); i++) {
        const json_t *x = json_is_array(t) ? json_array_get(t, i) : t;
        for (int k = 0; k < 7; k++)
            if (json_is_string(x) && !strcmp(json_string_value(x), N[k]))
                bits |= 1 << k;
    }
    return bits;
}

static json_t *types_json(int bits) {
    static const char *const N[] = {"null", "boolean", "object", "array", "string", "number", "integer"};
    json_t *a = json_array();
    for (int k = 0; k < 7; k++)
        if (bits & (1 << k))
            json_array_append_new(a, json_string(N[k]));
    return a;
}

static json_t *all_of2(hr__js *c, json_t *a, json_t *b) {
    json_t *o = json_object();
    json_t *arr = json_array();
    json_array_append(arr, a);
    json_array_append(arr, b);
    json_object_set_new(o, "allOf", arr);
    return keep(c, o) ? o : NULL;
}

static json_t *merge(hr__js *c, const json_t *a0, const json_t *b0, int depth) {
    if (depth > MAX_DEPTH)
        return hr__js_fail(c, HR_ERANGE, "schemas nested too deeply"), NULL;
    const json_t *a = hr__js_deref(c, a0, depth), *b = hr__js_deref(c, b0, depth);
    if (!a || !b)
        return NULL;
    if (json_is_boolean(a) || json_is_boolean(b)) {
        if (json_is_false(a) || json_is_false(b))
            return keep(c, json_false());
        return keep(c, json_deep_copy(json_is_true(a) ? b : a));
    }
    json_t *r = keep(c, json_copy((json_t *)a));
    if (!r)
        return NULL;
    const char *k;
    json_t *vb;
    json_object_foreach((json_t *)b, k, vb) {
        json_t *va = json_object_get(r, k);
        if (!va) {
            json_object_set(r, k, vb);
            continue;
        }
        if (!strcmp(k, "type")) {
            int x = hr__js_type_bits(va), y = hr__js_type_bits(vb);
            int both = x & y;
            if ((x & 0x20) && (y & 0x40)) /* number ∩ integer */
                both |= 0x40;
            if ((y & 0x20) && (x & 0x40))
                both |= 0x40;
            json_object_set_new(r, k, types_json(both));
        } else if (!strcmp(k, "properties") && json_is_object(va) && json_is_object(vb)) {
            json_t *p = json_copy(va);
            const char *pk;
            json_t *pv;
            json_object_foreach(vb, pk, pv) {
                json_t *pa = json_object_get(p, pk);
                json_object_set(p, pk, pa ? all_of2(c, pa, pv) : pv);
            }
            json_object_set_new(r, k, p);
        } else if (!strcmp(k, "required") && json_is_array(va) && json_is_array(vb)) {
            json_t *u = json_copy(va);
            for (size_t i = 0; i < json_array_size(vb); i++) {
                int dup = 0;
                for (size_t j = 0; j < json_array_size(u); j++)
                    dup |= json_equal(json_array_get(u, j), json_array_get(vb, i));
                if (!dup)
                    json_array_append(u, json_array_get(vb, i));
            }
            json_object_set_new(r, k, u);
        } else if (!strcmp(k, "additionalProperties") || !strcmp(k, "items")) {
            if (json_is_false(va) || json_is_false(vb))
                json_object_set_new(r, k, json_false());
            else if (json_is_true(va))
                json_object_set(r, k, vb);
            else if (!json_is_true(vb))
                json_object_set(r, k, all_of2(c, va, vb));
        } else if (!strcmp(k, "minimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems") ||
                   !strcmp(k, "minProperties")) {
            if (json_is_number(va) && json_is_number(vb) && json_number_value(vb) > json_number_value(va))
                json_object_set(r, k, vb);
        } else if (!strcmp(k, "maximum") || !strcmp(k, "maxLength") || !strcmp(k, "maxItems") ||
                   !strcmp(k, "maxProperties")) {
            if (json_is_number(va) && json_is_number(vb) && json_number_value(vb) < json_number_value(va))
                json_object_set(r, k, vb);
        } else if (!strcmp(k, "enum") && json_is_array(va) && json_is_array(vb)) {
            json_t *u = json_array();
            for (size_t i = 0; i < json_array_size(va); i++)
                for (size_t j = 0; j < json_array_size(vb); j++)
                    if (json_equal(json_array_get(va, i), json_array_get(vb, j))) {
                        json_array_append(u, json_array_get(va, i));
                        break;
                    }
            json_object_set_new(r, k, u);
        } else if (!strcmp(k, "allOf") && json_is_array(va) && json_is_array(vb)) {
            json_t *u = json_copy(va);
            json_array_extend(u, vb);
            json_object_set_new(r, k, u);
        } else if (!json_equal(va, vb)) {
            if (!strcmp(k, "const")) {
                json_object_del(r, "const");
                json_object_set_new(r, "enum", json_array());
            } else if (is_validation(k)) {
                return hr__js_fail(c, HR_EUNSUPPORTED, "allOf with two different '%s' is "
                                   "not supported", k), NULL;
            }
        }
    }
    /* additionalProperties false on one side: the other side's extra
       properties are not allowed */
    const json_t *sides[2] = {a, b};
    for (int s = 0; s < 2; s++) {
        if (!json_is_false(json_object_get(sides[s], "additionalProperties")))
            continue;
        json_t *own = json_object_get(sides[s], "properties"), *p = json_object_get(r, "properties");
        if (!json_is_object(p))
            continue;
        json_t *f = json_object();
        const char *pk;
        json_t *pv;
        json_object_foreach(p, pk, pv) if (own && json_object_get(own, pk))
            json_object_set(f, pk, pv);
        json_object_set_new(r, "properties", f);
    }
    return r;
}

/* s without $ref/allOf at its top: the referenced schema merged with the
 * siblings, allOf folded in. */
const json_t *hr__js_deref(hr__js *c, const json_t *s, int depth) {
    if (!json_is_object(s) || depth > MAX_DEPTH)
        return depth > MAX_DEPTH ? (hr__js_fail(c, HR_ERANGE, "$ref chain too deep"), NULL) : s;
    json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    if (ref) {
        if (!json_is_string(ref))
            return hr__js_fail(c, HR_EINVAL, "$ref must be a string"), NULL;
        const json_t *t = resolve(c, json_string_value(ref));
        if (!t)
            return NULL;
        json_t *rest = keep(c, json_copy((json_t *)s));
        if (!rest)
            return NULL;
        json_object_del(rest, "$ref");
        return merge(c, t, rest, depth + 1);
    }
    if (all) {
        if (!json_is_array(all))
            return hr__js_fail(c, HR_EINVAL, "allOf must be an array"), NULL;
        json_t *acc = keep(c, json_copy((json_t *)s));
        if (!acc)
            return NULL;
        json_object_del(acc, "allOf");
        const json_t *m = acc;
        for (size_t i = 0; i < json_array_size(all) && m; i++)
            m = merge(c, m, json_array_get(all, i), depth + 1);
        return m;
    }
    return s;
}

/* ---- schemas --------------------------------------------------------------------------- */

static uint32_t sch(hr__js *c, const json_t *s);

static uint32_t sub(hr__js *c, const json_t *s, const char *a, const char *b) {
    size_t save = path_push(c, a, b);
    uint32_t r = sch(c, s);
    path_pop(c, save);
    return r;
}

/* A node wrapped in a fresh rule (so repeating it repeats a call). */
static uint32_t as_rule(hr__js *c, uint32_t body, const char *name) {
    int32_t r = hr__gir_new_rule(c->ir, name);
    if (r < 0)
        return 0;
    hr__gir_define(c->ir, r, body);
    return hr__gir_ref(c->ir, (uint32_t)r);
}

static uint32_t object(hr__js *c, const json_t *s) {
    hr__gir *ir = c->ir;
    static const char *const UNSUP[] = {"propertyNames", "unevaluatedProperties",
                                        "dependencies", "dependentRequired", "dependentSchemas"};
    for (size_t i = 0; i < sizeof UNSUP / sizeof UNSUP[0]; i++)
        if (json_object_get(s, UNSUP[i]))
            return hr__js_fail(c, HR_EUNSUPPORTED, "keyword '%s' is not supported", UNSUP[i]), 0;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    json_t *pp = json_object_get(s, "patternProperties");
    if (props && !json_is_object(props))
        return hr__js_fail(c, HR_EINVAL, "'properties' must be an object"), 0;
    if (pp && !json_is_object(pp))
        return hr__js_fail(c, HR_EINVAL, "'patternProperties' must be an object"), 0;
    if (pp && !json_object_size(pp))
        pp = NULL;
    if (req && !json_is_array(req))
        return hr__js_fail(c, HR_EINVAL, "'required' must be an array"), 0;
    size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    const char **names = calloc(np + nr + 1, sizeof *names);
    size_t *lens = calloc(np + nr + 1, sizeof *lens);
    const json_t **schemas = calloc(np + nr + 1, sizeof *schemas);
    uint8_t *isreq = calloc(np + nr + 1, 1);
    uint32_t *fr = malloc((np + nr + 2) * 2 * sizeof *fr);
    uint32_t result = 0;
    if (!names || !lens || !schemas || !isreq || !fr) {
        ir->oom = 1;
        goto done;
    }
    size_t n = 0;
    const char *k;
    json_t *v;
    if (props)
        json_object_foreach(props, k, v) {
            names[n] = k;
            lens[n] = strlen(k);
            schemas[n++] = v;
        }
    for (size_t i = 0; i < nr; i++) {
        json_t *x = json_array_get(req, i);
        if (!json_is_string(x)) {
            hr__js_fail(c, HR_EINVAL, "'required' must list strings");
            goto done;
        }
        size_t j = 0;
        while (j < n && strcmp(names[j], json_string_value(x)))
            j++;
        if (j == n) { /* required but not listed: an additional property */
            names[n] = json_string_value(x);
            lens[n] = strlen(names[n]);
            schemas[n++] = ap ? ap : NULL;
        }
        isreq[j] = 1;
    }
    size_t min_p = 0, max_p = SIZE_MAX;
    json_t *mp = json_object_get(s, "minProperties"), *xp = json_object_get(s, "maxProperties");
    if (mp && json_is_number(mp))
        min_p = (size_t)json_number_value(mp);
    if (xp && json_is_number(xp))
        max_p = (size_t)json_number_value(xp);
    size_t n_req = 0;
    for (size_t i = 0; i < n; i++)
        n_req += isreq[i];
    if (min_p > n_req) {
        hr__js_fail(c, HR_EUNSUPPORTED, "keyword 'minProperties' (above the number of required "
                    "properties) is not supported");
        goto done;
    }
    /* keys beyond the declared ones: matching a pattern, else additional
       ones; with patterns, only the pattern keys (a subset of the language:
       "not matching the patterns" is a complement the IR cannot express) */
    const json_t *pschema = NULL;
    uint32_t pkey = pp ? hr__js_pattern_keys(c, pp, names, n, &pschema) : 0;
    if (c->rc)
        goto done;
    int has_add = pp || !json_is_false(ap);
    if (max_p < n || (max_p != SIZE_MAX && has_add)) {
        if (max_p < n_req) {
            result = hr__gir_none(ir);
            goto done;
        }
        hr__js_fail(c, HR_EUNSUPPORTED, "keyword 'maxProperties' is not supported");
        goto done;
    }
    /* the additional-property pair, if allowed */
    uint32_t kva = 0;
    if (pp) {
        uint32_t val = sub(c, pschema, "patternProperties", NULL);
        kva = hr__gir_seq(ir, (uint32_t[]){S(c, "\""), pkey, S(c, "\""), hr__js_keysep(c), val}, 5);
        kva = as_rule(c, kva, "patprop");
    } else if (has_add) {
        uint32_t val = ap && !json_is_true(ap) ? sub(c, ap, "additionalProperties", NULL) : hr__js_value(c);
        kva = hr__gir_seq(ir, (uint32_t[]){S(c, "\""), hr__js_key_not_in(c, names, lens, n), S(c, "\""),
                                           hr__js_keysep(c), val}, 5);
        kva = as_rule(c, kva, "addprop");
    }
    /* R[i]: properties i.. after something was written; F[i]: before */
    uint32_t R, F;
    if (has_add) {
        R = hr__gir_rep(ir, hr__gir_seq2(ir, hr__js_itemsep(c), kva), 0, -1);
        F = hr__gir_opt(ir, hr__gir_seq2(ir, kva, R));
    } else {
        R = F = hr__gir_empty(ir);
    }
    R = as_rule(c, R, "obj-rest");
    F = as_rule(c, F, "obj-first");
    for (size_t i = n; i-- > 0 && !c->rc;) {
        uint32_t val;
        if (!schemas[i]) {
            val = hr__js_value(c);
        } else {
            val = sub(c, schemas[i], "properties", names[i]);
        }
        if (!has_add && i >= np && !schemas[i]) {
            result = hr__gir_none(ir);
            goto done;
        }
        uint32_t kv = hr__gir_seq(ir, (uint32_t[]){S(c, "\""), hr__js_key(c, names[i], lens[i]), S(c, "\""),
                                                  hr__js_keysep(c), val}, 5);
        kv = as_rule(c, kv, "prop");
        uint32_t r2 = hr__gir_seq3(ir, hr__js_itemsep(c), kv, R);
        uint32_t f2 = hr__gir_seq2(ir, kv, R);
        if (!isreq[i]) {
            r2 = hr__gir_alt2(ir, r2, R);
            f2 = hr__gir_alt2(ir, f2, F);
        }
        R = as_rule(c, r2, "obj-rest");
        F = as_rule(c, f2, "obj-first");
    }
    if (!c->rc)
        result = hr__gir_seq3(ir, S(c, "{"), F, S(c, "}"));
done:
    free(names);
    free(lens);
    free(schemas);
    free(isreq);
    free(fr);
    return result;
}

static uint32_t array(hr__js *c, const json_t *s) {
    hr__gir *ir = c->ir;
    json_t *u = json_object_get(s, "uniqueItems");
    if (u && !json_is_false(u))
        return hr__js_fail(c, HR_EUNSUPPORTED, "keyword 'uniqueItems' is not supported"), 0;
    static const char *const UNSUP[] = {"contains", "minContains", "maxContains", "unevaluatedItems"};
    for (size_t i = 0; i < sizeof UNSUP / sizeof UNSUP[0]; i++)
        if (json_object_get(s, UNSUP[i]))
            return hr__js_fail(c, HR_EUNSUPPORTED, "keyword '%s' is not supported", UNSUP[i]), 0;
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *rest = items;
    const char *rest_kw = "items";
    if (json_is_array(items)) { /* draft 4-2019: a tuple */
        prefix = items;
        rest = json_object_get(s, "additionalItems");
        rest_kw = "additionalItems";
    }
    if (prefix && !json_is_array(prefix))
        return hr__js_fail(c, HR_EINVAL, "'prefixItems' must be an array"), 0;
    json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
    long long m = mn && json_is_number(mn) ? (long long)ceil(json_number_value(mn)) : 0;
    long long M = mx && json_is_number(mx) ? (long long)floor(json_number_value(mx)) : -1;
    long long k = prefix ? (long long)json_array_size(prefix) : 0;
    if (m > HR__G_MAX_REP || M > HR__G_MAX_REP)
        return hr__js_fail(c, HR_EUNSUPPORTED, "array length bounds above %d are not supported",
                           HR__G_MAX_REP), 0;
    if (json_is_false(rest) && (M < 0 || M > k))
        M = k;
    if (M >= 0 && m > M)
        return hr__gir_none(ir);
    uint32_t r = 0;
    if (M < 0 || M > k)
        r = as_rule(c, rest && !json_is_true(rest) ? sub(c, rest, rest_kw, NULL) : hr__js_value(c), "item");
    /* tail after k items: (SEP r){max(0,m-k), M-k} */
    uint32_t tail;
    if (M >= 0 && M <= k)
        tail = hr__gir_empty(ir);
    else
        tail = hr__gir_rep(ir, hr__gir_seq2(ir, hr__js_itemsep(c), r), (int32_t)(m > k ? m - k : 0),
                           (int32_t)(M < 0 ? -1 : M - k));
    uint32_t body;
    if (k == 0) {
        if (M == 0)
            body = hr__gir_empty(ir);
        else {
            uint32_t rep = hr__gir_rep(ir, hr__gir_seq2(ir, hr__js_itemsep(c), r), (int32_t)(m > 1 ? m - 1 : 0),
                                       (int32_t)(M < 0 ? -1 : M - 1));
            body = hr__gir_seq2(ir, r, rep);
            if (m == 0)
                body = hr__gir_opt(ir, body);
        }
    } else {
        /* from the last prefix item back to the first */
        uint32_t after = tail;
        long long upto = M >= 0 && M < k ? M : k;
        for (long long i = upto; i >= 1 && !c->rc; i--) {
            char idx[24];
            snprintf(idx, sizeof idx, "%lld", i - 1);
            uint32_t x = as_rule(c, sub(c, json_array_get(prefix, (size_t)(i - 1)),
                                        json_is_array(items) ? "items" : "prefixItems", idx), "item");
            uint32_t step = i == 1 ? hr__gir_seq2(ir, x, after)
                                   : hr__gir_seq3(ir, hr__js_itemsep(c), x, after);
            if (i > m)
                step = hr__gir_opt(ir, step);
            after = step;
        }
        body = after;
    }
    return hr__gir_seq3(ir, S(c, "["), body, S(c, "]"));
}

static uint32_t typed(hr__js *c, const json_t *s, int bits) {
    hr__gir *ir = c->ir;
    hr__u32v alts = {0};
    if (bits & 0x20)
        bits &= ~0x40; /* number covers integer */
    if (bits & 0x01)
        hr__gir_push(c->ir, &alts, S(c, "null"));
    if (bits & 0x02)
        hr__gir_push(c->ir, &alts, hr__gir_alt2(ir, S(c, "true"), S(c, "false")));
    if (bits & 0x04)
        hr__gir_push(c->ir, &alts, as_rule(c, object(c, s), "object"));
    if (bits & 0x08)
        hr__gir_push(c->ir, &alts, as_rule(c, array(c, s), "array"));
    if (bits & 0x10)
        hr__gir_push(c->ir, &alts, hr__js_string(c, s));
    if (bits & 0x20)
        hr__gir_push(c->ir, &alts, hr__js_number(c, s, 0));
    if (bits & 0x40)
        hr__gir_push(c->ir, &alts, hr__js_number(c, s, 1));
    uint32_t r = hr__gir_alt(ir, alts.v, alts.n);
    hr__u32v_free(&alts);
    return r;
}

static int32_t memo_get(hr__js *c, const json_t *s) {
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].s == s)
            return c->memo[i].rule;
    return -1;
}

/* s with its "not" folded into the other keywords, for the forms that
 * fold: not false (nothing), not true or {} (no value), not not X (X), not
 * {type: T} (the types but T). NULL with c->rc set otherwise. */
static const json_t *negate(hr__js *c, const json_t *s) {
    json_t *rest = keep(c, json_copy((json_t *)s));
    if (!rest)
        return NULL;
    json_object_del(rest, "not");
    const json_t *x = hr__js_deref(c, json_object_get(s, "not"), 0);
    if (!x)
        return NULL;
    if (json_is_false(x))
        return rest;
    if (json_is_true(x) || (json_is_object(x) && !constrains(x, NULL)))
        return keep(c, json_false());
    if (!json_is_object(x))
        return hr__js_fail(c, HR_EINVAL, "'not' must be a schema"), NULL;
    if (!constrains(x, (const char *const[]){"not", NULL}))
        return merge(c, rest, json_object_get(x, "not"), 0);
    if (!constrains(x, (const char *const[]){"type", NULL})) {
        int t = hr__js_type_bits(json_object_get(x, "type"));
        if (!t)
            return hr__js_fail(c, HR_EINVAL, "unknown 'type'"), NULL;
        if ((t & 0x40) && !(t & 0x20) && (hr__js_type_bits(json_object_get(rest, "type")) & 0x20))
            return hr__js_fail(c, HR_EUNSUPPORTED, "'not' an integer, of a number, is not "
                               "supported"), NULL;
        if (t & 0x20)
            t |= 0x40;
        int bits = hr__js_type_bits(json_object_get(rest, "type"));
        if (json_is_true(json_object_get(rest, "nullable")))
            bits |= 1;
        json_object_del(rest, "nullable");
        json_object_set_new(rest, "type", types_json(bits & ~t));
        return (bits & ~t) ? rest : keep(c, json_false());
    }
    return hr__js_fail(c, HR_EUNSUPPORTED, "keyword 'not' is not supported (except not {}, "
                       "not not, not {type})"), NULL;
}

static uint32_t sch(hr__js *c, const json_t *s) {
    hr__gir *ir = c->ir;
    if (c->rc)
        return 0;
    if (json_is_true(s))
        return hr__js_value(c);
    if (json_is_false(s))
        return hr__gir_none(ir);
    if (!json_is_object(s))
        return hr__js_fail(c, HR_EINVAL, "a schema must be an object or a boolean"), 0;
    if (++c->depth > MAX_DEPTH) {
        c->depth--;
        return hr__js_fail(c, HR_ERANGE, "schema nested too deeply"), 0;
    }
    uint32_t result = 0;
    json_t *ref = json_object_get(s, "$ref");
    if (ref && json_is_string(ref) && !constrains(s, (const char *const[]){"$ref", NULL})) {
        /* a plain reference: one rule per target, so recursion works */
        const json_t *t = resolve(c, json_string_value(ref));
        if (!t)
            goto out;
        int32_t r = memo_get(c, t);
        if (r < 0) {
            r = hr__gir_new_rule(ir, "ref");
            if (r < 0)
                goto out;
            if (c->n_memo == c->cap_memo) {
                size_t nc = c->cap_memo ? c->cap_memo * 2 : 16;
                struct hr__js_memo *m = realloc(c->memo, nc * sizeof *m);
                if (!m) {
                    ir->oom = 1;
                    goto out;
                }
                c->memo = m;
                c->cap_memo = nc;
            }
            c->memo[c->n_memo++] = (struct hr__js_memo){t, r};
            size_t save = c->plen;
            c->plen = 0;
            snprintf(c->path, sizeof c->path, "%s", json_string_value(ref) + (json_string_value(ref)[0] == '#'));
            c->plen = strlen(c->path);
            hr__gir_define(ir, r, sch(c, t));
            path_pop(c, save);
        }
        result = hr__gir_ref(ir, (uint32_t)r);
        goto out;
    }
    const json_t *d = hr__js_deref(c, s, 0);
    if (!d)
        goto out;
    if (d != s) {
        result = sch(c, d);
        goto out;
    }
    if (json_object_get(s, "not")) {
        const json_t *t = negate(c, s);
        if (t)
            result = sch(c, t);
        goto out;
    }
    static const char *const UNSUP[] = {"if", "$dynamicRef", "$recursiveRef"};
    for (size_t i = 0; i < sizeof UNSUP / sizeof UNSUP[0]; i++)
        if (json_object_get(s, UNSUP[i])) {
            hr__js_fail(c, HR_EUNSUPPORTED, "keyword '%s' is not supported", UNSUP[i]);
            goto out;
        }
    json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (any && one) {
        hr__js_fail(c, HR_EUNSUPPORTED, "'anyOf' together with 'oneOf' is not supported");
        goto out;
    }
    if (any || one) {
        json_t *list = any ? any : one;
        const char *kw = any ? "anyOf" : "oneOf";
        if (!json_is_array(list) || !json_array_size(list)) {
            hr__js_fail(c, HR_EINVAL, "'%s' must be a non-empty array", kw);
            goto out;
        }
        json_t *base = keep(c, json_copy((json_t *)s));
        if (!base)
            goto out;
        json_object_del(base, kw);
        int distribute = constrains(base, NULL);
        /* the branches, each with the keywords beside the list merged in */
        size_t nb = json_array_size(list);
        const json_t **brs = calloc(nb, sizeof *brs);
        if (!brs) {
            ir->oom = 1;
            goto out;
        }
        for (size_t i = 0; i < nb && !c->rc; i++) {
            brs[i] = json_array_get(list, i);
            if (distribute)
                brs[i] = merge(c, base, brs[i], 0);
        }
        if (!c->rc && one && !hr__js_one_of_disjoint(c, brs, nb))
            hr__js_fail(c, HR_EUNSUPPORTED, "'oneOf' whose branches may overlap is not supported "
                        "(use anyOf)");
        hr__u32v alts = {0};
        for (size_t i = 0; i < nb && !c->rc; i++) {
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            if (brs[i] && hr__u32v_push(&alts, sub(c, brs[i], kw, idx)))
                ir->oom = 1;
        }
        result = c->rc ? 0 : hr__gir_alt(ir, alts.v, alts.n);
        hr__u32v_free(&alts);
        free(brs);
        goto out;
    }
    json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    if (cst || en) { /* const is the one-value enum */
        if (en && !json_is_array(en)) {
            hr__js_fail(c, HR_EINVAL, "'enum' must be an array");
            goto out;
        }
        if (cst) { /* with an enum too: the const if the enum has it */
            int in = !en;
            for (size_t i = 0; en && i < json_array_size(en); i++)
                in |= json_equal(cst, json_array_get(en, i));
            json_t *one = keep(c, in ? json_pack("[O]", cst) : json_array());
            if (!one)
                goto out;
            en = one;
        }
        int tb = hr__js_type_bits(json_object_get(s, "type"));
        hr__u32v alts = {0};
        for (size_t i = 0; i < json_array_size(en); i++) {
            json_t *x = json_array_get(en, i);
            int t = json_is_null(x) ? 1 : json_is_boolean(x) ? 2 : json_is_object(x) ? 4
                  : json_is_array(x) ? 8 : json_is_string(x) ? 16 : json_is_integer(x) ? 0x60 : 0x20;
            if (json_is_real(x) && json_real_value(x) == floor(json_real_value(x)))
                t = 0x60;
            if (!(t & tb) && !(json_is_true(json_object_get(s, "nullable")) && t == 1))
                continue;
            hr__gir_push(c->ir, &alts, hr__js_literal(c, x));
        }
        result = hr__gir_alt(ir, alts.v, alts.n);
        hr__u32v_free(&alts);
        goto out;
    }
    json_t *t = json_object_get(s, "type");
    int bits = hr__js_type_bits(t);
    if (t && !bits) {
        hr__js_fail(c, HR_EINVAL, "unknown 'type'");
        goto out;
    }
    if (json_is_true(json_object_get(s, "nullable")))
        bits |= 1;
    result = typed(c, s, bits);
out:
    c->depth--;
    return result;
}

uint32_t hr__js_schema(hr__js *c, const json_t *s) { return sch(c, s); }
