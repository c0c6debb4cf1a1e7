/* Jinja tests (`x is defined`, `x is string`, ...): jinja2 3.1's builtins. */
#include "chat/jinja_eval.h"
#include "chat/jinja_lex.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_str.h"
#include "core/error.h"

#include <string.h>

static const char *const jinja2_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "escaped", "even",
    "false", "filter", "float", "ge", "gt", "greaterthan", "in", "integer", "iterable", "le",
    "lower", "lessthan", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence",
    "string", "test", "true", "undefined", "upper", NULL};

int hr__jinja_test_known(const char *name) {
    for (const char *const *p = jinja2_tests; *p; p++)
        if (!strcmp(*p, name))
            return 1;
    return 0;
}

static int one_arg(hr_jctx *c, const hr_jnode *at, const char *name, hr_jargs *a, hr_jv **arg) {
    if (a->npos + a->nkw != 1)
        return hr__jerr(c, at, HR_EINVAL, "test '%s' takes exactly one argument", name);
    *arg = a->npos ? &a->pos[0] : &a->kw[0];
    return 0;
}

static int int_of(hr_jctx *c, const hr_jnode *at, hr_jv v, int64_t *out) {
    if (v.type == HR_JV_INT || v.type == HR_JV_BOOL) {
        *out = v.type == HR_JV_INT ? v.u.i : v.u.b;
        return 0;
    }
    if (v.type == HR_JV_UNDEF)
        return hr__jinja_check_defined(c, at, v);
    return hr__jerr(c, at, HR_EINVAL, "unsupported operand type(s) for %%: '%s' and 'int'",
                    hr__jv_type_name(v));
}

int hr__jinja_test(hr_jctx *c, const hr_jnode *at, const char *name, hr_jv v, hr_jargs *a,
                   int *out) {
    hr_jv *arg = NULL;
    int rc;
    int64_t x, y;
    static const struct {
        const char *name;
        int op;
    } cmp[] = {{"eq", HR_JOP_EQ},       {"equalto", HR_JOP_EQ}, {"ne", HR_JOP_NE},
               {"gt", HR_JOP_GT},       {"greaterthan", HR_JOP_GT}, {"ge", HR_JOP_GTEQ},
               {"lt", HR_JOP_LT},       {"lessthan", HR_JOP_LT},   {"le", HR_JOP_LTEQ},
               {"in", HR_JN_IN}};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
        if (!strcmp(name, cmp[i].name)) {
            if ((rc = one_arg(c, at, name, a, &arg)))
                return rc;
            return hr__jinja_compare(c, at, cmp[i].op, v, *arg, out);
        }
    if (!hr__jinja_test_known(name))
        return hr__jerr(c, at, HR_EINVAL, "no test named '%s'", name);
    if (!strcmp(name, "sameas")) {
        if ((rc = one_arg(c, at, name, a, &arg)))
            return rc;
        hr_jv o = *arg;
        if (v.type != o.type)
            *out = 0;
        else if (v.type == HR_JV_STR)
            *out = v.u.s == o.u.s;
        else if (v.type == HR_JV_LIST)
            *out = v.u.l == o.u.l;
        else if (v.type == HR_JV_DICT)
            *out = v.u.d == o.u.d;
        else if (v.type == HR_JV_FUNC)
            *out = v.u.fn == o.u.fn;
        else
            *out = hr__jv_equal(v, o);
        return 0;
    }
    if (!strcmp(name, "divisibleby")) {
        if ((rc = one_arg(c, at, name, a, &arg)) || (rc = int_of(c, at, v, &x)) ||
            (rc = int_of(c, at, *arg, &y)))
            return rc;
        if (!y)
            return hr__jerr(c, at, HR_EINVAL, "integer division or modulo by zero");
        *out = y == -1 || x % y == 0;
        return 0;
    }
    if (a->npos || a->nkw)
        return hr__jerr(c, at, HR_EINVAL, "test '%s' takes no arguments", name);
    if (!strcmp(name, "filter") || !strcmp(name, "test")) { /* `'upper' is filter` */
        *out = v.type == HR_JV_STR && (name[0] == 'f' ? hr__jinja_filter_known(v.u.s->s)
                                                      : hr__jinja_test_known(v.u.s->s));
        return 0;
    }
    if (!strcmp(name, "defined"))
        *out = v.type != HR_JV_UNDEF;
    else if (!strcmp(name, "undefined"))
        *out = v.type == HR_JV_UNDEF;
    else if (!strcmp(name, "none"))
        *out = v.type == HR_JV_NONE;
    else if (!strcmp(name, "boolean"))
        *out = v.type == HR_JV_BOOL;
    else if (!strcmp(name, "true") || !strcmp(name, "false"))
        *out = v.type == HR_JV_BOOL && v.u.b == (name[0] == 't');
    else if (!strcmp(name, "integer"))
        *out = v.type == HR_JV_INT;
    else if (!strcmp(name, "float"))
        *out = v.type == HR_JV_FLOAT;
    else if (!strcmp(name, "number"))
        *out = hr__jv_is_number(v);
    else if (!strcmp(name, "string"))
        *out = v.type == HR_JV_STR;
    else if (!strcmp(name, "mapping"))
        *out = v.type == HR_JV_DICT && !(v.flags & HR_JV_NS);
    else if (!strcmp(name, "iterable"))
        *out = v.type == HR_JV_STR || v.type == HR_JV_LIST || v.type == HR_JV_UNDEF ||
               (v.type == HR_JV_DICT && !(v.flags & HR_JV_NS));
    else if (!strcmp(name, "sequence"))
        *out = v.type == HR_JV_STR || v.type == HR_JV_UNDEF ||
               (v.type == HR_JV_LIST && !(v.flags & HR_JV_GEN)) ||
               (v.type == HR_JV_DICT && !(v.flags & HR_JV_NS));
    else if (!strcmp(name, "callable"))
        *out = v.type == HR_JV_FUNC;
    else if (!strcmp(name, "escaped"))
        *out = v.type == HR_JV_STR && (v.flags & HR_JV_SAFE);
    else if (!strcmp(name, "even") || !strcmp(name, "odd")) {
        if ((rc = int_of(c, at, v, &x)))
            return rc;
        *out = (x % 2 != 0) == (name[0] == 'o');
    } else if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        hr_jv s = hr__jv_to_str(v, hr__jctx_max_output(c));
        if (hr__jv_oom(s))
            return hr__jerr_alloc(c, at, HR_ENOMEM);
        *out = hr__jstr_is_case(s, name[0] == 'u');
        hr__jv_unref(s);
    } else {
        return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: the '%s' test", name);
    }
    return 0;
}
