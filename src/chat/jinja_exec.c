/* Jinja statements (if, for, set, macro, call, filter, with, ...) and the
 * render entry point. */
#include "chat/jinja_frame.h"
#include "chat/jinja_lex.h"
#include "chat/jinja_ops.h"
#include "core/timer.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- statements -------------------------------------------------------------------- */

static int exec_for(hr_jctx *c, const hr_jnode *n, hr_jframe *f) {
    hr_jv seq, items;
    int rc = hr__je_eval(c, n->b, f, &seq);
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
            hr_jframe *tf = hr__je_frame_new(c, n, f);
            hr_jv t;
            if (!tf)
                rc = HR_ENOMEM;
            if (!rc)
                rc = hr__je_assign(c, n->a, tf, hr__jv_ref(items.u.l->v[i]));
            if (!rc && !(rc = hr__je_eval(c, n->e, tf, &t))) {
                if (hr__jv_truthy(t))
                    rc = hr__jv_list_push(kept, hr__jv_ref(items.u.l->v[i]));
                hr__jv_unref(t);
            }
            hr__je_frame_free(c, tf);
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
        if ((rc = hr__je_step(c, n)))
            break;
        hr_jframe *lf = hr__je_frame_new(c, n, f);
        if (!lf) {
            rc = HR_ENOMEM;
            break;
        }
        hr_jv loop;
        rc = hr__jinja_loop_object(c, n, items, i, &loop);
        if (!rc)
            rc = hr__je_frame_set(c, n, lf, "loop", loop);
        if (!rc)
            rc = hr__je_assign(c, n->a, lf, hr__jv_ref(items.u.l->v[i]));
        if (!rc)
            rc = hr__je_exec_body(c, n->c, lf);
        hr__je_frame_free(c, lf);
        if (rc == HR_JE_CONTINUE)
            rc = 0;
        if (rc == HR_JE_BREAK) {
            rc = 0;
            break;
        }
    }
    hr__jv_unref(items);
    if (!rc && !len && n->d) {
        hr_jframe *ef = hr__je_frame_new(c, n, f);
        if (!ef)
            return HR_ENOMEM;
        rc = hr__je_exec_body(c, n->d, ef);
        hr__je_frame_free(c, ef);
    }
    return rc;
}

static int exec_stmt(hr_jctx *c, const hr_jnode *n, hr_jframe *f) {
    int rc = hr__je_step(c, n);
    if (rc)
        return rc;
    hr_jv v, s;
    switch (n->kind) {
    case HR_JN_DATA:
        return hr__je_emit(c, n, n->val);
    case HR_JN_OUTPUT:
        if ((rc = hr__je_eval(c, n->a, f, &v)))
            return rc;
        rc = hr__je_emit(c, n->a, v);
        hr__jv_unref(v);
        return rc;
    case HR_JN_IF:
        for (const hr_jnode *cur = n; cur;) {
            if ((rc = hr__je_eval(c, cur->a, f, &v)))
                return rc;
            int t = hr__jv_truthy(v);
            hr__jv_unref(v);
            if (t)
                return hr__je_exec_body(c, cur->b, f);
            if (cur->c && cur->c->kind == HR_JN_IF && cur->c->op == HR_JN_ELIF) {
                cur = cur->c;
                continue;
            }
            return hr__je_exec_body(c, cur->c, f);
        }
        return 0;
    case HR_JN_FOR:
        return exec_for(c, n, f);
    case HR_JN_SET:
        if ((rc = hr__je_eval(c, n->b, f, &v)))
            return rc;
        return hr__je_assign(c, n->a, f, v);
    case HR_JN_SETBLOCK:
        if ((rc = hr__je_render_body(c, n, n->b, f, NULL, &v)))
            return rc;
        if (n->c) {
            rc = hr__je_apply_block_filter(c, n->c, f, v, &s);
            hr__jv_unref(v);
            if (rc)
                return rc;
            v = s;
        }
        return hr__je_assign(c, n->a, f, v);
    case HR_JN_MACRO:
    case HR_JN_CALLBLOCK: {
        int is_macro = n->kind == HR_JN_MACRO;
        v = hr__jv_func(is_macro ? HR_JFN_MACRO : HR_JFN_CALLER, is_macro ? n->name : "caller");
        if (hr__jv_oom(v))
            return hr__jerr_alloc(c, n, HR_ENOMEM);
        v.u.fn->impl = n;
        v.u.fn->scope = f;
        hr__je_capture(f);
        if (is_macro)
            return hr__je_frame_set(c, n, f, n->name, v);
        /* caller(): the call block's params and body act as a macro */
        rc = hr__je_eval_call(c, n->a, f, v, &s);
        hr__jv_unref(v);
        if (rc)
            return rc;
        rc = hr__je_emit(c, n, s);
        hr__jv_unref(s);
        return rc;
    }
    case HR_JN_FILTERBLOCK:
        if ((rc = hr__je_render_body(c, n, n->b, f, NULL, &v)))
            return rc;
        rc = hr__je_apply_block_filter(c, n->a, f, v, &s);
        hr__jv_unref(v);
        if (rc)
            return rc;
        rc = hr__je_emit(c, n, s);
        hr__jv_unref(s);
        return rc;
    case HR_JN_BREAK:
        return HR_JE_BREAK;
    case HR_JN_CONTINUE:
        return HR_JE_CONTINUE;
    case HR_JN_WITH:
    case HR_JN_SCOPE: {
        hr_jframe *nf = hr__je_frame_new(c, n, f);
        if (!nf)
            return HR_ENOMEM;
        for (const hr_jnode *a = n->args; a && !rc; a = a->next)
            if (!(rc = hr__je_eval(c, a->b, f, &v)))
                rc = hr__je_assign(c, a->a, nf, v);
        if (!rc)
            rc = hr__je_exec_body(c, n->b, nf);
        hr__je_frame_free(c, nf);
        return rc;
    }
    default:
        return hr__jerr(c, n, HR_EFORMAT, "internal: node %d is not a statement", n->kind);
    }
}

int hr__je_exec_body(hr_jctx *c, const hr_jnode *n, hr_jframe *f) {
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
    if (!(c.o.max_seconds > 0))
        c.o.max_seconds = 2;
    c.cpu_end = hr_thread_cpu() + c.o.max_seconds;
    hr_jbuf buf;
    hr__jbuf_init(&buf, c.o.max_output);
    c.out = &buf;
    c.namespaces = hr__jv_list(0);
    hr_jframe *top = hr__je_frame_new(&c, NULL, NULL);
    int rc = hr__jv_oom(c.namespaces) || !top ? hr_err(err, HR_ENOMEM, "out of memory") : 0;
    if (!rc)
        rc = hr__je_exec_body(&c, t->body, top);
    if (rc == HR_JE_BREAK || rc == HR_JE_CONTINUE)
        rc = 0;
    if (!rc && buf.failed)
        rc = hr_err(err, HR_ERANGE, "template output larger than %zu bytes", c.o.max_output);
    hr__je_frame_free(&c, top);
    while (c.dead) {
        hr_jframe *d = c.dead;
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
