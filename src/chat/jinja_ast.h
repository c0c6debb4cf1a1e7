/* Jinja syntax tree, built by jinja_parse.c and walked by jinja_eval.c.
 * Every node belongs to its template and is immutable after parsing, so a
 * compiled template can be rendered by many threads at once. */
#ifndef HR_CHAT_JINJA_AST_H
#define HR_CHAT_JINJA_AST_H

#include "chat/jinja_value.h"

typedef enum hr_jn_kind {
    /* expressions */
    HR_JN_CONST,   /* val */
    HR_JN_NAME,    /* name */
    HR_JN_LIST,    /* args: items */
    HR_JN_TUPLE,   /* args: items */
    HR_JN_DICT,    /* args: PAIR nodes (a: key, b: value) */
    HR_JN_PAIR,
    HR_JN_GETATTR, /* a.name */
    HR_JN_GETITEM, /* a[b] */
    HR_JN_SLICE,   /* a[b:c:d], each of b, c, d may be NULL */
    HR_JN_CALL,    /* a(args); args holds exprs and KWARG nodes */
    HR_JN_KWARG,   /* name=a */
    HR_JN_FILTER,  /* a|name(args); a is NULL in filter blocks */
    HR_JN_TEST,    /* a is name(args) */
    HR_JN_NOT,     /* not a */
    HR_JN_NEG,     /* -a */
    HR_JN_POS,     /* +a */
    HR_JN_BINOP,   /* a op b: HR_JOP_* or HR_JN_AND / HR_JN_OR */
    HR_JN_CONCAT,  /* args joined with ~ */
    HR_JN_COMPARE, /* a, then args: OPERAND nodes (op, a) */
    HR_JN_OPERAND,
    HR_JN_COND,    /* b if a else c (c may be NULL) */
    /* statements */
    HR_JN_DATA,    /* val: literal text */
    HR_JN_OUTPUT,  /* {{ a }} */
    HR_JN_IF,      /* if a: b (body) else c (body) */
    HR_JN_FOR,     /* for a in b [if e]: c else d */
    HR_JN_SET,     /* a = b */
    HR_JN_SETBLOCK,/* a = render(b) | c (filter chain or NULL) */
    HR_JN_MACRO,   /* name(args: PARAM nodes, a: default) b */
    HR_JN_PARAM,
    HR_JN_CALLBLOCK,/* a (a CALL) with caller(args: PARAM) rendering b */
    HR_JN_FILTERBLOCK,/* render(b) | a */
    HR_JN_BREAK,
    HR_JN_CONTINUE,
    HR_JN_WITH,    /* args: SET nodes, then b in a new scope */
    HR_JN_SCOPE,   /* b in a new scope ({% generation %}) */
} hr_jn_kind;

enum { HR_JN_AND = 100, HR_JN_OR, HR_JN_IN, HR_JN_NOTIN };
/* MACRO op bits: the body mentions varargs / kwargs. */
enum { HR_JN_USES_VARARGS = 1, HR_JN_USES_KWARGS = 2 };
/* IF op: this IF is the elif branch of the IF whose c it is. */
enum { HR_JN_ELIF = 1 };

typedef struct hr_jnode hr_jnode;
struct hr_jnode {
    uint8_t kind;
    uint8_t op;
    uint8_t soft; /* FILTER/TEST: inside an if; unknown names fail at run time */
    long pos;     /* byte offset in the template source */
    const char *name; /* NUL-terminated, template-owned */
    hr_jv val;        /* CONST, DATA: an immortal value */
    hr_jnode *a, *b, *c, *d, *e;
    hr_jnode *args; /* list through next */
    hr_jnode *next; /* sibling in a list or a body */
};

/* A compiled template (the body of the opaque hr_jinja). */
struct hr_jinja {
    char *src; /* normalized source, for line/column in messages */
    size_t src_len;
    hr_jnode *body;
    hr_jnode **nodes; /* every node, for freeing */
    size_t n_nodes, cap_nodes;
};

/* jinja_parse.c */
void hr__jinja_where(const struct hr_jinja *t, long pos, int *line, int *col);

/* jinja_filters.c: does jinja2 (as transformers sets it up) know this
 * filter / test name? Unknown names are compile errors outside `if`. */
int hr__jinja_filter_known(const char *name);
int hr__jinja_test_known(const char *name);

#endif
