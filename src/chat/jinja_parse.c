/* Jinja parser: tokens -> syntax tree. A recursive-descent copy of the
 * grammar in jinja2's parser.py (precedence, tuple rules, test arguments,
 * call arguments, assignment targets), with a bounded nesting depth. */
#include "chat/jinja_parse.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------- */

void hr__jinja_where(const hr_jinja *t, long pos, int *line, int *col) {
    hr__jlex_linecol(t->src, t->src_len, pos, line, col);
}

hr_jnode *hr__jp_fail(hr_jparser *p, int code, long pos, const char *fmt, const char *arg) {
    if (p->rc)
        return NULL;
    char what[256];
    snprintf(what, sizeof what, fmt, arg ? arg : "");
    int line, col;
    hr__jinja_where(p->t, pos, &line, &col);
    p->rc = hr_err(p->err, code, "template syntax error at line %d, column %d: %s", line,
                   col, what);
    if (p->err)
        p->err->pos = pos;
    return NULL;
}

const char *hr__jp_describe(const hr_jtok *t, char *buf, size_t n) {
    switch (t->type) {
    case HR_JT_EOF: return "end of template";
    case HR_JT_VAR_END: return "end of print statement";
    case HR_JT_BLOCK_END: return "end of statement block";
    case HR_JT_NAME:
    case HR_JT_DATA:
        snprintf(buf, n, "'%.*s'", (int)(t->len < 40 ? t->len : 40), t->s);
        return buf;
    case HR_JT_STRING: return "string";
    case HR_JT_INT: return "integer";
    case HR_JT_FLOAT: return "float";
    case HR_JT_OP: return "operator";
    default: return "token";
    }
}

hr_jnode *hr__jp_unexpected(hr_jparser *p, const char *expected) {
    char buf[64], msg[160];
    snprintf(msg, sizeof msg, "expected %s, got %s", expected,
             hr__jp_describe(cur(p), buf, sizeof buf));
    return hr__jp_fail(p, HR_EFORMAT, cur(p)->pos, "%s", msg);
}

int hr__jp_expect_op(hr_jparser *p, int op, const char *what) {
    if (!is_op(cur(p), op)) {
        hr__jp_unexpected(p, what);
        return 0;
    }
    advance(p);
    return 1;
}

int hr__jp_expect_type(hr_jparser *p, int type, const char *what) {
    if (cur(p)->type != type) {
        hr__jp_unexpected(p, what);
        return 0;
    }
    advance(p);
    return 1;
}

hr_jnode *hr__jp_node(hr_jparser *p, int kind, long pos) {
    if (p->rc)
        return NULL;
    hr_jinja *t = p->t;
    if (t->n_nodes == t->cap_nodes) {
        size_t cap = t->cap_nodes ? t->cap_nodes * 2 : 256;
        hr_jnode **v = realloc(t->nodes, cap * sizeof *v);
        if (!v) {
            p->rc = hr_err(p->err, HR_ENOMEM, "out of memory");
            return NULL;
        }
        t->nodes = v;
        t->cap_nodes = cap;
    }
    hr_jnode *nd = calloc(1, sizeof *nd);
    if (!nd) {
        p->rc = hr_err(p->err, HR_ENOMEM, "out of memory");
        return NULL;
    }
    nd->kind = (uint8_t)kind;
    nd->pos = pos;
    t->nodes[t->n_nodes++] = nd;
    return nd;
}

int hr__jp_set_name(hr_jparser *p, hr_jnode *nd, const char *s, size_t len) {
    char *c = malloc(len + 1);
    if (!c) {
        p->rc = hr_err(p->err, HR_ENOMEM, "out of memory");
        return 0;
    }
    memcpy(c, s, len);
    c[len] = 0;
    nd->name = c;
    return 1;
}

int hr__jp_set_str(hr_jparser *p, hr_jnode *nd, const char *s, size_t len) {
    hr_jv v = hr__jv_str(s, len);
    if (hr__jv_oom(v)) {
        p->rc = hr_err(p->err, HR_ENOMEM, "out of memory");
        return 0;
    }
    v.u.s->rc = -1; /* immortal: renders on many threads read it */
    hr__jv_strlen(v);
    nd->val = v;
    return 1;
}

int hr__jp_enter(hr_jparser *p) {
    if (++p->depth > HR_JP_MAX_NEST) {
        hr__jp_fail(p, HR_ERANGE, cur(p)->pos, "template nested too deeply (more than %s levels)",
                "200");
        return 0;
    }
    return 1;
}

/* ---- statements ---------------------------------------------------------------- */

static hr_jnode *subparse(hr_jparser *p, const char *const *ends);

/* After a statement head: `%}`, a body, and stop at one of ends (the name
 * token stays current). drop: consume the end name too. */
static hr_jnode *parse_body(hr_jparser *p, const char *const *ends, int drop) {
    if (is_op(cur(p), HR_JOP_COLON))
        advance(p);
    if (!hr__jp_expect_type(p, HR_JT_BLOCK_END, "end of statement block"))
        return NULL;
    hr_jnode *body = subparse(p, ends);
    if (p->rc)
        return NULL;
    if (cur(p)->type == HR_JT_EOF) {
        char msg[160];
        int k = snprintf(msg, sizeof msg, "unexpected end of template; looking for '%s'", ends[0]);
        for (int e = 1; ends[e] && k > 0 && (size_t)k < sizeof msg; e++)
            k += snprintf(msg + k, sizeof msg - (size_t)k, "%s'%s'", ends[e + 1] ? ", " : " or ",
                          ends[e]);
        hr__jp_fail(p, HR_EFORMAT, cur(p)->pos, "%s", msg);
        return NULL;
    }
    if (drop)
        advance(p);
    return body;
}

static int can_assign(hr_jnode *n) {
    if (n->kind == HR_JN_NAME)
        return strcmp(n->name, "true") && strcmp(n->name, "false") && strcmp(n->name, "none") &&
               strcmp(n->name, "True") && strcmp(n->name, "False") && strcmp(n->name, "None");
    if (n->kind == HR_JN_TUPLE) {
        for (hr_jnode *a = n->args; a; a = a->next)
            if (!can_assign(a))
                return 0;
        return 1;
    }
    return 0;
}

static hr_jnode *parse_assign_target(hr_jparser *p, int name_only, int with_ns,
                                     const char *extra_end) {
    const hr_jtok *t = cur(p);
    hr_jnode *n;
    if (with_ns && t->type == HR_JT_NAME && is_op(look(p), HR_JOP_DOT)) {
        n = hr__jp_node(p, HR_JN_GETATTR, t->pos);
        hr_jnode *base = hr__jp_node(p, HR_JN_NAME, t->pos);
        if (!n || !base || !hr__jp_set_name(p, base, t->s, t->len))
            return NULL;
        advance(p);
        advance(p);
        if (cur(p)->type != HR_JT_NAME)
            return hr__jp_unexpected(p, "a name");
        if (!hr__jp_set_name(p, n, cur(p)->s, cur(p)->len))
            return NULL;
        advance(p);
        n->a = base;
        return n;
    }
    if (name_only) {
        if (t->type != HR_JT_NAME)
            return hr__jp_unexpected(p, "a name");
        n = hr__jp_node(p, HR_JN_NAME, t->pos);
        if (!n || !hr__jp_set_name(p, n, t->s, t->len))
            return NULL;
        advance(p);
    } else {
        n = hr__jp_tuple(p, 1, 1, extra_end, 0);
        if (!n)
            return NULL;
    }
    if (!can_assign(n))
        return hr__jp_fail(p, HR_EFORMAT, n->pos, "can't assign to this expression%s", NULL);
    return n;
}

static int parse_signature(hr_jparser *p, hr_jnode **params) {
    hr_jnode *tail = NULL;
    int defaults = 0;
    if (!hr__jp_expect_op(p, HR_JOP_LPAREN, "'('"))
        return 0;
    while (!is_op(cur(p), HR_JOP_RPAREN)) {
        if (p->rc)
            return 0;
        if (*params && !hr__jp_expect_op(p, HR_JOP_COMMA, "','"))
            return 0;
        hr_jnode *prm = hr__jp_node(p, HR_JN_PARAM, cur(p)->pos);
        hr_jnode *nm = parse_assign_target(p, 1, 0, NULL);
        if (!prm || !nm)
            return 0;
        prm->name = nm->name;
        nm->name = NULL;
        if (is_op(cur(p), HR_JOP_ASSIGN)) {
            advance(p);
            prm->a = hr__jp_expression(p, 1);
            if (!prm->a)
                return 0;
            defaults = 1;
        } else if (defaults) {
            hr__jp_fail(p, HR_EFORMAT, prm->pos, "non-default argument follows default argument%s",
                    NULL);
            return 0;
        }
        append(params, &tail, prm);
    }
    advance(p);
    return 1;
}

/* A body in a new frame: not soft, and (for macros) not inside a loop. */
static hr_jnode *frame_body(hr_jparser *p, const char *const *ends, int loop) {
    int soft = p->soft, in_loop = p->in_loop;
    p->soft = 0;
    if (loop >= 0)
        p->in_loop = loop;
    hr_jnode *b = parse_body(p, ends, 1);
    p->soft = soft;
    p->in_loop = in_loop;
    return b;
}

static hr_jnode *parse_for(hr_jparser *p, long pos) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const end_for[] = {"endfor", NULL};
    hr_jnode *n = hr__jp_node(p, HR_JN_FOR, pos);
    if (!n)
        return NULL;
    n->a = parse_assign_target(p, 0, 0, "in");
    if (!n->a)
        return NULL;
    if (!is_name(cur(p), "in"))
        return hr__jp_unexpected(p, "'in'");
    advance(p);
    n->b = hr__jp_tuple(p, 0, 0, "recursive", 0);
    if (!n->b)
        return NULL;
    if (is_name(cur(p), "if")) {
        advance(p);
        n->e = hr__jp_expression(p, 1);
        if (!n->e)
            return NULL;
    }
    if (is_name(cur(p), "recursive"))
        return hr__jp_fail(p, HR_EUNSUPPORTED, cur(p)->pos, "not supported yet: recursive loops%s",
                       NULL);
    int soft = p->soft, in_loop = p->in_loop;
    p->soft = 0;
    p->in_loop = 1;
    n->c = parse_body(p, ends, 0);
    p->in_loop = in_loop;
    if (!p->rc && is_name(cur(p), "else")) {
        advance(p);
        n->d = parse_body(p, end_for, 1);
    } else if (!p->rc) {
        advance(p);
    }
    p->soft = soft;
    return p->rc ? NULL : n;
}

static hr_jnode *parse_if(hr_jparser *p, long pos) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const end_if[] = {"endif", NULL};
    hr_jnode *n = hr__jp_node(p, HR_JN_IF, pos), *top = n;
    if (!n)
        return NULL;
    p->soft++;
    for (;;) {
        n->a = hr__jp_tuple(p, 0, 0, NULL, 0);
        if (!n->a)
            break;
        n->b = parse_body(p, ends, 0);
        if (p->rc)
            break;
        if (is_name(cur(p), "elif")) {
            hr_jnode *e = hr__jp_node(p, HR_JN_IF, cur(p)->pos);
            advance(p);
            if (!e)
                break;
            e->op = HR_JN_ELIF;
            n->c = e;
            n = e;
            continue;
        }
        if (is_name(cur(p), "else")) {
            advance(p);
            n->c = parse_body(p, end_if, 1);
        } else {
            advance(p);
        }
        break;
    }
    p->soft--;
    return p->rc ? NULL : top;
}

static hr_jnode *parse_statement(hr_jparser *p) {
    const hr_jtok *t = cur(p);
    long pos = t->pos;
    if (t->type != HR_JT_NAME)
        return hr__jp_unexpected(p, "a tag name");
    if (!hr__jp_enter(p))
        return NULL;
    hr_jnode *n = NULL;
    advance(p);
    if (is_name(t, "if")) {
        n = parse_if(p, pos);
    } else if (is_name(t, "for")) {
        n = parse_for(p, pos);
    } else if (is_name(t, "set")) {
        hr_jnode *target = parse_assign_target(p, 0, 1, NULL);
        if (!target)
            goto out;
        if (is_op(cur(p), HR_JOP_ASSIGN)) {
            advance(p);
            n = hr__jp_node(p, HR_JN_SET, pos);
            if (n) {
                n->a = target;
                n->b = hr__jp_tuple(p, 0, 1, NULL, 0);
            }
        } else {
            static const char *const ends[] = {"endset", NULL};
            n = hr__jp_node(p, HR_JN_SETBLOCK, pos);
            if (!n)
                goto out;
            n->a = target;
            if (is_op(cur(p), HR_JOP_PIPE))
                n->c = hr__jp_filter(p, NULL, 0);
            n->b = frame_body(p, ends, -1);
        }
    } else if (is_name(t, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        hr_jnode *nm = parse_assign_target(p, 1, 0, NULL);
        n = hr__jp_node(p, HR_JN_MACRO, pos);
        if (!nm || !n)
            goto out;
        n->name = nm->name;
        nm->name = NULL;
        hr_jnode *outer = p->macro;
        p->macro = n;
        if (parse_signature(p, &n->args))
            n->b = frame_body(p, ends, 0);
        p->macro = outer;
    } else if (is_name(t, "call")) {
        static const char *const ends[] = {"endcall", NULL};
        n = hr__jp_node(p, HR_JN_CALLBLOCK, pos);
        if (!n)
            goto out;
        if (is_op(cur(p), HR_JOP_LPAREN) && !parse_signature(p, &n->args))
            goto out;
        n->a = hr__jp_expression(p, 1);
        if (n->a && n->a->kind != HR_JN_CALL) {
            n = hr__jp_fail(p, HR_EFORMAT, pos, "expected a call after 'call'%s", NULL);
            goto out;
        }
        if (n->a)
            n->b = frame_body(p, ends, 0);
    } else if (is_name(t, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        n = hr__jp_node(p, HR_JN_FILTERBLOCK, pos);
        if (!n)
            goto out;
        n->a = hr__jp_filter(p, NULL, 1);
        if (n->a)
            n->b = frame_body(p, ends, -1);
    } else if (is_name(t, "with")) {
        static const char *const ends[] = {"endwith", NULL};
        n = hr__jp_node(p, HR_JN_WITH, pos);
        hr_jnode *tail = NULL;
        while (n && cur(p)->type != HR_JT_BLOCK_END && !p->rc) {
            if (n->args && !hr__jp_expect_op(p, HR_JOP_COMMA, "','"))
                break;
            hr_jnode *s = hr__jp_node(p, HR_JN_SET, cur(p)->pos);
            if (!s)
                break;
            s->a = parse_assign_target(p, 0, 0, NULL);
            if (!s->a || !hr__jp_expect_op(p, HR_JOP_ASSIGN, "'='"))
                break;
            s->b = hr__jp_expression(p, 1);
            append(&n->args, &tail, s);
        }
        if (n && !p->rc)
            n->b = frame_body(p, ends, -1);
    } else if (is_name(t, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        n = hr__jp_node(p, HR_JN_SCOPE, pos);
        if (n)
            n->b = frame_body(p, ends, -1);
    } else if (is_name(t, "print")) {
        n = hr__jp_node(p, HR_JN_OUTPUT, pos);
        if (n)
            n->a = hr__jp_tuple(p, 0, 1, NULL, 0);
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (!p->in_loop) {
            n = hr__jp_fail(p, HR_EFORMAT, pos, "'%s' outside of a loop", is_name(t, "break") ? "break" : "continue");
            goto out;
        }
        n = hr__jp_node(p, is_name(t, "break") ? HR_JN_BREAK : HR_JN_CONTINUE, pos);
    } else if (is_name(t, "block") || is_name(t, "extends") || is_name(t, "include") ||
               is_name(t, "import") || is_name(t, "from") || is_name(t, "autoescape")) {
        char nm[32];
        snprintf(nm, sizeof nm, "%.*s", (int)t->len, t->s);
        n = hr__jp_fail(p, HR_EUNSUPPORTED, pos, "not supported yet: the '%s' tag", nm);
    } else {
        char nm[64];
        snprintf(nm, sizeof nm, "%.*s", (int)(t->len < 40 ? t->len : 40), t->s);
        n = hr__jp_fail(p, HR_EFORMAT, pos, "encountered unknown tag '%s'", nm);
    }
out:
    p->depth--;
    return p->rc ? NULL : n;
}

static hr_jnode *subparse(hr_jparser *p, const char *const *ends) {
    hr_jnode *head = NULL, *tail = NULL;
    while (!p->rc) {
        const hr_jtok *t = cur(p);
        if (t->type == HR_JT_EOF)
            break;
        hr_jnode *n = NULL;
        if (t->type == HR_JT_DATA) {
            n = hr__jp_node(p, HR_JN_DATA, t->pos);
            if (n)
                hr__jp_set_str(p, n, t->s, t->len);
            advance(p);
        } else if (t->type == HR_JT_VAR_BEGIN) {
            advance(p);
            n = hr__jp_node(p, HR_JN_OUTPUT, t->pos);
            if (n)
                n->a = hr__jp_tuple(p, 0, 1, NULL, 0);
            if (!p->rc)
                hr__jp_expect_type(p, HR_JT_VAR_END, "end of print statement");
        } else if (t->type == HR_JT_BLOCK_BEGIN) {
            advance(p);
            for (int k = 0; ends && ends[k]; k++)
                if (is_name(cur(p), ends[k]))
                    return head;
            n = parse_statement(p);
            if (!p->rc)
                hr__jp_expect_type(p, HR_JT_BLOCK_END, "end of statement block");
        } else {
            hr__jp_unexpected(p, "template data or a tag");
        }
        if (p->rc)
            return NULL;
        if (n)
            append(&head, &tail, n);
    }
    if (!p->rc && ends && cur(p)->type == HR_JT_EOF)
        return head; /* parse_body reports the missing end tag */
    return p->rc ? NULL : head;
}

/* ---- compile ---------------------------------------------------------------- */

int hr_jinja_compile(hr_jinja **out, const char *src, size_t len, hr_error *err) {
    *out = NULL;
    hr_jinja *t = calloc(1, sizeof *t);
    if (!t)
        return hr_err(err, HR_ENOMEM, "out of memory");
    hr_jlex lx;
    int rc = hr__jlex_run(&lx, src, len, err);
    if (rc) {
        free(t);
        return rc;
    }
    t->src = lx.src;
    t->src_len = lx.src_len;
    hr_jparser p = {.t = t, .tok = lx.tok, .n = lx.n, .err = err};
    t->body = subparse(&p, NULL);
    lx.src = NULL; /* now the template's */
    hr__jlex_free(&lx);
    if (p.rc) {
        hr_jinja_free(t);
        return p.rc;
    }
    *out = t;
    return 0;
}

void hr_jinja_free(hr_jinja *t) {
    if (!t)
        return;
    for (size_t i = 0; i < t->n_nodes; i++) {
        hr_jnode *n = t->nodes[i];
        if ((n->val.type == HR_JV_STR) && n->val.u.s)
            free(n->val.u.s);
        free((char *)n->name);
        free(n);
    }
    free(t->nodes);
    free(t->src);
    free(t);
}
