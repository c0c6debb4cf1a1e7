/* Jinja filters: helpers shared by jinja_filters.c (dispatch, strings,
 * numbers) and jinja_filters_seq.c (sequences: map/select, sorting, ...). */
#ifndef HR_CHAT_JINJA_FILTERS_H
#define HR_CHAT_JINJA_FILTERS_H

#include "chat/jinja_eval.h"

#define RET(v) return hr__jf_ret(c, at, (v), out)

static inline int hr__jf_ret(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    if (hr__jv_oom(v))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    *out = v;
    return 0;
}

/* jinja2's soft_str: Undefined -> '', str (and Markup) as is, else str(). */
static inline hr_jv hr__jf_soft_str(hr_jctx *c, hr_jv v) {
    if (v.type == HR_JV_STR)
        return hr__jv_ref(v);
    if (v.type == HR_JV_UNDEF)
        return hr__jv_cstr("");
    return hr__jv_to_str(v, hr__jctx_max_output(c));
}

static inline int hr__jf_get_int(hr_jctx *c, const hr_jnode *at, const char *what, hr_jv *v, int64_t dflt,
                   int64_t *out) {
    *out = dflt;
    if (!v)
        return 0;
    if (v->type == HR_JV_INT || v->type == HR_JV_BOOL) {
        *out = v->type == HR_JV_INT ? v->u.i : v->u.b;
        return 0;
    }
    return hr__jerr(c, at, HR_EINVAL, "%s must be an integer, not %s", what, hr__jv_type_name(*v));
}

static inline int hr__jf_truthy_arg(hr_jv *v, int dflt) { return v ? hr__jv_truthy(*v) : dflt; }

/* jinja_filters_seq.c; fname picks the variant where one function serves
 * several filters. */
int hr__jf_length(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out);
int hr__jf_first_last(hr_jctx *c, const hr_jnode *at, hr_jv v, int last, hr_jv *out);
int hr__jf_join(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out);
/* map, select, reject, selectattr, rejectattr */
int hr__jf_apply(hr_jctx *c, const hr_jnode *at, const char *fname, hr_jv v, hr_jargs *a,
                 hr_jv *out);
/* sort, dictsort, unique, min, max */
int hr__jf_order(hr_jctx *c, const hr_jnode *at, const char *fname, hr_jv v, hr_jargs *a,
                 hr_jv *out);
int hr__jf_items(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out);
int hr__jf_reverse(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out);
int hr__jf_batch(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out);
/* make_attrgetter: "a.b.0" looked up item-first at each step */
int hr__jf_attr_path(hr_jctx *c, const hr_jnode *at, hr_jv item, hr_jv attr, hr_jv *out);

#endif
