/* Jinja operators and object access with Python semantics: arithmetic,
 * comparison, `in`, attribute/item lookup with jinja2's sandbox rules,
 * slicing, iteration, the loop object and the global functions. */
#ifndef HR_CHAT_JINJA_OPS_H
#define HR_CHAT_JINJA_OPS_H

#include "chat/jinja_eval.h"

/* hr_jfunc kinds */
enum {
    HR_JFN_GLOBAL = 1, /* name: range, dict, namespace, raise_exception, ... */
    HR_JFN_METHOD,     /* self.name(...) of a str/list/dict */
    HR_JFN_MACRO,      /* impl: MACRO node, scope: its frame */
    HR_JFN_CALLER,     /* impl: CALLBLOCK node, scope: its frame */
    HR_JFN_CYCLE,      /* loop.cycle; extra: index0 */
};

int hr__jinja_unary(hr_jctx *c, const hr_jnode *at, int neg, hr_jv a, hr_jv *out);
/* op: HR_JOP_ADD/SUB/MUL/DIV/FLOORDIV/MOD/POW */
int hr__jinja_binop(hr_jctx *c, const hr_jnode *at, int op, hr_jv a, hr_jv b, hr_jv *out);
/* op: HR_JOP_EQ..LTEQ, HR_JN_IN, HR_JN_NOTIN */
int hr__jinja_compare(hr_jctx *c, const hr_jnode *at, int op, hr_jv a, hr_jv b, int *res);
/* idx: start, stop, step (NONE when omitted) */
int hr__jinja_slice(hr_jctx *c, const hr_jnode *at, hr_jv obj, const hr_jv *idx, hr_jv *out);
int hr__jinja_loop_object(hr_jctx *c, const hr_jnode *at, hr_jv items, size_t i, hr_jv *out);

/* A global function value for name; 0 when there is none. */
int hr__jinja_global(const char *name, hr_jv *out);
int hr__jinja_call_global(hr_jctx *c, const hr_jnode *at, hr_jfunc *fn, hr_jargs *a,
                          hr_jv *out);

/* jinja_eval.c: namespaces are cleared at the end of the render (cycles). */
int hr__jinja_register_ns(hr_jctx *c, hr_jv ns);
const hr_jinja_opts *hr__jctx_opts(const hr_jctx *c);

/* Python's type name as jinja2's messages print an object: "'dict object'". */
const char *hr__jinja_obj_desc(hr_jv v, char *buf, size_t n);

#endif
