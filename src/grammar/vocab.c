/* The vocabulary index: every token's bytes and a byte trie over them (nodes
 * in preorder, so a subtree is a contiguous range and a walk that prunes a
 * subtree jumps to its end). Built once per tokenizer. */
#include "grammar/internal.h"
#include "core/error.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t next_serial = 1;

static const hr_grammar_vocab *sort_v; /* qsort context (build is serialized) */
static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

static int cmp_tok(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const hr_grammar_vocab *v = sort_v;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void hr_grammar_vocab_free(hr_grammar_vocab *v) {
    if (!v)
        return;
    hr__vshared_free(v);
    pthread_mutex_destroy(&v->mu);
    free(v->bytes);
    free(v->off);
    free(v->len);
    free(v->is_eos);
    free(v->eos);
    free(v->nbyte);
    free(v->ndepth);
    free(v->nend);
    free(v->nparent);
    free(v->ntok0);
    free(v->toks);
    free(v->nplain);
    free(v->nu8);
    free(v->nheight);
    free(v);
}

int hr_grammar_vocab_n(const hr_grammar_vocab *v) { return v->n_vocab; }

int hr_grammar_vocab_new(hr_grammar_vocab **out, const hr_tokenizer *tok,
                         int n_vocab, const int32_t *eos_ids, int n_eos,
                         hr_error *err) {
    *out = NULL;
    int32_t nt = hr_tokenizer_n_vocab(tok);
    if (n_vocab <= 0 || n_eos < 0 || (n_eos && !eos_ids))
        return hr_err(err, HR_EINVAL, "grammar vocab: bad arguments");
    int rc = HR_ENOMEM;
    int32_t *order = NULL;
    char tmp[4096];
    hr_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v)
        goto fail;
    v->serial = atomic_fetch_add(&next_serial, 1);
    pthread_mutex_init(&v->mu, NULL);
    v->n_vocab = n_vocab;
    v->n_tok = nt < n_vocab ? nt : n_vocab;
    v->off = calloc((size_t)v->n_tok + 1, sizeof *v->off);
    v->len = calloc((size_t)v->n_tok + 1, sizeof *v->len);
    v->is_eos = calloc((size_t)n_vocab, 1);
    v->eos = malloc(((size_t)n_eos + 1) * sizeof *v->eos);
    if (!v->off || !v->len || !v->is_eos || !v->eos)
        goto fail;
    for (int i = 0; i < n_eos; i++) {
        if (eos_ids[i] < 0 || eos_ids[i] >= n_vocab) {
            rc = hr_err(err, HR_EINVAL, "grammar vocab: EOS id %d outside the "
                        "vocabulary", (int)eos_ids[i]);
            goto fail;
        }
        if (!v->is_eos[eos_ids[i]])
            v->eos[v->n_eos++] = eos_ids[i];
        v->is_eos[eos_ids[i]] = 1;
    }
    /* token bytes */
    size_t cap = 1 << 20, used = 0;
    v->bytes = malloc(cap);
    if (!v->bytes)
        goto fail;
    for (int32_t id = 0; id < v->n_tok; id++) {
        size_t n = 0;
        v->off[id] = (uint32_t)used;
        if (hr_tokenizer_is_special(tok, id) || v->is_eos[id])
            continue;
        int r = hr_tokenizer_token_bytes(tok, id, tmp, sizeof tmp, &n);
        if (r == HR_ENOMEM) /* not a hole: a vocabulary missing it would be cached */
            goto fail;
        if (r || !n || n > 0xFFFF)
            continue; /* a hole, or too long to matter: never allowed */
        if (used + n > cap) {
            while (used + n > cap)
                cap *= 2;
            char *b = realloc(v->bytes, cap);
            if (!b)
                goto fail;
            v->bytes = b;
        }
        memcpy(v->bytes + used, tmp, n);
        v->len[id] = (uint32_t)n;
        used += n;
    }
    /* sort the tokens with bytes; build the trie in preorder */
    order = malloc(((size_t)v->n_tok + 1) * sizeof *order);
    if (!order)
        goto fail;
    size_t no = 0;
    for (int32_t id = 0; id < v->n_tok; id++)
        if (v->len[id])
            order[no++] = id;
    pthread_mutex_lock(&sort_mu);
    sort_v = v;
    qsort(order, no, sizeof *order, cmp_tok);
    sort_v = NULL;
    pthread_mutex_unlock(&sort_mu);
    /* upper bound on nodes: 1 + total bytes */
    size_t maxn = 1 + used;
    v->nbyte = malloc(maxn);
    v->ndepth = malloc(maxn * sizeof *v->ndepth);
    v->nend = malloc(maxn * sizeof *v->nend);
    v->nparent = malloc(maxn * sizeof *v->nparent);
    v->ntok0 = calloc(maxn + 1, sizeof *v->ntok0);
    v->toks = malloc((no + 1) * sizeof *v->toks);
    uint32_t *pathn = malloc((0x10000 + 1) * sizeof *pathn);
    uint32_t *tnode = malloc((no + 1) * sizeof *tnode);
    if (!v->nbyte || !v->ndepth || !v->nend || !v->nparent || !v->ntok0 ||
        !v->toks || !pathn || !tnode) {
        free(pathn);
        free(tnode);
        goto fail;
    }
    uint32_t nn = 1, depth = 0, ntoks = 0;
    v->nbyte[0] = 0;
    v->ndepth[0] = 0;
    v->nparent[0] = UINT32_MAX;
    pathn[0] = 0;
    const char *prev = NULL;
    uint32_t prevlen = 0;
    for (size_t i = 0; i < no; i++) {
        int32_t id = order[i];
        const char *b = v->bytes + v->off[id];
        uint32_t len = v->len[id], lcp = 0;
        while (prev && lcp < len && lcp < prevlen && b[lcp] == prev[lcp])
            lcp++;
        /* close nodes deeper than the common prefix */
        while (depth > lcp) {
            v->nend[pathn[depth]] = nn;
            depth--;
        }
        for (uint32_t d = lcp; d < len; d++) {
            uint32_t k = nn++;
            v->nbyte[k] = (uint8_t)b[d];
            v->ndepth[k] = (uint16_t)(d + 1);
            v->nparent[k] = pathn[d];
            v->ntok0[k] = ntoks;
            pathn[d + 1] = k;
            depth = d + 1;
        }
        /* tokens ending at the current node are consecutive in order */
        tnode[ntoks] = pathn[len];
        v->toks[ntoks++] = id;
        if (len > v->max_depth)
            v->max_depth = len;
        prev = b;
        prevlen = len;
    }
    while (depth > 0) {
        v->nend[pathn[depth]] = nn;
        depth--;
    }
    v->nend[0] = nn;
    free(pathn);
    /* ntok0 as prefix offsets: tokens are in node preorder already */
    {
        uint32_t t = 0;
        for (uint32_t i = 0; i < nn; i++) {
            v->ntok0[i] = t;
            while (t < ntoks && tnode[t] == i)
                t++;
        }
        v->ntok0[nn] = ntoks;
    }
    free(tnode);
    v->n_nodes = nn;
    free(order);
    order = NULL;
    if ((rc = hr__plain_index(v)))
        goto fail;
    *out = v;
    return 0;
fail:
    free(order);
    hr_grammar_vocab_free(v);
    return rc == HR_ENOMEM ? hr_err(err, HR_ENOMEM, "grammar vocab: out of memory") : rc;
}
