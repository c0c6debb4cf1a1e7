/* The BPE model: a pre-token piece -> IDs.
 *
 * HF BPE (tokenizers/src/models/bpe): the piece is cut into characters (each
 * a vocabulary entry, else its <0xXX> byte tokens with byte_fallback, else
 * the unk token, consecutive unks fused with fuse_unk); then the pair of
 * adjacent symbols with the lowest merge rank is merged, leftmost first,
 * until no pair has a merge. A binary heap keyed by (rank, position) makes
 * this O(n log n).
 *
 * SPM (llama.cpp's llm_tokenizer_spm, GGUF "llama" vocabularies): the pair
 * whose concatenation is a vocabulary entry with the highest score merges
 * first; characters left without a token become byte tokens.
 *
 * Results of pieces shorter than CACHE_MAX_LEN bytes are cached. */
#include "tokenizer/internal.h"

#include <stdlib.h>
#include <string.h>

enum { CACHE_MAX_LEN = 256, CACHE_MAX_ENTRIES = 1 << 17, STACK_SYMS = 128 };

typedef struct sym {
    int32_t id;
    int32_t prev, next;
    uint32_t start, len; /* bytes of the piece covered */
} sym;

typedef struct heap_ent {
    uint64_t key; /* rank (or inverted score) << 32 | left position */
    int32_t new_id;
    uint32_t size; /* SPM: byte size of the merged pair */
} heap_ent;

typedef struct heap {
    heap_ent *v;
    size_t n;
} heap;

static void heap_push(heap *h, heap_ent e) {
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->v[p].key <= e.key)
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = e;
}

static heap_ent heap_pop(heap *h) {
    heap_ent top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1].key < h->v[c].key)
            c++;
        if (last.key <= h->v[c].key)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

/* ---- lifecycle ---------------------------------------------------------- */

int hr__bpe_init(hr__bpe *b) {
    memset(b, 0, sizeof *b);
    b->unk_id = -1;
    for (int i = 0; i < 256; i++)
        b->byte_id[i] = -1;
    return pthread_mutex_init(&b->cache.mu, NULL) ? HR_ENOMEM : 0;
}

void hr__bpe_free(hr__bpe *b) {
    if (!b)
        return;
    hr__strmap_free(&b->vocab);
    hr__u64map_free(&b->merges);
    free(b->scores);
    hr__strmap_free(&b->cache.map);
    free(b->cache.spans);
    free(b->cache.ids);
    pthread_mutex_destroy(&b->cache.mu);
}

/* ---- cache -------------------------------------------------------------- */

static int cache_get(hr__bpe *b, const char *s, size_t n, hr_tokens *out) {
    hr__bpe_cache *c = &b->cache;
    int found = 0;
    pthread_mutex_lock(&c->mu);
    int32_t k = hr__strmap_get(&c->map, s, n);
    if (k >= 0) {
        struct hr__cspan sp = c->spans[k];
        found = 1;
        for (uint32_t i = 0; i < sp.n && found; i++)
            if (hr_tokens_push(out, c->ids[sp.off + i]))
                found = -1;
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}

static void cache_put(hr__bpe *b, const char *s, size_t n, const int32_t *ids,
                      size_t m) {
    hr__bpe_cache *c = &b->cache;
    pthread_mutex_lock(&c->mu);
    if (c->n_spans >= CACHE_MAX_ENTRIES) { /* full: start over */
        hr__strmap_clear(&c->map);
        c->n_spans = c->n_ids = 0;
    }
    if (c->n_spans + 1 > c->spans_cap) {
        size_t nc = c->spans_cap ? c->spans_cap * 2 : 1024;
        void *p = realloc(c->spans, nc * sizeof *c->spans);
        if (!p)
            goto out;
        c->spans = p;
        c->spans_cap = nc;
    }
    if (c->n_ids + m > c->ids_cap) {
        size_t nc = c->ids_cap ? c->ids_cap : 4096;
        while (nc < c->n_ids + m)
            nc *= 2;
        void *p = realloc(c->ids, nc * sizeof *c->ids);
        if (!p)
            goto out;
        c->ids = p;
        c->ids_cap = nc;
    }
    if (hr__strmap_put(&c->map, s, n, (int32_t)c->n_spans))
        goto out;
    memcpy(c->ids + c->n_ids, ids, m * sizeof *ids);
    c->spans[c->n_spans++] = (struct hr__cspan){(uint32_t)c->n_ids, (uint32_t)m};
    c->n_ids += m;
out:
    pthread_mutex_unlock(&c->mu);
}

/* ---- BPE ---------------------------------------------------------------- */

static void add_sym(sym *v, int *n, int32_t id, uint32_t start, uint32_t len) {
    v[*n] = (sym){id, *n - 1, -1, start, len};
    if (*n > 0)
        v[*n - 1].next = *n;
    (*n)++;
}

static void try_pair(const hr__bpe *b, heap *h, const sym *v, int left) {
    if (left < 0 || v[left].next < 0)
        return;
    uint64_t key = (uint64_t)(uint32_t)v[left].id << 32 | (uint32_t)v[v[left].next].id;
    uint64_t m;
    if (hr__u64map_get(&b->merges, key, &m))
        heap_push(h, (heap_ent){(m >> 32) << 32 | (uint32_t)left,
                                (int32_t)(uint32_t)m, 0});
}

static int bpe_symbols(const hr__bpe *b, const char *s, size_t n, sym *v) {
    int ns = 0;
    int32_t unk_len = -1; /* pending unk run (bytes), -1 = none */
    uint32_t unk_start = 0;
    for (size_t i = 0; i < n;) {
        size_t k = (size_t)hr__utf8_len((unsigned char)s[i]);
        if (i + k > n)
            k = n - i;
        int32_t id = hr__strmap_get(&b->vocab, s + i, k);
        if (id >= 0) {
            if (unk_len >= 0) {
                add_sym(v, &ns, b->unk_id, unk_start, (uint32_t)unk_len);
                unk_len = -1;
            }
            add_sym(v, &ns, id, (uint32_t)i, (uint32_t)k);
        } else {
            int all = b->byte_fallback;
            for (size_t j = 0; all && j < k; j++)
                all = b->byte_id[(unsigned char)s[i + j]] >= 0;
            if (all) {
                for (size_t j = 0; j < k; j++)
                    add_sym(v, &ns, b->byte_id[(unsigned char)s[i + j]],
                            (uint32_t)(i + j), 1);
            } else if (b->unk_id >= 0) {
                if (unk_len >= 0 && b->fuse_unk) {
                    unk_len += (int32_t)k;
                } else {
                    if (unk_len >= 0)
                        add_sym(v, &ns, b->unk_id, unk_start, (uint32_t)unk_len);
                    unk_start = (uint32_t)i;
                    unk_len = (int32_t)k;
                }
            }
        }
        i += k;
    }
    if (unk_len >= 0)
        add_sym(v, &ns, b->unk_id, unk_start, (uint32_t)unk_len);
    return ns;
}

static void bpe_merge(const hr__bpe *b, sym *v, int ns, heap *h) {
    h->n = 0;
    for (int i = 0; i + 1 < ns; i++)
        try_pair(b, h, v, i);
    while (h->n) {
        heap_ent e = heap_pop(h);
        int l = (int)(uint32_t)e.key, r = v[l].next;
        if (v[l].len == 0 || r < 0)
            continue;
        uint64_t m, key = (uint64_t)(uint32_t)v[l].id << 32 | (uint32_t)v[r].id;
        if (!hr__u64map_get(&b->merges, key, &m) || (int32_t)(uint32_t)m != e.new_id)
            continue;
        v[l].id = e.new_id;
        v[l].len += v[r].len;
        v[l].next = v[r].next;
        v[r].len = 0;
        if (v[l].next >= 0)
            v[v[l].next].prev = l;
        try_pair(b, h, v, v[l].prev);
        try_pair(b, h, v, l);
    }
}

/* ---- SPM ---------------------------------------------------------------- */

static void spm_try(const hr__bpe *b, heap *h, const sym *v, const char *s, int left) {
    if (left < 0 || v[left].next < 0)
        return;
    const sym *r = &v[v[left].next];
    uint32_t size = v[left].len + r->len;
    int32_t id = hr__strmap_get(&b->vocab, s + v[left].start, size);
    if (id < 0 || id >= b->n_scores)
        return;
    /* max score first, then leftmost: a float's bits made to sort as
     * unsigned, inverted for the min-heap */
    float sc = b->scores[id];
    uint32_t bits;
    memcpy(&bits, &sc, 4);
    bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    heap_push(h, (heap_ent){(uint64_t)(~bits) << 32 | (uint32_t)left, id, size});
}

static void spm_merge(const hr__bpe *b, const char *s, sym *v, int ns, heap *h) {
    h->n = 0;
    for (int i = 0; i + 1 < ns; i++)
        spm_try(b, h, v, s, i);
    while (h->n) {
        heap_ent e = heap_pop(h);
        int l = (int)(uint32_t)e.key, r = v[l].next;
        if (r < 0 || v[l].len == 0 || v[r].len == 0 || v[l].len + v[r].len != e.size)
            continue;
        v[l].id = e.new_id;
        v[l].len += v[r].len;
        v[l].next = v[r].next;
        v[r].len = 0;
        if (v[l].next >= 0)
            v[v[l].next].prev = l;
        spm_try(b, h, v, s, v[l].prev);
        spm_try(b, h, v, s, l);
    }
}

static int spm_emit(const hr__bpe *b, const char *s, const sym *v, int ns,
                    int32_t *ids, size_t *m) {
    for (int i = 0; i < ns && ns > 0; i = v[i].next) {
        if (v[i].id >= 0) {
            ids[(*m)++] = v[i].id;
        } else {
            for (uint32_t j = 0; j < v[i].len; j++) {
                int32_t id = b->byte_id[(unsigned char)s[v[i].start + j]];
                if (id >= 0)
                    ids[(*m)++] = id;
                else if (b->unk_id >= 0)
                    ids[(*m)++] = b->unk_id;
            }
        }
        if (v[i].next < 0)
            break;
    }
    return 0;
}

/* ---- entry -------------------------------------------------------------- */

int hr__bpe_encode(hr__bpe *b, const char *s, size_t n, hr_tokens *out) {
    if (!n)
        return 0;
    int whole = b->ignore_merges;
    if (!whole && b->newline_words_whole) {
        whole = 1;
        for (size_t i = 0; i < n && whole; i++)
            whole = s[i] == '\n';
    }
    if (whole) {
        int32_t id = hr__strmap_get(&b->vocab, s, n);
        if (id >= 0)
            return hr_tokens_push(out, id);
    }
    int cacheable = n < CACHE_MAX_LEN;
    if (cacheable) {
        int rc = cache_get(b, s, n, out);
        if (rc)
            return rc < 0 ? HR_ENOMEM : 0;
    }
    sym sbuf[STACK_SYMS];
    heap_ent hbuf[3 * STACK_SYMS];
    int32_t ibuf[STACK_SYMS];
    sym *v = sbuf;
    heap h = {hbuf, 0};
    int32_t *ids = ibuf;
    if (n > STACK_SYMS) {
        v = malloc(n * sizeof *v);
        h.v = malloc(3 * n * sizeof *h.v);
        ids = malloc(n * sizeof *ids);
        if (!v || !h.v || !ids) {
            if (v != sbuf)
                free(v);
            if (h.v != hbuf)
                free(h.v);
            if (ids != ibuf)
                free(ids);
            return HR_ENOMEM;
        }
    }
    size_t m = 0;
    int ns;
    if (b->scores) {
        ns = 0;
        for (size_t i = 0; i < n;) {
            size_t k = (size_t)hr__utf8_len((unsigned char)s[i]);
            if (i + k > n)
                k = n - i;
            add_sym(v, &ns, hr__strmap_get(&b->vocab, s + i, k), (uint32_t)i, (uint32_t)k);
            i += k;
        }
        spm_merge(b, s, v, ns, &h);
        spm_emit(b, s, v, ns, ids, &m);
    } else {
        ns = bpe_symbols(b, s, n, v);
        bpe_merge(b, v, ns, &h);
        for (int i = 0; ns > 0 && i >= 0; i = v[i].next)
            ids[m++] = v[i].id;
    }
    int rc = 0;
    for (size_t i = 0; i < m && !rc; i++)
        rc = hr_tokens_push(out, ids[i]);
    if (!rc && cacheable)
        cache_put(b, s, n, ids, m);
    if (v != sbuf) {
        free(v);
        free(h.v);
        free(ids);
    }
    return rc;
}
