/* Added tokens: matched in the text before the model sees it, as HF's
 * AddedVocabulary does. Tokens with normalized=false are found in the raw
 * text, the others in the normalized text. Matching is leftmost-longest and
 * non-overlapping; a match that is then rejected (single_word, or a special
 * token under split_special) still consumes its span. lstrip/rstrip swallow
 * the whitespace beside the token. */
#include "tokenizer/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- trie --------------------------------------------------------------- */

static int trie_node(hr__trie *t) {
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 256;
        void *p = realloc(t->nodes, nc * sizeof *t->nodes);
        if (!p)
            return -1;
        t->nodes = p;
        t->cap = nc;
    }
    t->nodes[t->n].tok = -1;
    return (int)t->n++;
}

static int trie_insert(hr__trie *t, const char *s, size_t n, int32_t tok) {
    if (!n)
        return 0;
    if (!t->n && trie_node(t) < 0)
        return HR_ENOMEM;
    uint64_t node = 0;
    t->first[(unsigned char)s[0] >> 6] |= 1ull << ((unsigned char)s[0] & 63);
    for (size_t i = 0; i < n; i++) {
        uint64_t key = node << 8 | (unsigned char)s[i], child;
        if (!hr__u64map_get(&t->edges, key, &child)) {
            int c = trie_node(t);
            if (c < 0 || hr__u64map_put(&t->edges, key, (uint64_t)c))
                return HR_ENOMEM;
            child = (uint64_t)c;
        }
        node = child;
    }
    t->nodes[node].tok = tok;
    return 0;
}

/* Longest token starting at s[0]: its index (or -1) and length in *len. */
static int32_t trie_longest(const hr__trie *t, const char *s, size_t n, size_t *len) {
    int32_t best = -1;
    uint64_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t child;
        if (!hr__u64map_get(&t->edges, node << 8 | (unsigned char)s[i], &child))
            break;
        node = child;
        if (t->nodes[node].tok >= 0) {
            best = t->nodes[node].tok;
            *len = i + 1;
        }
    }
    return best;
}

static void trie_free(hr__trie *t) {
    free(t->nodes);
    hr__u64map_free(&t->edges);
    memset(t, 0, sizeof *t);
}

/* ---- set ---------------------------------------------------------------- */

int hr__added_add(hr__addedset *a, const char *content, size_t len, int32_t id,
                  int special, int lstrip, int rstrip, int normalized,
                  int single_word) {
    int32_t k = hr__strmap_get(&a->by_content, content, len);
    if (k < 0) {
        hr__added *v = realloc(a->v, (size_t)(a->n + 1) * sizeof *v);
        if (!v)
            return HR_ENOMEM;
        a->v = v;
        k = a->n++;
        memset(&a->v[k], 0, sizeof a->v[k]);
        a->v[k].content = malloc(len + 1);
        if (!a->v[k].content) {
            a->n--;
            return HR_ENOMEM;
        }
        memcpy(a->v[k].content, content, len);
        a->v[k].content[len] = 0;
        a->v[k].len = len;
        if (hr__strmap_put(&a->by_content, content, len, k))
            return HR_ENOMEM;
    }
    hr__added *x = &a->v[k];
    x->id = id;
    x->special = (uint8_t)special;
    x->lstrip = (uint8_t)lstrip;
    x->rstrip = (uint8_t)rstrip;
    x->normalized = (uint8_t)normalized;
    x->single_word = (uint8_t)single_word;
    return 0;
}

int hr__added_build(hr__addedset *a, const hr__normseq *norm,
                    pcre2_match_data *md, hr_error *err) {
    hr__buf out = {0}, tmp = {0};
    int rc = 0;
    trie_free(&a->raw);
    trie_free(&a->normed);
    for (int i = 0; i < a->n && !rc; i++) {
        hr__added *x = &a->v[i];
        if (!x->normalized) {
            rc = trie_insert(&a->raw, x->content, x->len, i);
            continue;
        }
        free(x->norm);
        x->norm = NULL;
        if (norm->n) {
            rc = hr__norm_apply(norm, x->content, x->len, &out, &tmp, md);
            if (rc)
                break;
            if (out.len != x->len || memcmp(out.p, x->content, x->len)) {
                x->norm = malloc(out.len + 1);
                if (!x->norm) {
                    rc = HR_ENOMEM;
                    break;
                }
                memcpy(x->norm, out.p, out.len);
                x->norm[out.len] = 0;
                x->norm_len = out.len;
            }
        }
        rc = x->norm ? trie_insert(&a->normed, x->norm, x->norm_len, i)
                     : trie_insert(&a->normed, x->content, x->len, i);
    }
    free(out.p);
    free(tmp.p);
    if (rc)
        return hr_err(err, rc, "added tokens: %s", hr_strerror(rc));
    return 0;
}

void hr__added_free(hr__addedset *a) {
    if (!a)
        return;
    for (int i = 0; i < a->n; i++) {
        free(a->v[i].content);
        free(a->v[i].norm);
    }
    free(a->v);
    hr__strmap_free(&a->by_content);
    trie_free(&a->raw);
    trie_free(&a->normed);
    memset(a, 0, sizeof *a);
}

/* ---- matching ----------------------------------------------------------- */

static int last_is_word(const char *s, size_t n) {
    if (!n)
        return 0;
    size_t i = n - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    int32_t cp;
    return hr__utf8_decode(s + i, n - i, &cp) && hr__uni_is_word(cp);
}

static int first_is_word(const char *s, size_t n) {
    int32_t cp;
    return n && hr__utf8_decode(s, n, &cp) && hr__uni_is_word(cp);
}

/* Start of the whitespace run that ends s[0..n). */
static size_t trailing_space_start(const char *s, size_t n) {
    size_t b = n;
    while (b > 0) {
        size_t i = b - 1;
        while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
            i--;
        int32_t cp;
        if (!hr__utf8_decode(s + i, b - i, &cp) || !hr__uni_is_space(cp))
            break;
        b = i;
    }
    return b;
}

static size_t leading_space_len(const char *s, size_t n) {
    size_t i = 0;
    int32_t cp;
    int k;
    while (i < n && (k = hr__utf8_decode(s + i, n - i, &cp)) && hr__uni_is_space(cp))
        i += (size_t)k;
    return i;
}

static int split_text(const hr__addedset *a, const hr__trie *t, int split_special,
                      const char *s, size_t n, int at_start, hr__plist *out) {
    size_t start_off = 0, pos = 0;
    while (pos < n) {
        unsigned char c = (unsigned char)s[pos];
        if (!(t->first[c >> 6] >> (c & 63) & 1)) {
            pos++;
            continue;
        }
        size_t len = 0;
        int32_t k = trie_longest(t, s + pos, n - pos, &len);
        if (k < 0) {
            pos++;
            continue;
        }
        const hr__added *x = &a->v[k];
        size_t start = pos, stop = pos + len;
        pos = stop;
        if (split_special && x->special)
            continue;
        if (x->single_word && (last_is_word(s, start) || first_is_word(s + stop, n - stop)))
            continue;
        if (x->lstrip) {
            size_t ns = trailing_space_start(s, start);
            start = ns > start_off ? ns : start_off;
        }
        if (x->rstrip)
            stop += leading_space_len(s + stop, n - stop);
        int rc = 0;
        if (start_off < start)
            rc = hr__plist_push(out, s + start_off, start - start_off, -1,
                                at_start && start_off == 0);
        if (!rc)
            rc = hr__plist_push(out, "", 0, x->id, 0);
        if (rc)
            return rc;
        start_off = stop;
    }
    if (start_off < n)
        return hr__plist_push(out, s + start_off, n - start_off, -1,
                              at_start && start_off == 0);
    return 0;
}

int hr__added_split(const hr__addedset *a, int normalized, int split_special,
                    const hr__plist *in, hr__plist *out) {
    const hr__trie *t = normalized ? &a->normed : &a->raw;
    hr__plist_reset(out);
    for (size_t i = 0; i < in->n; i++) {
        const hr__piece *x = &in->p[i];
        int rc;
        if (x->id >= 0 || !t->n)
            rc = hr__plist_push(out, in->buf + x->off, x->len, x->id, x->at_start);
        else
            rc = split_text(a, t, split_special, in->buf + x->off, x->len,
                            x->at_start, out);
        if (rc)
            return rc;
    }
    return 0;
}
