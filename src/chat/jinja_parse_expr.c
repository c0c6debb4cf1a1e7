/* Jinja parser, expressions: jinja2's precedence climbing (condexpr > or >
 * and > not > compare > math1 (+ -) > concat (~) > math2 (* / // %) > pow >
 * unary > primary with postfix, filters and tests). Left-deep chains count
 * toward the nesting bound, since the interpreter walks them recursively. */
#include "chat/jinja_parse.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>
/* ---- expressions ------------------------------------------------------- */

static hr_jnode *parse_unary(hr_jparser *p, int with_filter);
static hr_jnode *parse_primary(hr_jparser *p);
static hr_jnode *parse_postfix(hr_jparser *p, hr_jnode *n);

/* (args, kwargs) of a call; the list goes to *args. */
static int parse_call_args(hr_jparser *p, hr_jnode **args) {
    hr_jnode *tail = NULL;
    int require_comma = 0, seen_kw = 0;
    long start = cur(p)->pos;
    if (!hr__jp_expect_op(p, HR_JOP_LPAREN, "'('"))
        return 0;
    while (!is_op(cur(p), HR_JOP_RPAREN)) {
        if (p->rc)
            return 0;
        if (require_comma) {
            if (!hr__jp_expect_op(p, HR_JOP_COMMA, "','"))
                return 0;
            if (is_op(cur(p), HR_JOP_RPAREN))
                break;
        }
        if (is_op(cur(p), HR_JOP_MUL) || is_op(cur(p), HR_JOP_POW)) {
            hr__jp_fail(p, HR_EUNSUPPORTED, cur(p)->pos,
                    "not supported yet: *args / **kwargs in calls%s", NULL);
            return 0;
        }
        hr_jnode *a;
        if (cur(p)->type == HR_JT_NAME && is_op(look(p), HR_JOP_ASSIGN)) {
            a = hr__jp_node(p, HR_JN_KWARG, cur(p)->pos);
            if (!a || !hr__jp_set_name(p, a, cur(p)->s, cur(p)->len))
                return 0;
            advance(p);
            advance(p);
            a->a = hr__jp_expression(p, 1);
            seen_kw = 1;
        } else {
            if (seen_kw) {
                hr__jp_fail(p, HR_EFORMAT, start, "invalid syntax for function call expression%s",
                        NULL);
                return 0;
            }
            a = hr__jp_expression(p, 1);
        }
        if (!a || p->rc)
            return 0;
        append(args, &tail, a);
        require_comma = 1;
    }
    return hr__jp_expect_op(p, HR_JOP_RPAREN, "')'");
}

static hr_jnode *parse_subscribed(hr_jparser *p) {
    long pos = cur(p)->pos;
    hr_jnode *args[3] = {NULL, NULL, NULL};
    if (is_op(cur(p), HR_JOP_COLON)) {
        advance(p);
    } else {
        hr_jnode *n = hr__jp_expression(p, 1);
        if (!n || !is_op(cur(p), HR_JOP_COLON))
            return n;
        advance(p);
        args[0] = n;
    }
    if (is_op(cur(p), HR_JOP_COLON)) {
        /* stop omitted */
    } else if (!is_op(cur(p), HR_JOP_RBRACKET) && !is_op(cur(p), HR_JOP_COMMA)) {
        args[1] = hr__jp_expression(p, 1);
    }
    if (is_op(cur(p), HR_JOP_COLON)) {
        advance(p);
        if (!is_op(cur(p), HR_JOP_RBRACKET) && !is_op(cur(p), HR_JOP_COMMA))
            args[2] = hr__jp_expression(p, 1);
    }
    hr_jnode *s = hr__jp_node(p, HR_JN_SLICE, pos);
    if (s) {
        s->b = args[0];
        s->c = args[1];
        s->d = args[2];
    }
    return s;
}

static hr_jnode *parse_subscript(hr_jparser *p, hr_jnode *obj) {
    const hr_jtok *t = cur(p);
    long pos = t->pos;
    advance(p);
    if (t->op == HR_JOP_DOT) {
        const hr_jtok *a = cur(p);
        advance(p);
        if (a->type == HR_JT_NAME) {
            hr_jnode *n = hr__jp_node(p, HR_JN_GETATTR, pos);
            if (!n || !hr__jp_set_name(p, n, a->s, a->len))
                return NULL;
            n->a = obj;
            return n;
        }
        if (a->type != HR_JT_INT)
            return hr__jp_fail(p, HR_EFORMAT, a->pos, "expected name or number%s", NULL);
        hr_jnode *c = hr__jp_node(p, HR_JN_CONST, a->pos), *n = hr__jp_node(p, HR_JN_GETITEM, pos);
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
        if (count && !hr__jp_expect_op(p, HR_JOP_COMMA, "','"))
            return NULL;
        hr_jnode *s = parse_subscribed(p);
        if (!s)
            return NULL;
        append(&head, &tail, s);
        count++;
    }
    advance(p);
    if (!count)
        return hr__jp_fail(p, HR_EFORMAT, pos, "expected an expression in []%s", NULL);
    hr_jnode *key = head;
    if (count > 1) {
        /* `x[1:2, 3]` would need slice values (jinja2's own code generator
         * fails on it too); a slice node has no object to slice here. */
        for (const hr_jnode *s = head; s; s = s->next)
            if (s->kind == HR_JN_SLICE)
                return hr__jp_fail(p, HR_EUNSUPPORTED, s->pos,
                                   "not supported yet: a slice inside a tuple subscript%s", NULL);
        key = hr__jp_node(p, HR_JN_TUPLE, pos);
        if (!key)
            return NULL;
        key->args = head;
    }
    hr_jnode *n = hr__jp_node(p, key->kind == HR_JN_SLICE ? HR_JN_SLICE : HR_JN_GETITEM, pos);
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

static hr_jnode *parse_postfix(hr_jparser *p, hr_jnode *n) {
    int k = 0;
    while (n && !p->rc && hr__jp_enter(p)) {
        k++;
        const hr_jtok *t = cur(p);
        if (is_op(t, HR_JOP_DOT) || is_op(t, HR_JOP_LBRACKET)) {
            n = parse_subscript(p, n);
        } else if (is_op(t, HR_JOP_LPAREN)) {
            hr_jnode *c = hr__jp_node(p, HR_JN_CALL, n->pos); /* errors point at the callee */
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

static int dotted_name(hr_jparser *p, hr_jnode *n) {
    const hr_jtok *t = cur(p);
    if (t->type != HR_JT_NAME) {
        hr__jp_unexpected(p, "a name");
        return 0;
    }
    size_t start = (size_t)(t->s - p->t->src), end = start + t->len;
    advance(p);
    while (is_op(cur(p), HR_JOP_DOT)) {
        advance(p);
        if (cur(p)->type != HR_JT_NAME) {
            hr__jp_unexpected(p, "a name");
            return 0;
        }
        end = (size_t)(cur(p)->s - p->t->src) + cur(p)->len;
        advance(p);
    }
    return hr__jp_set_name(p, n, p->t->src + start, end - start);
}

hr_jnode *hr__jp_filter(hr_jparser *p, hr_jnode *n, int start_inline) {
    int k = 0;
    while ((is_op(cur(p), HR_JOP_PIPE) || start_inline) && !p->rc && hr__jp_enter(p)) {
        k++;
        if (!start_inline)
            advance(p);
        hr_jnode *f = hr__jp_node(p, HR_JN_FILTER, cur(p)->pos);
        if (!f || !dotted_name(p, f))
            return NULL;
        f->a = n;
        f->soft = (uint8_t)(p->soft > 0);
        if (!f->soft && !hr__jinja_filter_known(f->name))
            return hr__jp_fail(p, HR_EFORMAT, f->pos, "no filter named '%s'", f->name);
        if (is_op(cur(p), HR_JOP_LPAREN) && !parse_call_args(p, &f->args))
            return NULL;
        n = f;
        start_inline = 0;
    }
    p->depth -= k;
    return p->rc ? NULL : n;
}

static hr_jnode *parse_test(hr_jparser *p, hr_jnode *target) {
    long pos = cur(p)->pos;
    advance(p); /* is */
    int negated = 0;
    if (is_name(cur(p), "not")) {
        advance(p);
        negated = 1;
    }
    hr_jnode *t = hr__jp_node(p, HR_JN_TEST, pos);
    if (!t || !dotted_name(p, t))
        return NULL;
    t->a = target;
    t->soft = (uint8_t)(p->soft > 0);
    if (!t->soft && !hr__jinja_test_known(t->name))
        return hr__jp_fail(p, HR_EFORMAT, pos, "no test named '%s'", t->name);
    const hr_jtok *c = cur(p);
    if (is_op(c, HR_JOP_LPAREN)) {
        if (!parse_call_args(p, &t->args))
            return NULL;
    } else if ((c->type == HR_JT_NAME || c->type == HR_JT_STRING || c->type == HR_JT_INT ||
                c->type == HR_JT_FLOAT || is_op(c, HR_JOP_LPAREN) ||
                is_op(c, HR_JOP_LBRACKET) || is_op(c, HR_JOP_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            return hr__jp_fail(p, HR_EFORMAT, c->pos, "you cannot chain multiple tests with is%s",
                           NULL);
        hr_jnode *arg = parse_postfix(p, parse_primary(p));
        if (!arg)
            return NULL;
        t->args = arg;
    }
    if (negated) {
        hr_jnode *n = hr__jp_node(p, HR_JN_NOT, pos);
        if (!n)
            return NULL;
        n->a = t;
        return n;
    }
    return t;
}

static hr_jnode *parse_filter_expr(hr_jparser *p, hr_jnode *n) {
    int k = 0;
    while (n && !p->rc && hr__jp_enter(p)) {
        k++;
        const hr_jtok *t = cur(p);
        if (is_op(t, HR_JOP_PIPE))
            n = hr__jp_filter(p, n, 0);
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

static hr_jnode *parse_seq(hr_jparser *p, int kind, int close, long pos) {
    hr_jnode *l = hr__jp_node(p, kind, pos), *tail = NULL;
    if (!l)
        return NULL;
    advance(p);
    while (!is_op(cur(p), close)) {
        if (p->rc)
            return NULL;
        if (l->args && !hr__jp_expect_op(p, HR_JOP_COMMA, "','"))
            return NULL;
        if (is_op(cur(p), close))
            break;
        hr_jnode *item;
        if (kind == HR_JN_DICT) {
            item = hr__jp_node(p, HR_JN_PAIR, cur(p)->pos);
            if (!item)
                return NULL;
            item->a = hr__jp_expression(p, 1);
            if (!hr__jp_expect_op(p, HR_JOP_COLON, "':'"))
                return NULL;
            item->b = hr__jp_expression(p, 1);
        } else {
            item = hr__jp_expression(p, 1);
        }
        if (!item || p->rc)
            return NULL;
        append(&l->args, &tail, item);
    }
    advance(p);
    return l;
}

static hr_jnode *parse_primary(hr_jparser *p) {
    const hr_jtok *t = cur(p);
    hr_jnode *n;
    if (!hr__jp_enter(p))
        return NULL;
    switch (t->type) {
    case HR_JT_NAME:
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") ||
            is_name(t, "False")) {
            n = hr__jp_node(p, HR_JN_CONST, t->pos);
            if (n)
                n->val = hr__jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n = hr__jp_node(p, HR_JN_CONST, t->pos);
            if (n)
                n->val = hr__jv_none();
        } else {
            n = hr__jp_node(p, HR_JN_NAME, t->pos);
            if (n && !hr__jp_set_name(p, n, t->s, t->len))
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
        n = hr__jp_node(p, HR_JN_CONST, pos);
        if (b.failed)
            p->rc = hr_err(p->err, HR_ENOMEM, "out of memory");
        if (n && !p->rc)
            hr__jp_set_str(p, n, b.p ? b.p : "", b.len);
        hr__jbuf_free(&b);
        break;
    }
    case HR_JT_INT:
    case HR_JT_FLOAT:
        n = hr__jp_node(p, HR_JN_CONST, t->pos);
        if (n)
            n->val = t->type == HR_JT_INT ? hr__jv_int(t->i) : hr__jv_float(t->f);
        advance(p);
        break;
    case HR_JT_OP:
        if (t->op == HR_JOP_LPAREN) {
            advance(p);
            n = hr__jp_tuple(p, 0, 1, NULL, 1);
            if (n && !hr__jp_expect_op(p, HR_JOP_RPAREN, "')'"))
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
        n = hr__jp_fail(p, HR_EFORMAT, t->pos, "unexpected %s", hr__jp_describe(t, buf, sizeof buf));
    }
    }
    p->depth--;
    return p->rc ? NULL : n;
}

static hr_jnode *parse_unary(hr_jparser *p, int with_filter) {
    const hr_jtok *t = cur(p);
    hr_jnode *n;
    if (!hr__jp_enter(p))
        return NULL;
    if (is_op(t, HR_JOP_SUB) || is_op(t, HR_JOP_ADD)) {
        advance(p);
        n = hr__jp_node(p, t->op == HR_JOP_SUB ? HR_JN_NEG : HR_JN_POS, t->pos);
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
static hr_jnode *binop(hr_jparser *p, int op, long pos, hr_jnode *a, hr_jnode *b) {
    hr_jnode *n = hr__jp_node(p, HR_JN_BINOP, pos);
    if (!n || !a || !b)
        return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static hr_jnode *parse_pow(hr_jparser *p) {
    hr_jnode *l = parse_unary(p, 1);
    int k = 0;
    while (l && is_op(cur(p), HR_JOP_POW) && hr__jp_enter(p)) {
        k++;
        long pos = cur(p)->pos;
        advance(p);
        l = binop(p, HR_JOP_POW, pos, l, parse_unary(p, 1));
    }
    p->depth -= k;
    return l;
}

static hr_jnode *parse_math2(hr_jparser *p) {
    hr_jnode *l = parse_pow(p);
    int k = 0;
    while (l && cur(p)->type == HR_JT_OP &&
           (cur(p)->op == HR_JOP_MUL || cur(p)->op == HR_JOP_DIV ||
            cur(p)->op == HR_JOP_FLOORDIV || cur(p)->op == HR_JOP_MOD) && hr__jp_enter(p)) {
        k++;
        int op = cur(p)->op;
        long pos = cur(p)->pos;
        advance(p);
        l = binop(p, op, pos, l, parse_pow(p));
    }
    p->depth -= k;
    return l;
}

static hr_jnode *parse_concat(hr_jparser *p) {
    hr_jnode *first = parse_math2(p);
    if (!first || !is_op(cur(p), HR_JOP_TILDE))
        return first;
    hr_jnode *c = hr__jp_node(p, HR_JN_CONCAT, cur(p)->pos), *tail = NULL;
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

static hr_jnode *parse_math1(hr_jparser *p) {
    hr_jnode *l = parse_concat(p);
    int k = 0;
    while (l && (is_op(cur(p), HR_JOP_ADD) || is_op(cur(p), HR_JOP_SUB)) && hr__jp_enter(p)) {
        k++;
        int op = cur(p)->op;
        long pos = cur(p)->pos;
        advance(p);
        l = binop(p, op, pos, l, parse_concat(p));
    }
    p->depth -= k;
    return l;
}

static hr_jnode *parse_compare(hr_jparser *p) {
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
        hr_jnode *o = hr__jp_node(p, HR_JN_OPERAND, t->pos);
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
    hr_jnode *c = hr__jp_node(p, HR_JN_COMPARE, pos);
    if (c) {
        c->a = expr;
        c->args = head;
    }
    return c;
}

static hr_jnode *parse_not(hr_jparser *p) {
    if (is_name(cur(p), "not")) {
        hr_jnode *n = hr__jp_node(p, HR_JN_NOT, cur(p)->pos);
        advance(p);
        if (!n || !hr__jp_enter(p))
            return NULL;
        n->a = parse_not(p);
        p->depth--;
        return n->a ? n : NULL;
    }
    return parse_compare(p);
}

static hr_jnode *parse_and(hr_jparser *p) {
    hr_jnode *l = parse_not(p);
    int k = 0;
    while (l && is_name(cur(p), "and") && hr__jp_enter(p)) {
        k++;
        long pos = cur(p)->pos;
        advance(p);
        l = binop(p, HR_JN_AND, pos, l, parse_not(p));
    }
    p->depth -= k;
    return l;
}

static hr_jnode *parse_or(hr_jparser *p) {
    hr_jnode *l = parse_and(p);
    int k = 0;
    while (l && is_name(cur(p), "or") && hr__jp_enter(p)) {
        k++;
        long pos = cur(p)->pos;
        advance(p);
        l = binop(p, HR_JN_OR, pos, l, parse_and(p));
    }
    p->depth -= k;
    return l;
}

static hr_jnode *parse_condexpr(hr_jparser *p) {
    hr_jnode *e1 = parse_or(p);
    while (e1 && is_name(cur(p), "if")) {
        hr_jnode *c = hr__jp_node(p, HR_JN_COND, cur(p)->pos);
        advance(p);
        if (!c || !hr__jp_enter(p))
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

hr_jnode *hr__jp_expression(hr_jparser *p, int with_condexpr) {
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static int tuple_end(hr_jparser *p, const char *extra_end) {
    const hr_jtok *t = cur(p);
    return t->type == HR_JT_VAR_END || t->type == HR_JT_BLOCK_END ||
           is_op(t, HR_JOP_RPAREN) || (extra_end && is_name(t, extra_end));
}

hr_jnode *hr__jp_tuple(hr_jparser *p, int simplified, int with_condexpr,
                             const char *extra_end, int explicit_parens) {
    long pos = cur(p)->pos;
    hr_jnode *head = NULL, *tail = NULL;
    int is_tuple = 0, count = 0;
    for (;;) {
        if (count && !hr__jp_expect_op(p, HR_JOP_COMMA, "','"))
            return NULL;
        if (tuple_end(p, extra_end))
            break;
        hr_jnode *n = simplified ? parse_primary(p) : hr__jp_expression(p, with_condexpr);
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
            return hr__jp_unexpected(p, "an expression");
    }
    hr_jnode *t = hr__jp_node(p, HR_JN_TUPLE, pos);
    if (t)
        t->args = head;
    return t;
}

