/* Hash maps, piece lists and byte buffers used by the tokenizer. */
#include "tokenizer/internal.h"

#include "hearth.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- growable arrays ---------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q)
        return HR_ENOMEM;
    *p = q;
    *cap = nc;
    return 0;
}

int hr__buf_reserve(hr__buf *b, size_t n) {
    return grow((void **)&b->p, &b->cap, b->len + n + 1, 1);
}

int hr__buf_put(hr__buf *b, const void *s, size_t n) {
    if (hr__buf_reserve(b, n))
        return HR_ENOMEM;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int hr_tokens_push(hr_tokens *t, int32_t id) {
    if (grow((void **)&t->ids, &t->cap, t->n + 1, sizeof *t->ids))
        return HR_ENOMEM;
    t->ids[t->n++] = id;
    return 0;
}

void hr_tokens_free(hr_tokens *t) {
    if (!t)
        return;
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

/* ---- piece lists -------------------------------------------------------- */

char *hr__plist_reserve(hr__plist *l, size_t n) {
    if (grow((void **)&l->buf, &l->bcap, l->len + n + 1, 1))
        return NULL;
    return l->buf + l->len;
}

int hr__plist_push(hr__plist *l, const char *s, size_t len, int32_t id,
                   int at_start) {
    if (len == 0 && id < 0)
        return 0;
    if (len > UINT32_MAX || l->len + len > UINT32_MAX)
        return HR_ERANGE;
    if (grow((void **)&l->p, &l->cap, l->n + 1, sizeof *l->p))
        return HR_ENOMEM;
    char *dst = hr__plist_reserve(l, len);
    if (!dst)
        return HR_ENOMEM;
    if (len)
        memcpy(dst, s, len);
    l->p[l->n++] = (hr__piece){(uint32_t)l->len, (uint32_t)len, id,
                               (uint8_t)at_start};
    l->len += len;
    return 0;
}

int hr__plist_commit(hr__plist *l, size_t len, int32_t id, int at_start) {
    if (len == 0 && id < 0)
        return 0;
    if (l->len + len > UINT32_MAX)
        return HR_ERANGE;
    if (grow((void **)&l->p, &l->cap, l->n + 1, sizeof *l->p))
        return HR_ENOMEM;
    l->p[l->n++] = (hr__piece){(uint32_t)l->len, (uint32_t)len, id,
                               (uint8_t)at_start};
    l->len += len;
    return 0;
}

void hr__plist_reset(hr__plist *l) {
    l->n = 0;
    l->len = 0;
}

void hr__plist_free(hr__plist *l) {
    if (!l)
        return;
    free(l->p);
    free(l->buf);
    memset(l, 0, sizeof *l);
}

/* ---- string map --------------------------------------------------------- */

static int sm_rehash(hr__strmap *m, size_t cap) {
    uint32_t *s = calloc(cap, sizeof *s);
    if (!s)
        return HR_ENOMEM;
    for (size_t i = 0; i < m->n; i++) {
        size_t h = (size_t)m->ent[i].hash & (cap - 1);
        while (s[h])
            h = (h + 1) & (cap - 1);
        s[h] = (uint32_t)(i + 1);
    }
    free(m->slots);
    m->slots = s;
    m->cap = cap;
    return 0;
}

int32_t hr__strmap_get(const hr__strmap *m, const char *k, size_t len) {
    if (!m->cap)
        return -1;
    uint64_t h = XXH3_64bits(k, len);
    size_t i = (size_t)h & (m->cap - 1);
    for (;;) {
        uint32_t e = m->slots[i];
        if (!e)
            return -1;
        const struct hr__sm_ent *x = &m->ent[e - 1];
        if (x->hash == h && x->len == len && !memcmp(m->pool + x->off, k, len))
            return x->val;
        i = (i + 1) & (m->cap - 1);
    }
}

int hr__strmap_put(hr__strmap *m, const char *k, size_t len, int32_t val) {
    if (len > UINT32_MAX || m->pool_len + len > UINT32_MAX)
        return HR_ERANGE;
    if ((m->n + 1) * 2 > m->cap && sm_rehash(m, m->cap ? m->cap * 2 : 64))
        return HR_ENOMEM;
    uint64_t h = XXH3_64bits(k, len);
    size_t i = (size_t)h & (m->cap - 1);
    for (;;) {
        uint32_t e = m->slots[i];
        if (!e)
            break;
        struct hr__sm_ent *x = &m->ent[e - 1];
        if (x->hash == h && x->len == len && !memcmp(m->pool + x->off, k, len)) {
            x->val = val;
            return 0;
        }
        i = (i + 1) & (m->cap - 1);
    }
    if (grow((void **)&m->ent, &m->ent_cap, m->n + 1, sizeof *m->ent) ||
        grow((void **)&m->pool, &m->pool_cap, m->pool_len + len + 1, 1))
        return HR_ENOMEM;
    if (len)
        memcpy(m->pool + m->pool_len, k, len);
    m->ent[m->n] = (struct hr__sm_ent){h, (uint32_t)m->pool_len, (uint32_t)len, val};
    m->pool_len += len;
    m->slots[i] = (uint32_t)(++m->n);
    return 0;
}

void hr__strmap_clear(hr__strmap *m) {
    if (m->slots)
        memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->n = 0;
    m->pool_len = 0;
}

void hr__strmap_free(hr__strmap *m) {
    if (!m)
        return;
    free(m->slots);
    free(m->ent);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

/* ---- u64 map ------------------------------------------------------------ */

static inline size_t mix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k;
}

static int um_rehash(hr__u64map *m, size_t cap) {
    uint64_t *k = malloc(cap * sizeof *k), *v = malloc(cap * sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return HR_ENOMEM;
    }
    memset(k, 0xff, cap * sizeof *k);
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == UINT64_MAX)
            continue;
        size_t h = mix64(m->keys[i]) & (cap - 1);
        while (k[h] != UINT64_MAX)
            h = (h + 1) & (cap - 1);
        k[h] = m->keys[i];
        v[h] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = k;
    m->vals = v;
    m->cap = cap;
    return 0;
}

int hr__u64map_put(hr__u64map *m, uint64_t key, uint64_t val) {
    if ((m->n + 1) * 2 > m->cap && um_rehash(m, m->cap ? m->cap * 2 : 64))
        return HR_ENOMEM;
    size_t h = mix64(key) & (m->cap - 1);
    while (m->keys[h] != UINT64_MAX && m->keys[h] != key)
        h = (h + 1) & (m->cap - 1);
    if (m->keys[h] == UINT64_MAX)
        m->n++;
    m->keys[h] = key;
    m->vals[h] = val;
    return 0;
}

int hr__u64map_get(const hr__u64map *m, uint64_t key, uint64_t *val) {
    if (!m->cap)
        return 0;
    size_t h = mix64(key) & (m->cap - 1);
    for (;;) {
        uint64_t k = m->keys[h];
        if (k == key) {
            *val = m->vals[h];
            return 1;
        }
        if (k == UINT64_MAX)
            return 0;
        h = (h + 1) & (m->cap - 1);
    }
}

void hr__u64map_free(hr__u64map *m) {
    if (!m)
        return;
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
