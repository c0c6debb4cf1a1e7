/* JSON Schema "oneOf": compiled as anyOf, which is exact only when no value
 * can match two branches. A sufficient test of that, branch against
 * branch: types, literal values, a discriminating property, a closed
 * property set. */
#include "grammar/jsonc.h"

#include <string.h>

/* The types a branch can have (bits as hr__js_type_bits; integer within number). */
static int branch_types(hr__js *c, const json_t *b) {
    const json_t *d = hr__js_deref(c, b, 0);
    if (!d || json_is_boolean(d))
        return json_is_false(d) ? 0 : 0x7F;
    const json_t *cst = json_object_get(d, "const"), *en = json_object_get(d, "enum");
    if (cst || json_is_array(en)) {
        int t = 0;
        for (size_t i = 0; i < (cst ? 1 : json_array_size(en)); i++) {
            const json_t *x = cst ? cst : json_array_get(en, i);
            t |= json_is_null(x) ? 1 : json_is_boolean(x) ? 2 : json_is_object(x) ? 4
               : json_is_array(x) ? 8 : json_is_string(x) ? 16 : 0x60;
        }
        return t;
    }
    if (json_object_get(d, "anyOf") || json_object_get(d, "oneOf"))
        return 0x7F;
    int t = hr__js_type_bits(json_object_get(d, "type"));
    if (t & 0x40)
        t |= 0x20; /* an integer is a number */
    if (t & 0x20)
        t |= 0x40;
    if (json_is_true(json_object_get(d, "nullable")))
        t |= 1;
    return t;
}

/* The values a literal keyword allows (const, or enum): a JSON array the
 * caller frees, NULL when neither is given. */
static json_t *literals(const json_t *d) {
    const json_t *cst = json_object_get(d, "const"), *en = json_object_get(d, "enum");
    if (cst)
        return json_pack("[O]", cst);
    return json_is_array(en) ? json_copy((json_t *)en) : NULL;
}

/* Two JSON values that validators consider equal (1 == 1.0). */
static int same_value(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    return json_equal((json_t *)a, (json_t *)b);
}

/* No value is in both literal lists. */
static int literals_disjoint(const json_t *x, const json_t *y) {
    for (size_t i = 0; i < json_array_size(x); i++)
        for (size_t j = 0; j < json_array_size(y); j++)
            if (same_value(json_array_get(x, i), json_array_get(y, j)))
                return 0;
    return 1;
}

static int requires(const json_t *d, const char *name) {
    const json_t *req = json_object_get(d, "required");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (json_is_string(json_array_get(req, i)) &&
            !strcmp(json_string_value(json_array_get(req, i)), name))
            return 1;
    return 0;
}

/* Every object valid against b has a property a forbids: b requires a name
 * that a, with additionalProperties false and no patternProperties, does
 * not declare. */
static int excludes(const json_t *a, const json_t *b) {
    if (!json_is_false(json_object_get(a, "additionalProperties")) ||
        json_object_get(a, "patternProperties"))
        return 0;
    const json_t *props = json_object_get(a, "properties"), *req = json_object_get(b, "required");
    for (size_t i = 0; i < json_array_size(req); i++) {
        const json_t *n = json_array_get(req, i);
        if (json_is_string(n) && !json_object_get(props, json_string_value(n)))
            return 1;
    }
    return 0;
}

/* Objects valid against both must differ in a property both require, whose
 * allowed literals (const / enum) are disjoint: a discriminator. */
static int discriminated(hr__js *c, const json_t *a, const json_t *b) {
    const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    const char *k;
    json_t *va;
    json_object_foreach((json_t *)pa, k, va) {
        const json_t *vb = json_object_get(pb, k);
        if (!vb || !requires(a, k) || !requires(b, k))
            continue;
        const json_t *da = hr__js_deref(c, va, 0), *db = hr__js_deref(c, vb, 0);
        if (!da || !db || !json_is_object(da) || !json_is_object(db))
            continue;
        json_t *la = literals(da), *lb = literals(db);
        int d = la && lb && literals_disjoint(la, lb);
        json_decref(la);
        json_decref(lb);
        if (d)
            return 1;
    }
    return 0;
}

/* No value can match both branches (a sufficient test). */
static int branches_disjoint(hr__js *c, const json_t *x, const json_t *y) {
    int tx = branch_types(c, x), ty = branch_types(c, y);
    if (c->rc || !(tx & ty))
        return !c->rc;
    const json_t *a = hr__js_deref(c, x, 0), *b = hr__js_deref(c, y, 0);
    if (!a || !b || !json_is_object(a) || !json_is_object(b))
        return 0;
    json_t *la = literals(a), *lb = literals(b);
    int d = la && lb && literals_disjoint(la, lb);
    json_decref(la);
    json_decref(lb);
    if (d)
        return 1;
    /* objects only, from here (other types in common: overlap possible) */
    if ((tx & ty) != 0x4)
        return 0;
    return excludes(a, b) || excludes(b, a) || discriminated(c, a, b);
}

/* oneOf is compiled as anyOf, which is exact only when no value can match
 * two branches: accepted when the branches are pairwise disjoint by type,
 * by literal values, by a discriminating property (required in both, with
 * disjoint const/enum values), or by one branch's closed property set
 * lacking a property the other requires. */
int hr__js_one_of_disjoint(hr__js *c, const json_t *const *brs, size_t n) {
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (!branches_disjoint(c, brs[i], brs[j]))
                return 0;
    return 1;
}
