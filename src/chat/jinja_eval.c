/* Jinja interpreter: scopes, statements, expressions, calls, macros.
 *
 * Scoping follows jinja2: `for` bodies, macros, call/filter/set blocks and
 * `with` run in a new frame whose parent is the frame they appear in (each
 * loop iteration gets a fresh one); `if` does not open a frame. Names
 * resolve through the frames, then the render variables, then the
 * globals (range, dict, namespace, raise_exception, strftime_now). */
#include "chat/jinja_eval.h"
#include "chat/jinja_lex.h"
#include "chat/jinja_ops.h"
#include "core/error.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { BRK = 1, CONT = 2 };

typedef struct frame {
    struct frame *parent;
    hr_jv vars; /* dict, or NONE until the first assignment */
    int captured; /* a macro/caller refers to it: keep until the render ends */
    struct frame *next_dead;
} frame;

struct hr_jctx {
    const hr_jinja *t;
    hr_jinja_opts o;
    hr_error *err;
    long steps;
    int depth;
    hr_jbuf *out;
    hr_jv vars;
    frame *dead;
    hr_jv namespaces; /* every namespace() made: cleared at the end */
};

static int exec_body(hr_jctx *c, const hr_jnode *n, frame *f);
static int eval(hr_jctx *c, const hr_jnode *n, frame *f, hr_jv *out);

/* ---- errors ---------------------------------------------------------------- */

int hr__jerr(hr_jctx *c, const hr_jnode *at, int code, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line = 0, col = 0;
    long pos = at ? at->pos : -1;
    if (at)
        hr__jinja_where(c->t, pos, &line, &col);
    hr_err(c->err, code, "template error at line %d, column %d: %s", line, col, msg);
    if (c->err)
        c->err->pos = pos;
    return code;
}

int hr__jerr_alloc(hr_jctx *c, const hr_jnode *at, int rc) {
    if (rc == HR_ERANGE)
        return hr__jerr(c, at, HR_ERANGE, "value nested deeper than %d levels", HR_JV_MAX_DEPTH);
    return hr__jerr(c, at, HR_ENOMEM, "out of memory or output larger than %zu bytes",
                    c->o.max_output);
}

size_t hr__jctx_max_output(const hr_jctx *c) { return c->o.max_output; }

static int step(hr_jctx *c, const hr_jnode *at) {
    if (++c->steps > c->o.max_steps)
        return hr__jerr(c, at, HR_ERANGE,
                        "template ran more than %ld steps (an endless loop?)", c->o.max_steps);
    return 0;
}

int hr__jinja_check_defined(hr_jctx *c, const hr_jnode *at, hr_jv v) {
    if (v.type != HR_JV_UNDEF)
        return 0;
    return hr__jerr(c, at, HR_EINVAL, "%s", v.u.s ? v.u.s->s : "undefined value");
}

/* ---- arguments -------------------------------------------------------------- */

void hr__jargs_free(hr_jargs *a) {
    for (int i = 0; i < a->npos; i++)
        hr__jv_unref(a->pos[i]);
    for (int i = 0; i < a->nkw; i++)
        hr__jv_unref(a->kw[i]);
    a->npos = a->nkw = 0;
}

int hr__jargs_bind(hr_jctx *c, const hr_jnode *at, const char *fn, hr_jargs *a,
                   const char *const *names, int n, hr_jv **slots) {
    for (int i = 0; i < n; i++)
        slots[i] = NULL;
    if (a->npos > n)
        return hr__jerr(c, at, HR_EINVAL, "%s() takes at most %d arguments (%d given)", fn, n,
                        a->npos);
    for (int i = 0; i < a->npos; i++)
        slots[i] = &a->pos[i];
    for (int k = 0; k < a->nkw; k++) {
        int i = 0;
        while (i < n && strcmp(names[i], a->kw_name[k]))
            i++;
        if (i == n)
            return hr__jerr(c, at, HR_EINVAL, "%s() got an unexpected keyword argument '%s'",
                            fn, a->kw_name[k]);
        if (slots[i])
            return hr__jerr(c, at, HR_EINVAL, "%s() got multiple values for argument '%s'", fn,
                            names[i]);
        slots[i] = &a->kw[k];
    }
    return 0;
}

static int eval_args(hr_jctx *c, const hr_jnode *list, frame *f, hr_jargs *a) {
    a->npos = a->nkw = 0;
    for (const hr_jnode *n = list; n; n = n->next) {
        if (a->npos + a->nkw >= HR_JARGS_MAX) {
            hr__jargs_free(a);
            return hr__jerr(c, n, HR_EUNSUPPORTED, "not supported yet: more than %d arguments",
                            HR_JARGS_MAX);
        }
        hr_jv v;
        int rc = eval(c, n->kind == HR_JN_KWARG ? n->a : n, f, &v);
        if (rc) {
            hr__jargs_free(a);
            return rc;
        }
        if (n->kind == HR_JN_KWARG) {
            a->kw_name[a->nkw] = n->name;
            a->kw[a->nkw++] = v;
        } else {
            a->pos[a->npos++] = v;
        }
    }
    return 0;
}

/* ---- frames ----------------------------------------------------------------- */

static frame *frame_new(hr_jctx *c, const hr_jnode *at, frame *parent) {
    frame *f = calloc(1, sizeof *f);
    if (!f) {
        hr__jerr(c, at, HR_ENOMEM, "out of memory");
        return NULL;
    }
    f->parent = parent;
    f->vars = hr__jv_none();
    return f;
}

static void frame_free(hr_jctx *c, frame *f) {
    if (!f)
        return;
    if (f->captured) {
        f->next_dead = c->dead;
        c->dead = f;
        return;
    }
    hr__jv_unref(f->vars);
    free(f);
}

static void capture(frame *f) {
    for (; f && !f->captured; f = f->parent)
        f->captured = 1;
}

static int frame_set(hr_jctx *c, const hr_jnode *at, frame *f, const char *name, hr_jv v) {
    if (f->vars.type != HR_JV_DICT) {
        f->vars = hr__jv_dict(8);
        if (hr__jv_oom(f->vars)) {
            f->vars = hr__jv_none();
            hr__jv_unref(v);
            return hr__jerr_alloc(c, at, HR_ENOMEM);
        }
    }
    hr_jv k = hr__jv_cstr(name);
    if (hr__jv_oom(k)) {
        hr__jv_unref(v);
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    int rc = hr__jv_dict_set(f->vars, k, v);
    return rc ? hr__jerr_alloc(c, at, rc) : 0;
}

static int lookup(hr_jctx *c, const hr_jnode *at, frame *f, const char *name, hr_jv *out) {
    for (; f; f = f->parent) {
        if (f->vars.type != HR_JV_DICT)
            continue;
        hr_jv *v = hr__jv_dict_getc(f->vars, name);
        if (v) {
            *out = hr__jv_ref(*v);
            return 0;
        }
    }
    hr_jv *v = hr__jv_dict_getc(c->vars, name);
    if (v) {
        *out = hr__jv_ref(*v);
        return 0;
    }
    if (hr__jinja_global(name, out))
        return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
    *out = hr__jv_undef_hint("'%s' is undefined", name);
    return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
}

/* ---- output capture ---------------------------------------------------------- */

static int emit(hr_jctx *c, const hr_jnode *at, hr_jv v) {
    hr__jv_str_append(c->out, v);
    if (c->out->failed)
        return hr__jerr(c, at, c->out->failed == 2 ? HR_ERANGE : HR_ENOMEM,
                        c->out->failed == 2 ? "output larger than %zu bytes" : "out of memory (%zu)",
                        c->o.max_output);
    return 0;
}

/* Run body in a new frame (parent f), capturing its output as a string. */
static int render_body(hr_jctx *c, const hr_jnode *at, const hr_jnode *body, frame *f,
                       frame *nf, hr_jv *out) {
    hr_jbuf buf, *saved = c->out;
    hr__jbuf_init(&buf, c->o.max_output);
    frame *fr = nf ? nf : frame_new(c, at, f);
    if (!fr)
        return HR_ENOMEM;
    c->out = &buf;
    int rc = exec_body(c, body, fr);
    c->out = saved;
    frame_free(c, fr);
    if (rc == BRK || rc == CONT)
        rc = 0;
    if (!rc && buf.failed)
        rc = hr__jerr_alloc(c, at, HR_ENOMEM);
    if (rc) {
        hr__jbuf_free(&buf);
        return rc;
    }
    *out = hr__jbuf_take(&buf);
    return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
}

/* ---- assignment ------------------------------------------------------------------ */

static int assign(hr_jctx *c, const hr_jnode *target, frame *f, hr_jv v) {
    if (target->kind == HR_JN_NAME)
        return frame_set(c, target, f, target->name, v);
    if (target->kind == HR_JN_GETATTR) { /* ns.attr */
        hr_jv ns;
        int rc = lookup(c, target->a, f, target->a->name, &ns);
        if (rc) {
            hr__jv_unref(v);
            return rc;
        }
        if (ns.type != HR_JV_DICT || !(ns.flags & HR_JV_NS)) {
            hr__jv_unref(ns);
            hr__jv_unref(v);
            return hr__jerr(c, target, HR_EINVAL,
                            "cannot assign attribute on non-namespace object");
        }
        hr_jv k = hr__jv_cstr(target->name);
        rc = hr__jv_oom(k) ? HR_ENOMEM : hr__jv_dict_set(ns, k, v);
        if (hr__jv_oom(k))
            hr__jv_unref(v);
        hr__jv_unref(ns);
        return rc ? hr__jerr_alloc(c, target, rc) : 0;
    }
    /* tuple unpacking */
    hr_jv items;
    int rc = hr__jinja_iterate(c, target, v, &items);
    hr__jv_unref(v);
    if (rc)
        return rc;
    size_t n = 0;
    for (const hr_jnode *t = target->args; t; t = t->next)
        n++;
    if (items.u.l->n != n) {
        size_t got = items.u.l->n;
        hr__jv_unref(items);
        return hr__jerr(c, target, HR_EINVAL, "%s values to unpack (expected %zu, got %zu)",
                        got > n ? "too many" : "not enough", n, got);
    }
    size_t i = 0;
    for (const hr_jnode *t = target->args; t && !rc; t = t->next, i++)
        rc = assign(c, t, f, hr__jv_ref(items.u.l->v[i]));
    hr__jv_unref(items);
    return rc;
}

/* ---- calls ---------------------------------------------------------------------- */

static int call_macro(hr_jctx *c, const hr_jnode *at, hr_jfunc *fn, hr_jargs *a, hr_jv *out) {
    const hr_jnode *m = fn->impl;
    int is_caller = fn->kind == HR_JFN_CALLER;
    const char *name = is_caller ? "caller" : m->name;
    if (++c->depth > c->o.max_depth) {
        c->depth--;
        return hr__jerr(c, at, HR_ERANGE, "macro calls nested deeper than %d", c->o.max_depth);
    }
    frame *nf = frame_new(c, at, fn->scope);
    int rc = nf ? 0 : HR_ENOMEM;
    hr_jv varargs = hr__jv_none(), kwargs = hr__jv_none();
    int np = 0, i = 0;
    const hr_jnode *prm;
    for (prm = m->args; prm; prm = prm->next)
        np++;
    if (!rc && a->npos > np && !(m->op & HR_JN_USES_VARARGS))
        rc = hr__jerr(c, at, HR_EINVAL, "macro '%s' takes not more than %d argument(s)", name, np);
    /* positional and keyword parameters; the rest default */
    for (prm = m->args, i = 0; prm && !rc; prm = prm->next, i++) {
        hr_jv v;
        int found = 0;
        if (i < a->npos) {
            v = hr__jv_ref(a->pos[i]);
            found = 1;
        }
        for (int k = 0; k < a->nkw && !rc; k++) {
            if (strcmp(a->kw_name[k], prm->name))
                continue;
            if (found) {
                hr__jv_unref(v);
                rc = hr__jerr(c, at, HR_EINVAL, "macro '%s' got multiple values for argument '%s'",
                              name, prm->name);
                break;
            }
            v = hr__jv_ref(a->kw[k]);
            found = 1;
        }
        if (rc)
            break;
        if (!found && prm->a)
            rc = eval(c, prm->a, nf, &v);
        else if (!found)
            v = hr__jv_undef_hint("parameter '%s' was not provided", prm->name);
        if (!rc)
            rc = frame_set(c, prm, nf, prm->name, v);
    }
    if (!rc) {
        varargs = hr__jv_list(0);
        kwargs = hr__jv_dict(0);
        if (hr__jv_oom(varargs) || hr__jv_oom(kwargs))
            rc = hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    if (!rc) {
        int arc = 0;
        varargs.flags |= HR_JV_TUPLE;
        for (int k = np; k < a->npos && !arc; k++)
            arc = hr__jv_list_push(varargs, hr__jv_ref(a->pos[k]));
        for (int k = 0; k < a->nkw && !arc && !rc; k++) {
            int is_param = !strcmp(a->kw_name[k], "caller") && !is_caller;
            for (prm = m->args; prm && !is_param; prm = prm->next)
                is_param = !strcmp(prm->name, a->kw_name[k]);
            if (is_param)
                continue;
            if (!(m->op & HR_JN_USES_KWARGS)) {
                rc = hr__jerr(c, at, HR_EINVAL, "macro '%s' takes no keyword argument '%s'", name,
                              a->kw_name[k]);
                break;
            }
            hr_jv key = hr__jv_cstr(a->kw_name[k]);
            arc = hr__jv_oom(key) ? HR_ENOMEM : hr__jv_dict_set(kwargs, key, hr__jv_ref(a->kw[k]));
        }
        if (arc && !rc)
            rc = hr__jerr_alloc(c, at, arc);
    }
    if (!rc)
        rc = frame_set(c, at, nf, "varargs", hr__jv_ref(varargs));
    if (!rc)
        rc = frame_set(c, at, nf, "kwargs", hr__jv_ref(kwargs));
    if (!rc && !is_caller) {
        hr_jv caller = hr__jv_undef_hint("no caller defined");
        for (int k = 0; k < a->nkw; k++)
            if (!strcmp(a->kw_name[k], "caller")) {
                hr__jv_unref(caller);
                caller = hr__jv_ref(a->kw[k]);
            }
        rc = frame_set(c, at, nf, "caller", caller);
    }
    hr__jv_unref(varargs);
    hr__jv_unref(kwargs);
    if (!rc) {
        rc = render_body(c, at, m->b, NULL, nf, out);
        c->depth--;
        return rc;
    }
    frame_free(c, nf);
    c->depth--;
    return rc;
}

int hr__jinja_call(hr_jctx *c, const hr_jnode *at, hr_jv fnv, hr_jargs *a, hr_jv *out) {
    int rc;
    if (fnv.type == HR_JV_UNDEF)
        rc = hr__jinja_check_defined(c, at, fnv);
    else if (fnv.type != HR_JV_FUNC)
        rc = hr__jerr(c, at, HR_EINVAL, "'%s' object is not callable", hr__jv_type_name(fnv));
    else if (fnv.u.fn->kind == HR_JFN_MACRO || fnv.u.fn->kind == HR_JFN_CALLER)
        rc = call_macro(c, at, fnv.u.fn, a, out);
    else if (fnv.u.fn->kind == HR_JFN_METHOD)
        rc = hr__jinja_method(c, at, fnv.u.fn->self, fnv.u.fn->name, a, out);
    else
        rc = hr__jinja_call_global(c, at, fnv.u.fn, a, out);
    hr__jargs_free(a);
    return rc;
}

/* ---- expressions ----------------------------------------------------------------- */

static int eval_filter_chain(hr_jctx *c, const hr_jnode *n, frame *f, hr_jv base, hr_jv *out);

static int eval_seq(hr_jctx *c, const hr_jnode *n, frame *f, hr_jv *out) {
    hr_jv l = n->kind == HR_JN_DICT ? hr__jv_dict(4) : hr__jv_list(4);
    if (hr__jv_oom(l))
        return hr__jerr_alloc(c, n, HR_ENOMEM);
    if (n->kind == HR_JN_TUPLE)
        l.flags |= HR_JV_TUPLE;
    for (const hr_jnode *a = n->args; a; a = a->next) {
        hr_jv k, v;
        int rc;
        if (n->kind == HR_JN_DICT) {
            rc = eval(c, a->a, f, &k);
            if (!rc && (rc = eval(c, a->b, f, &v)))
                hr__jv_unref(k);
            if (!rc && (k.type == HR_JV_LIST || k.type == HR_JV_DICT) &&
                !(k.flags & HR_JV_TUPLE)) {
                hr__jv_unref(k);
                hr__jv_unref(v);
                rc = hr__jerr(c, a, HR_EINVAL, "unhashable type: '%s'", hr__jv_type_name(k));
            }
            if (!rc && (rc = hr__jv_dict_set(l, k, v)))
                rc = hr__jerr_alloc(c, a, rc);
        } else {
            rc = eval(c, a, f, &v);
            if (!rc && (rc = hr__jv_list_push(l, v)))
                rc = hr__jerr_alloc(c, a, rc);
        }
        if (rc) {
            hr__jv_unref(l);
            return rc;
        }
    }
    *out = l;
    return 0;
}

static int eval_call(hr_jctx *c, const hr_jnode *n, frame *f, hr_jv extra_caller, hr_jv *out) {
    hr_jv fnv;
    hr_jargs a;
    int rc;
    const hr_jnode *callee = n->a;
    if (callee->kind == HR_JN_GETATTR) {
        hr_jv obj;
        if ((rc = eval(c, callee->a, f, &obj)))
            return rc;
        int m = obj.type == HR_JV_STR || obj.type == HR_JV_LIST ||
                        (obj.type == HR_JV_DICT && !(obj.flags & HR_JV_NS))
                    ? hr__jinja_has_method(obj, callee->name)
                    : 0;
        if (m < 0) {
            rc = hr__jerr(c, callee, HR_EINVAL, "access to attribute '%s' of '%s' object is unsafe",
                          callee->name, hr__jv_type_name(obj));
            hr__jv_unref(obj);
            return rc;
        }
        if (m > 0) {
            if (!(rc = eval_args(c, n->args, f, &a))) {
                rc = hr__jinja_method(c, n, obj, callee->name, &a, out);
                hr__jargs_free(&a);
            }
            hr__jv_unref(obj);
            return rc;
        }
        rc = hr__jinja_getattr(c, callee, obj, callee->name, &fnv);
        hr__jv_unref(obj);
    } else {
        rc = eval(c, callee, f, &fnv);
    }
    if (rc)
        return rc;
    if ((rc = eval_args(c, n->args, f, &a))) {
        hr__jv_unref(fnv);
        return rc;
    }
    if (extra_caller.type == HR_JV_FUNC) {
        if (a.nkw >= HR_JARGS_MAX) {
            hr__jargs_free(&a);
            hr__jv_unref(fnv);
            return hr__jerr(c, n, HR_EUNSUPPORTED, "not supported yet: more than %d arguments",
                            HR_JARGS_MAX);
        }
        a.kw_name[a.nkw] = "caller";
        a.kw[a.nkw++] = hr__jv_ref(extra_caller);
    }
    rc = hr__jinja_call(c, n, fnv, &a, out);
    hr__jv_unref(fnv);
    return rc;
}

/* Apply FILTER node n (and the chain below it, down to a NULL target that
 * stands for base) to base. */
static int eval_filter_chain(hr_jctx *c, const hr_jnode *n, frame *f, hr_jv base, hr_jv *out) {
    hr_jv v;
    int rc;
    if (n->a)
        rc = eval(c, n->a, f, &v);
    else
        rc = 0, v = hr__jv_ref(base);
    if (rc)
        return rc;
    hr_jargs a;
    if ((rc = eval_args(c, n->args, f, &a))) {
        hr__jv_unref(v);
        return rc;
    }
    rc = hr__jinja_filter(c, n, n->name, v, &a, out);
    hr__jargs_free(&a);
    hr__jv_unref(v);
    return rc;
}

/* A filter chain of a block (`{% filter a|b %}`): the innermost filter has
 * a NULL target that receives base. */
static int apply_block_filter(hr_jctx *c, const hr_jnode *n, frame *f, hr_jv base, hr_jv *out) {
    hr_jv v;
    int rc;
    if (n->a)
        rc = apply_block_filter(c, n->a, f, base, &v);
    else
        rc = 0, v = hr__jv_ref(base);
    if (rc)
        return rc;
    hr_jargs a;
    if ((rc = eval_args(c, n->args, f, &a))) {
        hr__jv_unref(v);
        return rc;
    }
    rc = hr__jinja_filter(c, n, n->name, v, &a, out);
    hr__jargs_free(&a);
    hr__jv_unref(v);
    return rc;
}

static int eval(hr_jctx *c, const hr_jnode *n, frame *f, hr_jv *out) {
    int rc = step(c, n);
    if (rc)
        return rc;
    hr_jv a, b;
    switch (n->kind) {
    case HR_JN_CONST:
        *out = hr__jv_ref(n->val);
        return 0;
    case HR_JN_NAME:
        return lookup(c, n, f, n->name, out);
    case HR_JN_LIST:
    case HR_JN_TUPLE:
    case HR_JN_DICT:
        return eval_seq(c, n, f, out);
    case HR_JN_GETATTR:
        if ((rc = eval(c, n->a, f, &a)))
            return rc;
        rc = hr__jinja_getattr(c, n, a, n->name, out);
        hr__jv_unref(a);
        return rc;
    case HR_JN_GETITEM:
        if ((rc = eval(c, n->a, f, &a)))
            return rc;
        if ((rc = eval(c, n->b, f, &b))) {
            hr__jv_unref(a);
            return rc;
        }
        rc = hr__jinja_getitem(c, n, a, b, out);
        hr__jv_unref(a);
        hr__jv_unref(b);
        return rc;
    case HR_JN_SLICE: {
        hr_jv idx[3] = {hr__jv_none(), hr__jv_none(), hr__jv_none()};
        const hr_jnode *parts[3] = {n->b, n->c, n->d};
        if ((rc = eval(c, n->a, f, &a)))
            return rc;
        for (int i = 0; i < 3 && !rc; i++)
            if (parts[i])
                rc = eval(c, parts[i], f, &idx[i]);
        if (!rc)
            rc = hr__jinja_slice(c, n, a, idx, out);
        for (int i = 0; i < 3; i++)
            hr__jv_unref(idx[i]);
        hr__jv_unref(a);
        return rc;
    }
    case HR_JN_CALL:
        return eval_call(c, n, f, hr__jv_none(), out);
    case HR_JN_FILTER:
        return eval_filter_chain(c, n, f, hr__jv_undef(), out);
    case HR_JN_TEST: {
        if ((rc = eval(c, n->a, f, &a)))
            return rc;
        hr_jargs args;
        if ((rc = eval_args(c, n->args, f, &args))) {
            hr__jv_unref(a);
            return rc;
        }
        int r = 0;
        rc = hr__jinja_test(c, n, n->name, a, &args, &r);
        hr__jargs_free(&args);
        hr__jv_unref(a);
        *out = hr__jv_bool(r);
        return rc;
    }
    case HR_JN_NOT:
        if ((rc = eval(c, n->a, f, &a)))
            return rc;
        *out = hr__jv_bool(!hr__jv_truthy(a));
        hr__jv_unref(a);
        return 0;
    case HR_JN_NEG:
    case HR_JN_POS:
        if ((rc = eval(c, n->a, f, &a)))
            return rc;
        rc = hr__jinja_unary(c, n, n->kind == HR_JN_NEG, a, out);
        hr__jv_unref(a);
        return rc;
    case HR_JN_BINOP:
        if ((rc = eval(c, n->a, f, &a)))
            return rc;
        if (n->op == HR_JN_AND || n->op == HR_JN_OR) {
            if (hr__jv_truthy(a) == (n->op == HR_JN_OR)) {
                *out = a;
                return 0;
            }
            hr__jv_unref(a);
            return eval(c, n->b, f, out);
        }
        if ((rc = eval(c, n->b, f, &b))) {
            hr__jv_unref(a);
            return rc;
        }
        rc = hr__jinja_binop(c, n, n->op, a, b, out);
        hr__jv_unref(a);
        hr__jv_unref(b);
        return rc;
    case HR_JN_CONCAT: {
        hr_jbuf buf;
        hr__jbuf_init(&buf, c->o.max_output);
        for (const hr_jnode *p = n->args; p; p = p->next) {
            if ((rc = eval(c, p, f, &a))) {
                hr__jbuf_free(&buf);
                return rc;
            }
            hr__jv_str_append(&buf, a);
            hr__jv_unref(a);
        }
        if (buf.failed) {
            hr__jbuf_free(&buf);
            return hr__jerr_alloc(c, n, HR_ENOMEM);
        }
        *out = hr__jbuf_take(&buf);
        return hr__jv_oom(*out) ? hr__jerr_alloc(c, n, HR_ENOMEM) : 0;
    }
    case HR_JN_COMPARE: {
        if ((rc = eval(c, n->a, f, &a)))
            return rc;
        int res = 1;
        for (const hr_jnode *o = n->args; o && res; o = o->next) {
            if ((rc = eval(c, o->a, f, &b))) {
                hr__jv_unref(a);
                return rc;
            }
            rc = hr__jinja_compare(c, o, o->op, a, b, &res);
            hr__jv_unref(a);
            a = b;
            if (rc) {
                hr__jv_unref(a);
                return rc;
            }
        }
        hr__jv_unref(a);
        *out = hr__jv_bool(res);
        return 0;
    }
    case HR_JN_COND:
        if ((rc = eval(c, n->a, f, &a)))
            return rc;
        int t = hr__jv_truthy(a);
        hr__jv_unref(a);
        if (t)
            return eval(c, n->b, f, out);
        if (n->c)
            return eval(c, n->c, f, out);
        *out = hr__jv_undef_hint("the inline if-expression evaluated to false and no else "
                                 "section was defined");
        return hr__jv_oom(*out) ? hr__jerr_alloc(c, n, HR_ENOMEM) : 0;
    default:
        return hr__jerr(c, n, HR_EFORMAT, "internal: node %d is not an expression", n->kind);
    }
}

/* ---- statements -------------------------------------------------------------------- */

static int exec_for(hr_jctx *c, const hr_jnode *n, frame *f) {
    hr_jv seq, items;
    int rc = eval(c, n->b, f, &seq);
    if (rc)
        return rc;
    rc = hr__jinja_iterate(c, n->b, seq, &items);
    hr__jv_unref(seq);
    if (rc)
        return rc;
    if (n->e) { /* loop filter: `for x in xs if cond` */
        hr_jv kept = hr__jv_list(items.u.l->n);
        rc = hr__jv_oom(kept) ? hr__jerr_alloc(c, n, HR_ENOMEM) : 0;
        for (size_t i = 0; i < items.u.l->n && !rc; i++) {
            frame *tf = frame_new(c, n, f);
            hr_jv t;
            if (!tf)
                rc = HR_ENOMEM;
            if (!rc)
                rc = assign(c, n->a, tf, hr__jv_ref(items.u.l->v[i]));
            if (!rc && !(rc = eval(c, n->e, tf, &t))) {
                if (hr__jv_truthy(t))
                    rc = hr__jv_list_push(kept, hr__jv_ref(items.u.l->v[i]));
                hr__jv_unref(t);
            }
            frame_free(c, tf);
        }
        hr__jv_unref(items);
        items = kept;
        if (rc) {
            hr__jv_unref(items);
            return rc;
        }
    }
    size_t len = items.u.l->n;
    for (size_t i = 0; i < len && !rc; i++) {
        if ((rc = step(c, n)))
            break;
        frame *lf = frame_new(c, n, f);
        if (!lf) {
            rc = HR_ENOMEM;
            break;
        }
        hr_jv loop;
        rc = hr__jinja_loop_object(c, n, items, i, &loop);
        if (!rc)
            rc = frame_set(c, n, lf, "loop", loop);
        if (!rc)
            rc = assign(c, n->a, lf, hr__jv_ref(items.u.l->v[i]));
        if (!rc)
            rc = exec_body(c, n->c, lf);
        frame_free(c, lf);
        if (rc == CONT)
            rc = 0;
        if (rc == BRK) {
            rc = 0;
            break;
        }
    }
    hr__jv_unref(items);
    if (!rc && !len && n->d) {
        frame *ef = frame_new(c, n, f);
        if (!ef)
            return HR_ENOMEM;
        rc = exec_body(c, n->d, ef);
        frame_free(c, ef);
    }
    return rc;
}

static int exec_stmt(hr_jctx *c, const hr_jnode *n, frame *f) {
    int rc = step(c, n);
    if (rc)
        return rc;
    hr_jv v, s;
    switch (n->kind) {
    case HR_JN_DATA:
        return emit(c, n, n->val);
    case HR_JN_OUTPUT:
        if ((rc = eval(c, n->a, f, &v)))
            return rc;
        rc = emit(c, n->a, v);
        hr__jv_unref(v);
        return rc;
    case HR_JN_IF:
        for (const hr_jnode *cur = n; cur;) {
            if ((rc = eval(c, cur->a, f, &v)))
                return rc;
            int t = hr__jv_truthy(v);
            hr__jv_unref(v);
            if (t)
                return exec_body(c, cur->b, f);
            if (cur->c && cur->c->kind == HR_JN_IF && cur->c->op == HR_JN_ELIF) {
                cur = cur->c;
                continue;
            }
            return exec_body(c, cur->c, f);
        }
        return 0;
    case HR_JN_FOR:
        return exec_for(c, n, f);
    case HR_JN_SET:
        if ((rc = eval(c, n->b, f, &v)))
            return rc;
        return assign(c, n->a, f, v);
    case HR_JN_SETBLOCK:
        if ((rc = render_body(c, n, n->b, f, NULL, &v)))
            return rc;
        if (n->c) {
            rc = apply_block_filter(c, n->c, f, v, &s);
            hr__jv_unref(v);
            if (rc)
                return rc;
            v = s;
        }
        return assign(c, n->a, f, v);
    case HR_JN_MACRO:
    case HR_JN_CALLBLOCK: {
        int is_macro = n->kind == HR_JN_MACRO;
        v = hr__jv_func(is_macro ? HR_JFN_MACRO : HR_JFN_CALLER, is_macro ? n->name : "caller");
        if (hr__jv_oom(v))
            return hr__jerr_alloc(c, n, HR_ENOMEM);
        v.u.fn->impl = n;
        v.u.fn->scope = f;
        capture(f);
        if (is_macro)
            return frame_set(c, n, f, n->name, v);
        /* caller(): the call block's params and body act as a macro */
        rc = eval_call(c, n->a, f, v, &s);
        hr__jv_unref(v);
        if (rc)
            return rc;
        rc = emit(c, n, s);
        hr__jv_unref(s);
        return rc;
    }
    case HR_JN_FILTERBLOCK:
        if ((rc = render_body(c, n, n->b, f, NULL, &v)))
            return rc;
        rc = apply_block_filter(c, n->a, f, v, &s);
        hr__jv_unref(v);
        if (rc)
            return rc;
        rc = emit(c, n, s);
        hr__jv_unref(s);
        return rc;
    case HR_JN_BREAK:
        return BRK;
    case HR_JN_CONTINUE:
        return CONT;
    case HR_JN_WITH:
    case HR_JN_SCOPE: {
        frame *nf = frame_new(c, n, f);
        if (!nf)
            return HR_ENOMEM;
        for (const hr_jnode *a = n->args; a && !rc; a = a->next)
            if (!(rc = eval(c, a->b, f, &v)))
                rc = assign(c, a->a, nf, v);
        if (!rc)
            rc = exec_body(c, n->b, nf);
        frame_free(c, nf);
        return rc;
    }
    default:
        return hr__jerr(c, n, HR_EFORMAT, "internal: node %d is not a statement", n->kind);
    }
}

static int exec_body(hr_jctx *c, const hr_jnode *n, frame *f) {
    for (; n; n = n->next) {
        int rc = exec_stmt(c, n, f);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- render ------------------------------------------------------------------------ */

int hr__jinja_register_ns(hr_jctx *c, hr_jv ns) {
    return hr__jv_list_push(c->namespaces, hr__jv_ref(ns));
}

const hr_jinja_opts *hr__jctx_opts(const hr_jctx *c) { return &c->o; }

int hr_jinja_render(const hr_jinja *t, hr_jv vars, const hr_jinja_opts *opts, char **out,
                    size_t *out_len, hr_error *err) {
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (vars.type != HR_JV_DICT)
        return hr_err(err, HR_EINVAL, "template variables must be a dict");
    hr_jctx c = {.t = t, .err = err, .vars = vars};
    if (opts)
        c.o = *opts;
    if (!c.o.max_output)
        c.o.max_output = (size_t)16 << 20;
    if (!c.o.max_steps)
        c.o.max_steps = 20000000;
    if (!c.o.max_depth)
        c.o.max_depth = 100;
    hr_jbuf buf;
    hr__jbuf_init(&buf, c.o.max_output);
    c.out = &buf;
    c.namespaces = hr__jv_list(0);
    frame *top = frame_new(&c, NULL, NULL);
    int rc = hr__jv_oom(c.namespaces) || !top ? hr_err(err, HR_ENOMEM, "out of memory") : 0;
    if (!rc)
        rc = exec_body(&c, t->body, top);
    if (rc == BRK || rc == CONT)
        rc = 0;
    if (!rc && buf.failed)
        rc = hr_err(err, HR_ERANGE, "template output larger than %zu bytes", c.o.max_output);
    frame_free(&c, top);
    while (c.dead) {
        frame *d = c.dead;
        c.dead = d->next_dead;
        hr__jv_unref(d->vars);
        free(d);
    }
    if (!hr__jv_oom(c.namespaces)) {
        for (size_t i = 0; i < c.namespaces.u.l->n; i++)
            hr__jv_dict_clear(c.namespaces.u.l->v[i]);
        hr__jv_unref(c.namespaces);
    }
    if (rc) {
        hr__jbuf_free(&buf);
        return rc;
    }
    if (!buf.p) {
        buf.p = malloc(1);
        if (!buf.p)
            return hr_err(err, HR_ENOMEM, "out of memory");
        buf.p[0] = 0;
    }
    *out = buf.p;
    if (out_len)
        *out_len = buf.len;
    return 0;
}
