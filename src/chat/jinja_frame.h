/* The interpreter's private state, shared by jinja_eval.c (frames,
 * expressions, calls) and jinja_exec.c (statements, render). */
#ifndef HR_CHAT_JINJA_FRAME_H
#define HR_CHAT_JINJA_FRAME_H

#include "chat/jinja_eval.h"

/* exec results besides 0 and HR_E* errors */
enum { HR_JE_BREAK = 1, HR_JE_CONTINUE = 2 };

typedef struct hr_jframe {
    struct hr_jframe *parent;
    hr_jv vars; /* dict, or NONE until the first assignment */
    int captured; /* a macro/caller refers to it: keep until the render ends */
    struct hr_jframe *next_dead;
} hr_jframe;

struct hr_jctx {
    const hr_jinja *t;
    hr_jinja_opts o;
    hr_error *err;
    long steps;
    double cpu_end; /* hr_thread_cpu() past which the render gives up */
    int depth;
    hr_jbuf *out;
    hr_jv vars;
    hr_jframe *dead;
    hr_jv namespaces; /* every namespace() made: cleared at the end */
};

/* jinja_eval.c */
int hr__je_step(hr_jctx *c, const hr_jnode *at); /* the step budget */
int hr__je_eval(hr_jctx *c, const hr_jnode *n, hr_jframe *f, hr_jv *out);
/* a CALL node; extra_caller: a FUNC passed as caller=, or NONE */
int hr__je_eval_call(hr_jctx *c, const hr_jnode *n, hr_jframe *f, hr_jv extra_caller, hr_jv *out);
/* the filter chain of a filter/set block applied to base */
int hr__je_apply_block_filter(hr_jctx *c, const hr_jnode *n, hr_jframe *f, hr_jv base, hr_jv *out);
hr_jframe *hr__je_frame_new(hr_jctx *c, const hr_jnode *at, hr_jframe *parent);
void hr__je_frame_free(hr_jctx *c, hr_jframe *f); /* captured frames wait for the end */
void hr__je_capture(hr_jframe *f);
int hr__je_frame_set(hr_jctx *c, const hr_jnode *at, hr_jframe *f, const char *name, hr_jv v);
int hr__je_assign(hr_jctx *c, const hr_jnode *target, hr_jframe *f, hr_jv v); /* takes v */
int hr__je_emit(hr_jctx *c, const hr_jnode *at, hr_jv v);
/* run body in frame nf (or a new child of f), capturing its output */
int hr__je_render_body(hr_jctx *c, const hr_jnode *at, const hr_jnode *body, hr_jframe *f,
                       hr_jframe *nf, hr_jv *out);

/* jinja_exec.c */
int hr__je_exec_body(hr_jctx *c, const hr_jnode *n, hr_jframe *f);

#endif
