/* Jinja parser: tokens -> syntax tree. A recursive-descent copy of the
 * grammar in jinja2's parser.py (precedence, tuple rules, test arguments,
 * call arguments, assignment targets), with a bounded nesting depth. */
#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_lex.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

#define MAX_NEST 200

typedef struct parser {
    hr_jinja *t;
    const hr_jtok *tok;
    size_t i, n;
    hr_error *err;
    int rc;
    int depth;
    int soft;     /* inside an if / inline if of the current frame */
    int in_loop;  /* break/continue allowed */
    hr_jnode *macro; /* innermost macro being parsed: op gets HR_JN_USES_* */
} parser;

/* ---- helpers ------------------------------------------------------------- */

void hr__jinja_where(const hr_jinja *t, long pos, int *line, int *col) {
    hr__jlex_linecol(t->src, t->src_len, pos, line, col);
}

static hr_jnode *fail_at(parser *p, int code, long pos, const char *fmt, const char *arg) {
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

static const hr_jtok *cur(parser *p) { return &p->tok[p->i]; }
static const hr_jtok *look(parser *p) {
    return &p->tok[p->i + 1 < p->n ? p->i + 1 : p->i];
}
static void advance(parser *p) {
    if (p->i + 1 < p->n)
        p->i++;
}

static int is_op(const hr_jtok *t, int op) { return t->type == HR_JT_OP && t->op == op; }
static int is_name(const hr_jtok *t, const char *name) {
    return t->type == HR_JT_NAME && t->len == strlen(name) && !memcmp(t->s, name, t->len);
}

static const char *describe(const hr_jtok *t, char *buf, size_t n) {
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

static hr_jnode *unexpected(parser *p, const char *expected) {
    char buf[64], msg[160];
    snprintf(msg, sizeof msg, "expected %s, got %s", expected,
             describe(cur(p), buf, sizeof buf));
    return fail_at(p, HR_EFORMAT, cur(p)->pos, "%s", msg);
}

static int expect_op(parser *p, int op, const char *what) {
    if (!is_op(cur(p), op)) {
        unexpected(p, what);
        return 0;
    }
    advance(p);
    return 1;
}

static int expect_type(parser *p, int type, const char *what) {
    if (cur(p)->type != type) {
        unexpected(p, what);
        return 0;
    }
    advance(p);
    return 1;
}

static hr_jnode *node(parser *p, int kind, long pos) {
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

static int set_name(parser *p, hr_jnode *nd, const char *s, size_t len) {
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

static int set_str(parser *p, hr_jnode *nd, const char *s, size_t len) {
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

static int enter(parser *p) {
    if (++p->depth > MAX_NEST) {
        fail_at(p, HR_ERANGE, cur(p)->pos, "template nested too deeply (more than %s levels)",
                "200");
        return 0;
    }
    return 1;
}

/* Append to a singly linked list kept as (head, tail). */
static void append(hr_jnode **head, hr_jnode **tail, hr_jnode *n) {
    if (*tail)
        (*tail)->next = n;
    else
        *head = n;
    *tail = n;
}

/* ---- expressions ------------------------------------------------------- */

static hr_jnode *parse_expression(parser *p, int with_condexpr);
static hr_jnode *parse_tuple(parser *p, int simplified, int with_condexpr,
                             const char *extra_end, int explicit_parens);
static hr_jnode *parse_unary(parser *p, int with_filter);
static hr_jnode *parse_primary(parser *p);
static hr_jnode *parse_postfix(parser *p, hr_jnode *n);
static hr_jnode *parse_filter(parser *p, hr_jnode *n, int start_inline);

/* (args, kwargs) of a call; the list goes to *args. */
static int parse_call_args(parser *p, hr_jnode **args) {
    hr_jnode *tail = NULL;
    int require_comma = 0, seen_kw = 0;
    long start = cur(p)->pos;
    if (!expect_op(p, HR_JOP_LPAREN, "'('"))
        return 0;
    while (!is_op(cur(p), HR_JOP_RPAREN)) {
        if (p->rc)
            return 0;
        if (require_comma) {
            if (!expect_op(p, HR_JOP_COMMA, "','"))
                return 0;
            if (is_op(cur(p), HR_JOP_RPAREN))
                break;
        }
        if (is_op(cur(p), HR_JOP_MUL) || is_op(cur(p), HR_JOP_POW)) {
            fail_at(p, HR_EUNSUPPORTED, cur(p)->pos,
                    "not supported yet: *args / **kwargs in calls%s", NULL);
            return 0;
        }
        hr_jnode *a;
        if (cur(p)->type == HR_JT_NAME && is_op(look(p), HR_JOP_ASSIGN)) {
            a = node(p, HR_JN_KWARG, cur(p)->pos);
            if (!a || !set_name(p, a, cur(p)->s, cur(p)->len))
                return 0;
            advance(p);
            advance(p);
            a->a = parse_expression(p, 1);
            seen_kw = 1;
        } else {
            if (seen_kw) {
                fail_at(p, HR_EFORMAT, start, "invalid syntax for function call expression%s",
                        NULL);
                return 0;
            }
            a = parse_expression(p, 1);
        }
        if (!a || p->rc)
            return 0;
        append(args, &tail, a);
        require_comma = 1;
    }
    return expect_op(p, HR_JOP_RPAREN, "')'");
}

static hr_jnode *parse_subscribed(parser *p) {
    long pos = cur(p)->pos;
    hr_jnode *args[3] = {NULL, NULL, NULL};
    if (is_op(cur(p), HR_JOP_COLON)) {
        advance(p);
    } else {
        hr_jnode *n = parse_expression(p, 1);
        if (!n || !is_op(cur(p), HR_JOP_COLON))
            return n;
        advance(p);
        args[0] = n;
    }
    if (is_op(cur(p), HR_JOP_COLON)) {
        /* stop omitted */
    } else if (!is_op(cur(p), HR_JOP_RBRACKET) && !is_op(cur(p), HR_JOP_COMMA)) {
        args[1] = parse_expression(p, 1);
    }
    if (is_op(cur(p), HR_JOP_COLON)) {
        advance(p);
        if (!is_op(cur(p), HR_JOP_RBRACKET) && !is_op(cur(p), HR_JOP_COMMA))
            args[2] = parse_expression(p, 1);
    }
    hr_jnode *s = node(p, HR_JN_SLICE, pos);
    if (s) {
        s->b = args[0];
        s->c = args[1];
        s->d = args[2];
    }
    return s;
}

static hr_jnode *parse_subscript(parser *p, hr_jnode *obj) {
    const hr_jtok *t = cur(p);
    long pos = t->pos;
    advance(p);
    if (t->op == HR_JOP_DOT) {
        const hr_jtok *a = cur(p);
        advance(p);
        if (a->type == HR_JT_NAME) {
            hr_jnode *n = node(p, HR_JN_GETATTR, pos);
            if (!n || !set_name(p, n, a->s, a->len))
                return NULL;
            n->a = obj;
            return n;
        }
        if (a->type != HR_JT_INT)
            return fail_at(p, HR_EFORMAT, a->pos, "expected name or number%s", NULL);
        hr_jnode *c = node(p, HR_JN_CONST, a->pos), *n = node(p, HR_JN_GETITEM, pos);
        if (!n)
            return NULL;
        c->val = hr__jv_int(a->i);
        n->a = obj;
        n->b = c;
        return n;
    }
    /* [ ... ] */
    hr_jnode *head = NULL, *tail = NULL;
    int count = 0;
    while (!is_op(cur(p), HR_JOP_RBRACKET)) {
        if (p->rc)
            return NULL;
        if (count && !expect_op(p, HR_JOP_COMMA, "','"))
            return NULL;
        hr_jnode *s = parse_subscribed(p);
        if (!s)
            return NULL;
        append(&head, &tail, s);
        count++;
    }
    advance(p);
    if (!count)
        return fail_at(p, HR_EFORMAT, pos, "expected an expression in []%s", NULL);
    hr_jnode *key = head;
    if (count > 1) {
        key = node(p, HR_JN_TUPLE, pos);
        if (!key)
            return NULL;
        key->args = head;
    }
    hr_jnode *n = node(p, key->kind == HR_JN_SLICE ? HR_JN_SLICE : HR_JN_GETITEM, pos);
    if (!n)
        return NULL;
    if (key->kind == HR_JN_SLICE) {
        n->b = key->b;
        n->c = key->c;
        n->d = key->d;
    } else {
        n->b = key;
    }
    n->a = obj;
    return n;
}

static hr_jnode *parse_postfix(parser *p, hr_jnode *n) {
    int k = 0;
    while (n && !p->rc && enter(p)) {
        k++;
        const hr_jtok *t = cur(p);
        if (is_op(t, HR_JOP_DOT) || is_op(t, HR_JOP_LBRACKET)) {
            n = parse_subscript(p, n);
        } else if (is_op(t, HR_JOP_LPAREN)) {
            hr_jnode *c = node(p, HR_JN_CALL, n->pos); /* errors point at the callee */
            if (!c)
                return NULL;
            c->a = n;
            if (!parse_call_args(p, &c->args))
                return NULL;
            n = c;
        } else {
            break;
        }
    }
    p->depth -= k;
    return p->rc ? NULL : n;
}

static int dotted_name(parser *p, hr_jnode *n) {
    const hr_jtok *t = cur(p);
    if (t->type != HR_JT_NAME) {
        unexpected(p, "a name");
        return 0;
    }
    size_t start = (size_t)(t->s - p->t->src), end = start + t->len;
    advance(p);
    while (is_op(cur(p), HR_JOP_DOT)) {
        advance(p);
        if (cur(p)->type != HR_JT_NAME) {
            unexpected(p, "a name");
            return 0;
        }
        end = (size_t)(cur(p)->s - p->t->src) + cur(p)->len;
        advance(p);
    }
    return set_name(p, n, p->t->src + start, end - start);
}

static hr_jnode *parse_filter(parser *p, hr_jnode *n, int start_inline) {
    int k = 0;
    while ((is_op(cur(p), HR_JOP_PIPE) || start_inline) && !p->rc && enter(p)) {
        k++;
        if (!start_inline)
            advance(p);
        hr_jnode *f = node(p, HR_JN_FILTER, cur(p)->pos);
        if (!f || !dotted_name(p, f))
            return NULL;
        f->a = n;
        f->soft = (uint8_t)(p->soft > 0);
        if (!f->soft && !hr__jinja_filter_known(f->name))
            return fail_at(p, HR_EFORMAT, f->pos, "no filter named '%s'", f->name);
        if (is_op(cur(p), HR_JOP_LPAREN) && !parse_call_args(p, &f->args))
            return NULL;
        n = f;
        start_inline = 0;
    }
    p->depth -= k;
    return p->rc ? NULL : n;
}

static hr_jnode *parse_test(parser *p, hr_jnode *target) {
    long pos = cur(p)->pos;
    advance(p); /* is */
    int negated = 0;
    if (is_name(cur(p), "not")) {
        advance(p);
        negated = 1;
    }
    hr_jnode *t = node(p, HR_JN_TEST, pos);
    if (!t || !dotted_name(p, t))
        return NULL;
    t->a = target;
    t->soft = (uint8_t)(p->soft > 0);
    if (!t->soft && !hr__jinja_test_known(t->name))
        return fail_at(p, HR_EFORMAT, pos, "no test named '%s'", t->name);
    const hr_jtok *c = cur(p);
    if (is_op(c, HR_JOP_LPAREN)) {
        if (!parse_call_args(p, &t->args))
            return NULL;
    } else if ((c->type == HR_JT_NAME || c->type == HR_JT_STRING || c->type == HR_JT_INT ||
                c->type == HR_JT_FLOAT || is_op(c, HR_JOP_LPAREN) ||
                is_op(c, HR_JOP_LBRACKET) || is_op(c, HR_JOP_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            return fail_at(p, HR_EFORMAT, c->pos, "you cannot chain multiple tests with is%s",
                           NULL);
        hr_jnode *arg = parse_postfix(p, parse_primary(p));
        if (!arg)
            return NULL;
        t->args = arg;
    }
    if (negated) {
        hr_jnode *n = node(p, HR_JN_NOT, pos);
        if (!n)
            return NULL;
        n->a = t;
        return n;
    }
    return t;
}

static hr_jnode *parse_filter_expr(parser *p, hr_jnode *n) {
    int k = 0;
    while (n && !p->rc && enter(p)) {
        k++;
        const hr_jtok *t = cur(p);
        if (is_op(t, HR_JOP_PIPE))
            n = parse_filter(p, n, 0);
        else if (is_name(t, "is"))
            n = parse_test(p, n);
        else if (is_op(t, HR_JOP_LPAREN))
            n = parse_postfix(p, n);
        else
            break;
    }
    p->depth -= k;
    return p->rc ? NULL : n;
}

static hr_jnode *parse_seq(parser *p, int kind, int close, long pos) {
    hr_jnode *l = node(p, kind, pos), *tail = NULL;
    if (!l)
        return NULL;
    advance(p);
    while (!is_op(cur(p), close)) {
        if (p->rc)
            return NULL;
        if (l->args && !expect_op(p, HR_JOP_COMMA, "','"))
            return NULL;
        if (is_op(cur(p), close))
            break;
        hr_jnode *item;
        if (kind == HR_JN_DICT) {
            item = node(p, HR_JN_PAIR, cur(p)->pos);
            if (!item)
                return NULL;
            item->a = parse_expression(p, 1);
            if (!expect_op(p, HR_JOP_COLON, "':'"))
                return NULL;
            item->b = parse_expression(p, 1);
        } else {
            item = parse_expression(p, 1);
        }
        if (!item || p->rc)
            return NULL;
        append(&l->args, &tail, item);
    }
    advance(p);
    return l;
}

static hr_jnode *parse_primary(parser *p) {
    const hr_jtok *t = cur(p);
    hr_jnode *n;
    if (!enter(p))
        return NULL;
    switch (t->type) {
    case HR_JT_NAME:
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") ||
            is_name(t, "False")) {
            n = node(p, HR_JN_CONST, t->pos);
            if (n)
                n->val = hr__jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n = node(p, HR_JN_CONST, t->pos);
            if (n)
                n->val = hr__jv_none();
        } else {
            n = node(p, HR_JN_NAME, t->pos);
            if (n && !set_name(p, n, t->s, t->len))
                n = NULL;
            if (n && p->macro && !strcmp(n->name, "varargs"))
                p->macro->op |= HR_JN_USES_VARARGS;
            if (n && p->macro && !strcmp(n->name, "kwargs"))
                p->macro->op |= HR_JN_USES_KWARGS;
        }
        advance(p);
        break;
    case HR_JT_STRING: {
        /* adjacent literals concatenate */
        hr_jbuf b;
        hr__jbuf_init(&b, 0);
        long pos = t->pos;
        while (cur(p)->type == HR_JT_STRING) {
            hr__jbuf_put(&b, cur(p)->s, cur(p)->len);
            advance(p);
        }
        n = node(p, HR_JN_CONST, pos);
        if (b.failed)
            p->rc = hr_err(p->err, HR_ENOMEM, "out of memory");
        if (n && !p->rc)
            set_str(p, n, b.p ? b.p : "", b.len);
        hr__jbuf_free(&b);
        break;
    }
    case HR_JT_INT:
    case HR_JT_FLOAT:
        n = node(p, HR_JN_CONST, t->pos);
        if (n)
            n->val = t->type == HR_JT_INT ? hr__jv_int(t->i) : hr__jv_float(t->f);
        advance(p);
        break;
    case HR_JT_OP:
        if (t->op == HR_JOP_LPAREN) {
            advance(p);
            n = parse_tuple(p, 0, 1, NULL, 1);
            if (n && !expect_op(p, HR_JOP_RPAREN, "')'"))
                n = NULL;
            break;
        }
        if (t->op == HR_JOP_LBRACKET) {
            n = parse_seq(p, HR_JN_LIST, HR_JOP_RBRACKET, t->pos);
            break;
        }
        if (t->op == HR_JOP_LBRACE) {
            n = parse_seq(p, HR_JN_DICT, HR_JOP_RBRACE, t->pos);
            break;
        }
        /* fall through */
    default: {
        char buf[64];
        n = fail_at(p, HR_EFORMAT, t->pos, "unexpected %s", describe(t, buf, sizeof buf));
    }
    }
    p->depth--;
    return p->rc ? NULL : n;
}

static hr_jnode *parse_unary(parser *p, int with_filter) {
    const hr_jtok *t = cur(p);
    hr_jnode *n;
    if (!enter(p))
        return NULL;
    if (is_op(t, HR_JOP_SUB) || is_op(t, HR_JOP_ADD)) {
        advance(p);
        n = node(p, t->op == HR_JOP_SUB ? HR_JN_NEG : HR_JN_POS, t->pos);
        if (n)
            n->a = parse_unary(p, 0);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter)
        n = parse_filter_expr(p, n);
    p->depth--;
    return p->rc ? NULL : n;
}

/* Left-deep chains (a + b + c ...) count toward the nesting limit: the
 * interpreter walks them recursively. */
static hr_jnode *binop(parser *p, int op, long pos, hr_jnode *a, hr_jnode *b) {
    hr_jnode *n = node(p, HR_JN_BINOP, pos);
    if (!n || !a || !b)
        return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static hr_jnode *parse_pow(parser *p) {
    hr_jnode *l = parse_unary(p, 1);
    int k = 0;
    while (l && is_op(cur(p), HR_JOP_POW) && enter(p)) {
        k++;
        long pos = cur(p)->pos;
        advance(p);
        l = binop(p, HR_JOP_POW, pos, l, parse_unary(p, 1));
    }
    p->depth -= k;
    return l;
}

static hr_jnode *parse_math2(parser *p) {
    hr_jnode *l = parse_pow(p);
    int k = 0;
    while (l && cur(p)->type == HR_JT_OP &&
           (cur(p)->op == HR_JOP_MUL || cur(p)->op == HR_JOP_DIV ||
            cur(p)->op == HR_JOP_FLOORDIV || cur(p)->op == HR_JOP_MOD) && enter(p)) {
        k++;
        int op = cur(p)->op;
        long pos = cur(p)->pos;
        advance(p);
        l = binop(p, op, pos, l, parse_pow(p));
    }
    p->depth -= k;
    return l;
}

static hr_jnode *parse_concat(parser *p) {
    hr_jnode *first = parse_math2(p);
    if (!first || !is_op(cur(p), HR_JOP_TILDE))
        return first;
    hr_jnode *c = node(p, HR_JN_CONCAT, cur(p)->pos), *tail = NULL;
    if (!c)
        return NULL;
    append(&c->args, &tail, first);
    while (is_op(cur(p), HR_JOP_TILDE)) {
        advance(p);
        hr_jnode *n = parse_math2(p);
        if (!n)
            return NULL;
        append(&c->args, &tail, n);
    }
    return c;
}

static hr_jnode *parse_math1(parser *p) {
    hr_jnode *l = parse_concat(p);
    int k = 0;
    while (l && (is_op(cur(p), HR_JOP_ADD) || is_op(cur(p), HR_JOP_SUB)) && enter(p)) {
        k++;
        int op = cur(p)->op;
        long pos = cur(p)->pos;
        advance(p);
        l = binop(p, op, pos, l, parse_concat(p));
    }
    p->depth -= k;
    return l;
}

static hr_jnode *parse_compare(parser *p) {
    long pos = cur(p)->pos;
    hr_jnode *expr = parse_math1(p), *head = NULL, *tail = NULL;
    while (expr && !p->rc) {
        const hr_jtok *t = cur(p);
        int op;
        if (t->type == HR_JT_OP && t->op >= HR_JOP_EQ && t->op <= HR_JOP_LTEQ) {
            op = t->op;
            advance(p);
        } else if (is_name(t, "in")) {
            op = HR_JN_IN;
            advance(p);
        } else if (is_name(t, "not") && is_name(look(p), "in")) {
            op = HR_JN_NOTIN;
            advance(p);
            advance(p);
        } else {
            break;
        }
        hr_jnode *o = node(p, HR_JN_OPERAND, t->pos);
        if (!o)
            return NULL;
        o->op = (uint8_t)op;
        o->a = parse_math1(p);
        if (!o->a)
            return NULL;
        append(&head, &tail, o);
    }
    if (!head || !expr)
        return p->rc ? NULL : expr;
    hr_jnode *c = node(p, HR_JN_COMPARE, pos);
    if (c) {
        c->a = expr;
        c->args = head;
    }
    return c;
}

static hr_jnode *parse_not(parser *p) {
    if (is_name(cur(p), "not")) {
        hr_jnode *n = node(p, HR_JN_NOT, cur(p)->pos);
        advance(p);
        if (!n || !enter(p))
            return NULL;
        n->a = parse_not(p);
        p->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(p);
}

static hr_jnode *parse_and(parser *p) {
    hr_jnode *l = parse_not(p);
    int k = 0;
    while (l && is_name(cur(p), "and") && enter(p)) {
        k++;
        long pos = cur(p)->pos;
        advance(p);
        l = binop(p, HR_JN_AND, pos, l, parse_not(p));
    }
    p->depth -= k;
    return l;
}

static hr_jnode *parse_or(parser *p) {
    hr_jnode *l = parse_and(p);
    int k = 0;
    while (l && is_name(cur(p), "or") && enter(p)) {
        k++;
        long pos = cur(p)->pos;
        advance(p);
        l = binop(p, HR_JN_OR, pos, l, parse_and(p));
    }
    p->depth -= k;
    return l;
}

static hr_jnode *parse_condexpr(parser *p) {
    hr_jnode *e1 = parse_or(p);
    while (e1 && is_name(cur(p), "if")) {
        hr_jnode *c = node(p, HR_JN_COND, cur(p)->pos);
        advance(p);
        if (!c || !enter(p))
            return NULL;
        p->soft++;
        c->b = e1;
        c->a = parse_or(p);
        if (c->a && is_name(cur(p), "else")) {
            advance(p);
            c->c = parse_condexpr(p);
        }
        p->soft--;
        p->depth--;
        if (p->rc)
            return NULL;
        e1 = c;
    }
    return e1;
}

static hr_jnode *parse_expression(parser *p, int with_condexpr) {
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static int tuple_end(parser *p, const char *extra_end) {
    const hr_jtok *t = cur(p);
    return t->type == HR_JT_VAR_END || t->type == HR_JT_BLOCK_END ||
           is_op(t, HR_JOP_RPAREN) || (extra_end && is_name(t, extra_end));
}

static hr_jnode *parse_tuple(parser *p, int simplified, int with_condexpr,
                             const char *extra_end, int explicit_parens) {
    long pos = cur(p)->pos;
    hr_jnode *head = NULL, *tail = NULL;
    int is_tuple = 0, count = 0;
    for (;;) {
        if (count && !expect_op(p, HR_JOP_COMMA, "','"))
            return NULL;
        if (tuple_end(p, extra_end))
            break;
        hr_jnode *n = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        if (!n)
            return NULL;
        append(&head, &tail, n);
        count++;
        if (is_op(cur(p), HR_JOP_COMMA))
            is_tuple = 1;
        else
            break;
    }
    if (!is_tuple) {
        if (count)
            return head;
        if (!explicit_parens)
            return unexpected(p, "an expression");
    }
    hr_jnode *t = node(p, HR_JN_TUPLE, pos);
    if (t)
        t->args = head;
    return t;
}

/* ---- statements ---------------------------------------------------------------- */

static hr_jnode *subparse(parser *p, const char *const *ends);

/* After a statement head: `%}`, a body, and stop at one of ends (the name
 * token stays current). drop: consume the end name too. */
static hr_jnode *parse_body(parser *p, const char *const *ends, int drop) {
    if (is_op(cur(p), HR_JOP_COLON))
        advance(p);
    if (!expect_type(p, HR_JT_BLOCK_END, "end of statement block"))
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
        fail_at(p, HR_EFORMAT, cur(p)->pos, "%s", msg);
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

static hr_jnode *parse_assign_target(parser *p, int name_only, int with_ns,
                                     const char *extra_end) {
    const hr_jtok *t = cur(p);
    hr_jnode *n;
    if (with_ns && t->type == HR_JT_NAME && is_op(look(p), HR_JOP_DOT)) {
        n = node(p, HR_JN_GETATTR, t->pos);
        hr_jnode *base = node(p, HR_JN_NAME, t->pos);
        if (!n || !base || !set_name(p, base, t->s, t->len))
            return NULL;
        advance(p);
        advance(p);
        if (cur(p)->type != HR_JT_NAME)
            return unexpected(p, "a name");
        if (!set_name(p, n, cur(p)->s, cur(p)->len))
            return NULL;
        advance(p);
        n->a = base;
        return n;
    }
    if (name_only) {
        if (t->type != HR_JT_NAME)
            return unexpected(p, "a name");
        n = node(p, HR_JN_NAME, t->pos);
        if (!n || !set_name(p, n, t->s, t->len))
            return NULL;
        advance(p);
    } else {
        n = parse_tuple(p, 1, 1, extra_end, 0);
        if (!n)
            return NULL;
    }
    if (!can_assign(n))
        return fail_at(p, HR_EFORMAT, n->pos, "can't assign to this expression%s", NULL);
    return n;
}

static int parse_signature(parser *p, hr_jnode **params) {
    hr_jnode *tail = NULL;
    int defaults = 0;
    if (!expect_op(p, HR_JOP_LPAREN, "'('"))
        return 0;
    while (!is_op(cur(p), HR_JOP_RPAREN)) {
        if (p->rc)
            return 0;
        if (*params && !expect_op(p, HR_JOP_COMMA, "','"))
            return 0;
        hr_jnode *prm = node(p, HR_JN_PARAM, cur(p)->pos);
        hr_jnode *nm = parse_assign_target(p, 1, 0, NULL);
        if (!prm || !nm)
            return 0;
        prm->name = nm->name;
        nm->name = NULL;
        if (is_op(cur(p), HR_JOP_ASSIGN)) {
            advance(p);
            prm->a = parse_expression(p, 1);
            if (!prm->a)
                return 0;
            defaults = 1;
        } else if (defaults) {
            fail_at(p, HR_EFORMAT, prm->pos, "non-default argument follows default argument%s",
                    NULL);
            return 0;
        }
        append(params, &tail, prm);
    }
    advance(p);
    return 1;
}

/* A body in a new frame: not soft, and (for macros) not inside a loop. */
static hr_jnode *frame_body(parser *p, const char *const *ends, int loop) {
    int soft = p->soft, in_loop = p->in_loop;
    p->soft = 0;
    if (loop >= 0)
        p->in_loop = loop;
    hr_jnode *b = parse_body(p, ends, 1);
    p->soft = soft;
    p->in_loop = in_loop;
    return b;
}

static hr_jnode *parse_for(parser *p, long pos) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const end_for[] = {"endfor", NULL};
    hr_jnode *n = node(p, HR_JN_FOR, pos);
    if (!n)
        return NULL;
    n->a = parse_assign_target(p, 0, 0, "in");
    if (!n->a)
        return NULL;
    if (!is_name(cur(p), "in"))
        return unexpected(p, "'in'");
    advance(p);
    n->b = parse_tuple(p, 0, 0, "recursive", 0);
    if (!n->b)
        return NULL;
    if (is_name(cur(p), "if")) {
        advance(p);
        n->e = parse_expression(p, 1);
        if (!n->e)
            return NULL;
    }
    if (is_name(cur(p), "recursive"))
        return fail_at(p, HR_EUNSUPPORTED, cur(p)->pos, "not supported yet: recursive loops%s",
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

static hr_jnode *parse_if(parser *p, long pos) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const end_if[] = {"endif", NULL};
    hr_jnode *n = node(p, HR_JN_IF, pos), *top = n;
    if (!n)
        return NULL;
    p->soft++;
    for (;;) {
        n->a = parse_tuple(p, 0, 0, NULL, 0);
        if (!n->a)
            break;
        n->b = parse_body(p, ends, 0);
        if (p->rc)
            break;
        if (is_name(cur(p), "elif")) {
            hr_jnode *e = node(p, HR_JN_IF, cur(p)->pos);
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

static hr_jnode *parse_statement(parser *p) {
    const hr_jtok *t = cur(p);
    long pos = t->pos;
    if (t->type != HR_JT_NAME)
        return unexpected(p, "a tag name");
    if (!enter(p))
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
            n = node(p, HR_JN_SET, pos);
            if (n) {
                n->a = target;
                n->b = parse_tuple(p, 0, 1, NULL, 0);
            }
        } else {
            static const char *const ends[] = {"endset", NULL};
            n = node(p, HR_JN_SETBLOCK, pos);
            if (!n)
                goto out;
            n->a = target;
            if (is_op(cur(p), HR_JOP_PIPE))
                n->c = parse_filter(p, NULL, 0);
            n->b = frame_body(p, ends, -1);
        }
    } else if (is_name(t, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        hr_jnode *nm = parse_assign_target(p, 1, 0, NULL);
        n = node(p, HR_JN_MACRO, pos);
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
        n = node(p, HR_JN_CALLBLOCK, pos);
        if (!n)
            goto out;
        if (is_op(cur(p), HR_JOP_LPAREN) && !parse_signature(p, &n->args))
            goto out;
        n->a = parse_expression(p, 1);
        if (n->a && n->a->kind != HR_JN_CALL) {
            n = fail_at(p, HR_EFORMAT, pos, "expected a call after 'call'%s", NULL);
            goto out;
        }
        if (n->a)
            n->b = frame_body(p, ends, 0);
    } else if (is_name(t, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        n = node(p, HR_JN_FILTERBLOCK, pos);
        if (!n)
            goto out;
        n->a = parse_filter(p, NULL, 1);
        if (n->a)
            n->b = frame_body(p, ends, -1);
    } else if (is_name(t, "with")) {
        static const char *const ends[] = {"endwith", NULL};
        n = node(p, HR_JN_WITH, pos);
        hr_jnode *tail = NULL;
        while (n && cur(p)->type != HR_JT_BLOCK_END && !p->rc) {
            if (n->args && !expect_op(p, HR_JOP_COMMA, "','"))
                break;
            hr_jnode *s = node(p, HR_JN_SET, cur(p)->pos);
            if (!s)
                break;
            s->a = parse_assign_target(p, 0, 0, NULL);
            if (!s->a || !expect_op(p, HR_JOP_ASSIGN, "'='"))
                break;
            s->b = parse_expression(p, 1);
            append(&n->args, &tail, s);
        }
        if (n && !p->rc)
            n->b = frame_body(p, ends, -1);
    } else if (is_name(t, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        n = node(p, HR_JN_SCOPE, pos);
        if (n)
            n->b = frame_body(p, ends, -1);
    } else if (is_name(t, "print")) {
        n = node(p, HR_JN_OUTPUT, pos);
        if (n)
            n->a = parse_tuple(p, 0, 1, NULL, 0);
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (!p->in_loop) {
            n = fail_at(p, HR_EFORMAT, pos, "'%s' outside of a loop", is_name(t, "break") ? "break" : "continue");
            goto out;
        }
        n = node(p, is_name(t, "break") ? HR_JN_BREAK : HR_JN_CONTINUE, pos);
    } else if (is_name(t, "block") || is_name(t, "extends") || is_name(t, "include") ||
               is_name(t, "import") || is_name(t, "from") || is_name(t, "autoescape")) {
        char nm[32];
        snprintf(nm, sizeof nm, "%.*s", (int)t->len, t->s);
        n = fail_at(p, HR_EUNSUPPORTED, pos, "not supported yet: the '%s' tag", nm);
    } else {
        char nm[64];
        snprintf(nm, sizeof nm, "%.*s", (int)(t->len < 40 ? t->len : 40), t->s);
        n = fail_at(p, HR_EFORMAT, pos, "encountered unknown tag '%s'", nm);
    }
out:
    p->depth--;
    return p->rc ? NULL : n;
}

static hr_jnode *subparse(parser *p, const char *const *ends) {
    hr_jnode *head = NULL, *tail = NULL;
    while (!p->rc) {
        const hr_jtok *t = cur(p);
        if (t->type == HR_JT_EOF)
            break;
        hr_jnode *n = NULL;
        if (t->type == HR_JT_DATA) {
            n = node(p, HR_JN_DATA, t->pos);
            if (n)
                set_str(p, n, t->s, t->len);
            advance(p);
        } else if (t->type == HR_JT_VAR_BEGIN) {
            advance(p);
            n = node(p, HR_JN_OUTPUT, t->pos);
            if (n)
                n->a = parse_tuple(p, 0, 1, NULL, 0);
            if (!p->rc)
                expect_type(p, HR_JT_VAR_END, "end of print statement");
        } else if (t->type == HR_JT_BLOCK_BEGIN) {
            advance(p);
            for (int k = 0; ends && ends[k]; k++)
                if (is_name(cur(p), ends[k]))
                    return head;
            n = parse_statement(p);
            if (!p->rc)
                expect_type(p, HR_JT_BLOCK_END, "end of statement block");
        } else {
            unexpected(p, "template data or a tag");
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
    parser p = {.t = t, .tok = lx.tok, .n = lx.n, .err = err};
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
