/* The matcher: a grammar's parse state for one request, advanced byte by
 * byte over a set of kernel configurations, with a history for rollback. */
#include "grammar/internal.h"
#include "core/error.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct hr_matcher {
    const hr_grammar *g;
    const hr_grammar_vocab *v;
    hr__run run;      /* real stacks */
    hr__run crun;     /* scratch for cache entries */
    hr__maskrun mr;
    hr__cbuf hist;    /* kernels of every step, concatenated */
    size_t *hoff;     /* step i's kernel: hist[hoff[i] .. hoff[i+1]) */
    uint8_t *hflags;  /* per step: bit 0 can end, bit 1 done, bit 2 after EOS */
    int n, cap;       /* steps after the start (n accepted) */
    hr__cbuf a, b;    /* scratch */
};

enum { F_END = 1, F_DONE = 2, F_EOS = 4 };

static const hr__cfg *cur(const hr_matcher *m, size_t *n) {
    *n = m->hoff[m->n + 1] - m->hoff[m->n];
    return m->hist.v + m->hoff[m->n];
}

/* Flags of a kernel: can the root end, can anything be scanned. */
static int kernel_flags(hr_matcher *m, const hr__cfg *k, size_t n) {
    m->b.n = 0;
    int fl = hr__closure(&m->run, k, n, &m->b, 0);
    return (fl & HR__CL_END ? F_END : 0) | (m->b.n ? 0 : F_DONE);
}

static int grow_steps(hr_matcher *m) {
    if (m->n + 2 < m->cap)
        return 0;
    int c = m->cap ? m->cap * 2 : 64;
    size_t *o = realloc(m->hoff, (size_t)(c + 1) * sizeof *o);
    if (!o)
        return HR_ENOMEM;
    m->hoff = o;
    uint8_t *f = realloc(m->hflags, (size_t)(c + 1));
    if (!f)
        return HR_ENOMEM;
    m->hflags = f;
    m->cap = c;
    return 0;
}

/* Append kernel k as a new step. */
static int push_step(hr_matcher *m, const hr__cfg *k, size_t n, int flags) {
    if (grow_steps(m) || hr__cbuf_reserve(&m->hist, n))
        return HR_ENOMEM;
    /* k may point into hist: reserve first, then copy */
    if (n)
        memmove(m->hist.v + m->hist.n, k, n * sizeof *k);
    m->hist.n += n;
    m->n++;
    m->hoff[m->n + 1] = m->hist.n;
    m->hflags[m->n] = (uint8_t)flags;
    return 0;
}

void hr_matcher_reset(hr_matcher *m) {
    m->n = 0;
    m->hist.n = m->hoff[1];
}

int hr_matcher_new(hr_matcher **out, const hr_grammar *g,
                   const hr_grammar_vocab *v, hr_error *err) {
    *out = NULL;
    hr_matcher *m = calloc(1, sizeof *m);
    if (!m || hr__run_init(&m->run, g) || hr__run_init(&m->crun, g) ||
        grow_steps(m))
        goto oom;
    m->g = g;
    m->v = v;
    /* step 0: the kernel of the root's start */
    hr__cfg s = {g->root, HR__NODE_EMPTY};
    m->a.n = 0;
    hr__closure(&m->run, &s, 1, &m->a, 1);
    if (m->run.oom || hr__cbuf_reserve(&m->hist, m->a.n))
        goto oom;
    if (m->a.n)
        memcpy(m->hist.v, m->a.v, m->a.n * sizeof *m->a.v);
    m->hist.n = m->a.n;
    m->hoff[0] = 0;
    m->hoff[1] = m->hist.n;
    m->hflags[0] = (uint8_t)kernel_flags(m, m->hist.v, m->hist.n);
    if (m->run.oom)
        goto oom;
    *out = m;
    return 0;
oom:
    hr_matcher_free(m);
    return hr_err(err, HR_ENOMEM, "out of memory creating a grammar matcher");
}

void hr_matcher_free(hr_matcher *m) {
    if (!m)
        return;
    hr__run_deinit(&m->run);
    hr__run_deinit(&m->crun);
    hr__maskrun_deinit(&m->mr);
    free(m->hist.v);
    free(m->hoff);
    free(m->hflags);
    free(m->a.v);
    free(m->b.v);
    free(m);
}

/* Advance the current kernel by bytes; 0 and a new step, or HR_EINVAL with
 * the number of bytes that were accepted in *at. */
static int advance(hr_matcher *m, const uint8_t *s, size_t n, size_t *at) {
    size_t nk;
    const hr__cfg *k = cur(m, &nk);
    /* a holds the current scan results, b the closure */
    m->a.n = 0;
    if (hr__cbuf_reserve(&m->a, nk))
        return HR_ENOMEM;
    if (nk)
        memcpy(m->a.v, k, nk * sizeof *k);
    m->a.n = nk;
    for (size_t i = 0; i < n; i++) {
        m->b.n = 0;
        hr__closure(&m->run, m->a.v, m->a.n, &m->b, 0);
        m->a.n = 0;
        hr__scan(&m->run, m->b.v, m->b.n, s[i], &m->a);
        if (m->run.oom)
            return HR_ENOMEM;
        if (!m->a.n) {
            *at = i;
            return HR_EINVAL;
        }
    }
    /* the new kernel */
    m->b.n = 0;
    hr__closure(&m->run, m->a.v, m->a.n, &m->b, 1);
    hr__cbuf t = m->a;
    m->a = m->b;
    m->b = t;
    int fl = kernel_flags(m, m->a.v, m->a.n);
    if (m->run.oom)
        return HR_ENOMEM;
    return push_step(m, m->a.v, m->a.n, fl);
}

int hr_matcher_accept(hr_matcher *m, int32_t token, hr_error *err) {
    const hr_grammar_vocab *v = m->v;
    int fl = m->hflags[m->n];
    if (token < 0 || token >= v->n_vocab)
        return hr_err(err, HR_EINVAL, "grammar: token %d outside the vocabulary", (int)token);
    if (fl & F_EOS)
        return hr_err(err, HR_EINVAL, "grammar: token %d after the end", (int)token);
    if (v->is_eos[token]) {
        if (!(fl & F_END))
            return hr_err(err, HR_EINVAL, "grammar: end of text (token %d) before "
                          "the grammar is complete", (int)token);
        size_t nk;
        const hr__cfg *k = cur(m, &nk);
        size_t off = (size_t)(k - m->hist.v);
        if (hr__cbuf_reserve(&m->hist, nk))
            return hr_err(err, HR_ENOMEM, "out of memory");
        return push_step(m, m->hist.v + off, nk, F_END | F_DONE | F_EOS)
                   ? hr_err(err, HR_ENOMEM, "out of memory") : 0;
    }
    if (token >= v->n_tok || !v->len[token])
        return hr_err(err, HR_EINVAL, "grammar: token %d is special or empty and "
                      "not allowed while the output is constrained", (int)token);
    size_t at = 0;
    int rc = advance(m, (const uint8_t *)v->bytes + v->off[token], v->len[token], &at);
    if (rc == HR_EINVAL)
        return hr_err(err, HR_EINVAL, "grammar: token %d does not fit the grammar "
                      "(byte %zu of the token)", (int)token, at);
    return rc ? hr_err(err, rc, "out of memory") : 0;
}

int hr_matcher_accept_bytes(hr_matcher *m, const char *s, size_t n, hr_error *err) {
    if (m->hflags[m->n] & F_EOS)
        return hr_err(err, HR_EINVAL, "grammar: text after the end");
    size_t at = 0;
    int rc = advance(m, (const uint8_t *)s, n, &at);
    if (rc == HR_EINVAL) {
        rc = hr_err(err, HR_EINVAL, "grammar: byte %zu does not fit the grammar", at);
        if (err)
            err->pos = (long)at;
        return rc;
    }
    return rc ? hr_err(err, rc, "out of memory") : 0;
}

int hr_matcher_rollback(hr_matcher *m, int n_tokens) {
    if (n_tokens < 0 || n_tokens > m->n)
        return HR_ERANGE;
    m->n -= n_tokens;
    m->hist.n = m->hoff[m->n + 1];
    return 0;
}

bool hr_matcher_can_end(const hr_matcher *m) { return m->hflags[m->n] & F_END; }
bool hr_matcher_done(const hr_matcher *m) { return m->hflags[m->n] & F_DONE; }
int hr_matcher_n_accepted(const hr_matcher *m) { return m->n; }

/* Both masks: nothing after EOS; the grammar's next tokens unless the text
 * is done (within `budget` tokens when budget >= 0; none when the walk runs
 * out of memory); EOS where the text may end. */
static void mask_with(hr_matcher *m, uint32_t *allowed, int budget) {
    const hr_grammar_vocab *v = m->v;
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    memset(allowed, 0, words * sizeof *allowed);
    int fl = m->hflags[m->n];
    if (fl & F_EOS)
        return;
    if (!(fl & F_DONE)) {
        size_t nk;
        const hr__cfg *k = cur(m, &nk);
        /* the kernel lives in hist, which the walks do not touch */
        int rc = budget < 0
                     ? hr__mask_compute(&m->run, &m->crun, &m->mr, v, k, nk, allowed)
                     : hr__mask_budget(&m->run, &m->mr, v, k, nk, (uint32_t)budget, allowed);
        if (rc)
            memset(allowed, 0, words * sizeof *allowed);
    }
    if (fl & F_END)
        for (int i = 0; i < v->n_eos; i++)
            allowed[v->eos[i] >> 5] |= 1u << (v->eos[i] & 31);
}

void hr_matcher_mask(hr_matcher *m, uint32_t *allowed) { mask_with(m, allowed, -1); }

int hr_matcher_distance(const hr_matcher *m) {
    int fl = m->hflags[m->n];
    if (fl & (F_END | F_EOS))
        return 0;
    size_t nk;
    const hr__cfg *k = cur(m, &nk);
    uint32_t d = HR__DIST_INF;
    for (size_t i = 0; i < nk; i++) {
        uint32_t di = hr__cfg_dist(&m->run, k[i]);
        d = di < d ? di : d;
    }
    return d == HR__DIST_INF ? -1 : d > INT_MAX ? INT_MAX : (int)d;
}

void hr_matcher_mask_budget(hr_matcher *m, uint32_t *allowed, int n_tokens) {
    mask_with(m, allowed, n_tokens > 0 ? n_tokens : 0);
}

int hr_grammar_warm(const hr_grammar *g, const hr_grammar_vocab *v, hr_error *err) {
    return hr__mask_warm(g, v, err);
}
