/* The Jinja parser's internals, shared by jinja_parse.c (statements) and
 * jinja_parse_expr.c (expressions). */
#ifndef HR_CHAT_JINJA_PARSE_H
#define HR_CHAT_JINJA_PARSE_H

#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_lex.h"

#include <string.h>

#define HR_JP_MAX_NEST 200

typedef struct hr_jparser {
    hr_jinja *t;
    const hr_jtok *tok;
    size_t i, n;
    hr_error *err;
    int rc;
    int depth;
    int soft;     /* inside an if / inline if of the current frame */
    int in_loop;  /* break/continue allowed */
    hr_jnode *macro; /* innermost macro being parsed: op gets HR_JN_USES_* */
} hr_jparser;

static inline const hr_jtok *cur(hr_jparser *p) { return &p->tok[p->i]; }
static inline const hr_jtok *look(hr_jparser *p) {
    return &p->tok[p->i + 1 < p->n ? p->i + 1 : p->i];
}
static inline void advance(hr_jparser *p) {
    if (p->i + 1 < p->n)
        p->i++;
}
static inline int is_op(const hr_jtok *t, int op) {
    return t->type == HR_JT_OP && t->op == op;
}
static inline int is_name(const hr_jtok *t, const char *name) {
    return t->type == HR_JT_NAME && t->len == strlen(name) && !memcmp(t->s, name, t->len);
}
/* Append to a singly linked list kept as (head, tail). */
static inline void append(hr_jnode **head, hr_jnode **tail, hr_jnode *n) {
    if (*tail)
        (*tail)->next = n;
    else
        *head = n;
    *tail = n;
}

/* Fail at pos with a printf-style message taking one string argument;
 * returns NULL (the first failure wins). */
hr_jnode *hr__jp_fail(hr_jparser *p, int code, long pos, const char *fmt, const char *arg);
hr_jnode *hr__jp_unexpected(hr_jparser *p, const char *expected);
const char *hr__jp_describe(const hr_jtok *t, char *buf, size_t n);
int hr__jp_expect_op(hr_jparser *p, int op, const char *what);
int hr__jp_expect_type(hr_jparser *p, int type, const char *what);
hr_jnode *hr__jp_node(hr_jparser *p, int kind, long pos); /* NULL once failed */
int hr__jp_set_name(hr_jparser *p, hr_jnode *nd, const char *s, size_t len);
int hr__jp_set_str(hr_jparser *p, hr_jnode *nd, const char *s, size_t len);
int hr__jp_enter(hr_jparser *p); /* depth++; 0 (and failed) past HR_JP_MAX_NEST */

/* jinja_parse_expr.c */
hr_jnode *hr__jp_expression(hr_jparser *p, int with_condexpr);
/* simplified: primaries only (assignment targets); extra_end: a name that
 * ends the tuple; explicit_parens: `()` is an empty tuple. */
hr_jnode *hr__jp_tuple(hr_jparser *p, int simplified, int with_condexpr,
                       const char *extra_end, int explicit_parens);
/* a|f|g; start_inline: the first filter name comes without a pipe */
hr_jnode *hr__jp_filter(hr_jparser *p, hr_jnode *n, int start_inline);

#endif
