/* Jinja interpreter: errors, arguments, scopes, expressions, calls and
 * macros (statements are in jinja_exec.c).
 *
 * Scoping follows jinja2: `for` bodies, macros, call/filter/set blocks and
 * `with` run in a new frame whose parent is the frame they appear in (each
 * loop iteration gets a fresh one); `if` does not open a frame. Names
 * resolve through the frames, then the render variables, then the
 * globals (range, dict, namespace, raise_exception, strftime_now). */
#include "chat/jinja_frame.h"
#include "chat/jinja_lex.h"
#include "chat/jinja_ops.h"
#include "core/error.h"
#include "core/timer.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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

int hr__je_step(hr_jctx *c, const hr_jnode *at) {
    if (++c->steps > c->o.max_steps)
        return hr__jerr(c, at, HR_ERANGE,
                        "template ran more than %ld steps (an endless loop?)", c->o.max_steps);
    if (!(c->steps & 4095) && hr_thread_cpu() > c->cpu_end)
        return hr__jerr(c, at, HR_ERANGE, "template rendering took more than %g s of CPU",
                        c->o.max_seconds);
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

static int eval_args(hr_jctx *c, const hr_jnode *list, hr_jframe *f, hr_jargs *a) {
    a->npos = a->nkw = 0;
    for (const hr_jnode *n = list; n; n = n->next) {
        if (a->npos + a->nkw >= HR_JARGS_MAX) {
            hr__jargs_free(a);
            return hr__jerr(c, n, HR_EUNSUPPORTED, "not supported yet: more than %d arguments",
                            HR_JARGS_MAX);
        }
        hr_jv v;
        int rc = hr__je_eval(c, n->kind == HR_JN_KWARG ? n->a : n, f, &v);
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

hr_jframe *hr__je_frame_new(hr_jctx *c, const hr_jnode *at, hr_jframe *parent) {
    hr_jframe *f = calloc(1, sizeof *f);
    if (!f) {
        hr__jerr(c, at, HR_ENOMEM, "out of memory");
        return NULL;
    }
    f->parent = parent;
    f->vars = hr__jv_none();
    return f;
}

void hr__je_frame_free(hr_jctx *c, hr_jframe *f) {
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

void hr__je_capture(hr_jframe *f) {
    for (; f && !f->captured; f = f->parent)
        f->captured = 1;
}

int hr__je_frame_set(hr_jctx *c, const hr_jnode *at, hr_jframe *f, const char *name, hr_jv v) {
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

static int lookup(hr_jctx *c, const hr_jnode *at, hr_jframe *f, const char *name, hr_jv *out) {
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

int hr__je_emit(hr_jctx *c, const hr_jnode *at, hr_jv v) {
    hr__jv_str_append(c->out, v);
    if (c->out->failed)
        return hr__jerr(c, at, c->out->failed == 2 ? HR_ERANGE : HR_ENOMEM,
                        c->out->failed == 2 ? "output larger than %zu bytes" : "out of memory (%zu)",
                        c->o.max_output);
    return 0;
}

/* Run body in a new frame (parent f), capturing its output as a string. */
int hr__je_render_body(hr_jctx *c, const hr_jnode *at, const hr_jnode *body, hr_jframe *f,
                       hr_jframe *nf, hr_jv *out) {
    hr_jbuf buf, *saved = c->out;
    hr__jbuf_init(&buf, c->o.max_output);
    hr_jframe *fr = nf ? nf : hr__je_frame_new(c, at, f);
    if (!fr)
        return HR_ENOMEM;
    c->out = &buf;
    int rc = hr__je_exec_body(c, body, fr);
    c->out = saved;
    hr__je_frame_free(c, fr);
    if (rc == HR_JE_BREAK || rc == HR_JE_CONTINUE)
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

int hr__je_assign(hr_jctx *c, const hr_jnode *target, hr_jframe *f, hr_jv v) {
    if (target->kind == HR_JN_NAME)
        return hr__je_frame_set(c, target, f, target->name, v);
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
        rc = hr__je_assign(c, t, f, hr__jv_ref(items.u.l->v[i]));
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
    hr_jframe *nf = hr__je_frame_new(c, at, fn->scope);
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
            rc = hr__je_eval(c, prm->a, nf, &v);
        else if (!found)
            v = hr__jv_undef_hint("parameter '%s' was not provided", prm->name);
        if (!rc)
            rc = hr__je_frame_set(c, prm, nf, prm->name, v);
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
        rc = hr__je_frame_set(c, at, nf, "varargs", hr__jv_ref(varargs));
    if (!rc)
        rc = hr__je_frame_set(c, at, nf, "kwargs", hr__jv_ref(kwargs));
    if (!rc && !is_caller) {
        hr_jv caller = hr__jv_undef_hint("no caller defined");
        for (int k = 0; k < a->nkw; k++)
            if (!strcmp(a->kw_name[k], "caller")) {
                hr__jv_unref(caller);
                caller = hr__jv_ref(a->kw[k]);
            }
        rc = hr__je_frame_set(c, at, nf, "caller", caller);
    }
    hr__jv_unref(varargs);
    hr__jv_unref(kwargs);
    if (!rc) {
        rc = hr__je_render_body(c, at, m->b, NULL, nf, out);
        c->depth--;
        return rc;
    }
    hr__je_frame_free(c, nf);
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

static int eval_filter_chain(hr_jctx *c, const hr_jnode *n, hr_jframe *f, hr_jv base, hr_jv *out);

static int eval_seq(hr_jctx *c, const hr_jnode *n, hr_jframe *f, hr_jv *out) {
    hr_jv l = n->kind == HR_JN_DICT ? hr__jv_dict(4) : hr__jv_list(4);
    if (hr__jv_oom(l))
        return hr__jerr_alloc(c, n, HR_ENOMEM);
    if (n->kind == HR_JN_TUPLE)
        l.flags |= HR_JV_TUPLE;
    for (const hr_jnode *a = n->args; a; a = a->next) {
        hr_jv k, v;
        int rc;
        if (n->kind == HR_JN_DICT) {
            rc = hr__je_eval(c, a->a, f, &k);
            if (!rc && (rc = hr__je_eval(c, a->b, f, &v)))
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
            rc = hr__je_eval(c, a, f, &v);
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

int hr__je_eval_call(hr_jctx *c, const hr_jnode *n, hr_jframe *f, hr_jv extra_caller, hr_jv *out) {
    hr_jv fnv;
    hr_jargs a;
    int rc;
    const hr_jnode *callee = n->a;
    if (callee->kind == HR_JN_GETATTR) {
        hr_jv obj;
        if ((rc = hr__je_eval(c, callee->a, f, &obj)))
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
        rc = hr__je_eval(c, callee, f, &fnv);
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
static int eval_filter_chain(hr_jctx *c, const hr_jnode *n, hr_jframe *f, hr_jv base, hr_jv *out) {
    hr_jv v;
    int rc;
    if (n->a)
        rc = hr__je_eval(c, n->a, f, &v);
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
int hr__je_apply_block_filter(hr_jctx *c, const hr_jnode *n, hr_jframe *f, hr_jv base, hr_jv *out) {
    hr_jv v;
    int rc;
    if (n->a)
        rc = hr__je_apply_block_filter(c, n->a, f, base, &v);
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

int hr__je_eval(hr_jctx *c, const hr_jnode *n, hr_jframe *f, hr_jv *out) {
    int rc = hr__je_step(c, n);
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
        if ((rc = hr__je_eval(c, n->a, f, &a)))
            return rc;
        rc = hr__jinja_getattr(c, n, a, n->name, out);
        hr__jv_unref(a);
        return rc;
    case HR_JN_GETITEM:
        if ((rc = hr__je_eval(c, n->a, f, &a)))
            return rc;
        if ((rc = hr__je_eval(c, n->b, f, &b))) {
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
        if ((rc = hr__je_eval(c, n->a, f, &a)))
            return rc;
        for (int i = 0; i < 3 && !rc; i++)
            if (parts[i])
                rc = hr__je_eval(c, parts[i], f, &idx[i]);
        if (!rc)
            rc = hr__jinja_slice(c, n, a, idx, out);
        for (int i = 0; i < 3; i++)
            hr__jv_unref(idx[i]);
        hr__jv_unref(a);
        return rc;
    }
    case HR_JN_CALL:
        return hr__je_eval_call(c, n, f, hr__jv_none(), out);
    case HR_JN_FILTER:
        return eval_filter_chain(c, n, f, hr__jv_undef(), out);
    case HR_JN_TEST: {
        if ((rc = hr__je_eval(c, n->a, f, &a)))
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
        if ((rc = hr__je_eval(c, n->a, f, &a)))
            return rc;
        *out = hr__jv_bool(!hr__jv_truthy(a));
        hr__jv_unref(a);
        return 0;
    case HR_JN_NEG:
    case HR_JN_POS:
        if ((rc = hr__je_eval(c, n->a, f, &a)))
            return rc;
        rc = hr__jinja_unary(c, n, n->kind == HR_JN_NEG, a, out);
        hr__jv_unref(a);
        return rc;
    case HR_JN_BINOP:
        if ((rc = hr__je_eval(c, n->a, f, &a)))
            return rc;
        if (n->op == HR_JN_AND || n->op == HR_JN_OR) {
            if (hr__jv_truthy(a) == (n->op == HR_JN_OR)) {
                *out = a;
                return 0;
            }
            hr__jv_unref(a);
            return hr__je_eval(c, n->b, f, out);
        }
        if ((rc = hr__je_eval(c, n->b, f, &b))) {
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
            if ((rc = hr__je_eval(c, p, f, &a))) {
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
        if ((rc = hr__je_eval(c, n->a, f, &a)))
            return rc;
        int res = 1;
        for (const hr_jnode *o = n->args; o && res; o = o->next) {
            if ((rc = hr__je_eval(c, o->a, f, &b))) {
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
        if ((rc = hr__je_eval(c, n->a, f, &a)))
            return rc;
        int t = hr__jv_truthy(a);
        hr__jv_unref(a);
        if (t)
            return hr__je_eval(c, n->b, f, out);
        if (n->c)
            return hr__je_eval(c, n->c, f, out);
        *out = hr__jv_undef_hint("the inline if-expression evaluated to false and no else "
                                 "section was defined");
        return hr__jv_oom(*out) ? hr__jerr_alloc(c, n, HR_ENOMEM) : 0;
    default:
        return hr__jerr(c, n, HR_EFORMAT, "internal: node %d is not an expression", n->kind);
    }
}

