/* The bounded LRU map (lru.h): slots in one array, chained buckets, a
 * doubly linked recency list through the slots (indices, -1: none). */
#include "route/lru.h"

#include <stdlib.h>

typedef struct slot {
    uint64_t key;
    int val;
    int prev, next; /* recency: prev is more recent */
    int chain;      /* the bucket's next slot */
} slot;

struct hr_lru {
    slot *s;
    int *bucket; /* nb heads */
    int nb, cap, n;
    int head, tail; /* most, least recently used */
};

hr_lru *hr_lru_new(int cap) {
    if (cap < 1)
        return NULL;
    hr_lru *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->cap = cap;
    for (m->nb = 16; m->nb < cap; m->nb *= 2)
        ;
    m->s = malloc((size_t)cap * sizeof *m->s);
    m->bucket = malloc((size_t)m->nb * sizeof *m->bucket);
    if (!m->s || !m->bucket) {
        hr_lru_free(m);
        return NULL;
    }
    for (int i = 0; i < m->nb; i++)
        m->bucket[i] = -1;
    m->head = m->tail = -1;
    return m;
}

void hr_lru_free(hr_lru *m) {
    if (!m)
        return;
    free(m->s);
    free(m->bucket);
    free(m);
}

int hr_lru_size(const hr_lru *m) { return m->n; }

static int bucket_of(const hr_lru *m, uint64_t key) {
    return (int)((key ^ key >> 29) & (uint64_t)(m->nb - 1));
}

static void unlink_recency(hr_lru *m, int i) {
    slot *x = &m->s[i];
    if (x->prev >= 0)
        m->s[x->prev].next = x->next;
    else
        m->head = x->next;
    if (x->next >= 0)
        m->s[x->next].prev = x->prev;
    else
        m->tail = x->prev;
}

static void push_front(hr_lru *m, int i) {
    m->s[i].prev = -1;
    m->s[i].next = m->head;
    if (m->head >= 0)
        m->s[m->head].prev = i;
    m->head = i;
    if (m->tail < 0)
        m->tail = i;
}

static int find(const hr_lru *m, uint64_t key) {
    for (int i = m->bucket[bucket_of(m, key)]; i >= 0; i = m->s[i].chain)
        if (m->s[i].key == key)
            return i;
    return -1;
}

static void unlink_bucket(hr_lru *m, int i) {
    int *p = &m->bucket[bucket_of(m, m->s[i].key)];
    while (*p != i)
        p = &m->s[*p].chain;
    *p = m->s[i].chain;
}

int hr_lru_get(hr_lru *m, uint64_t key) {
    int i = find(m, key);
    if (i < 0)
        return -1;
    unlink_recency(m, i);
    push_front(m, i);
    return m->s[i].val;
}

void hr_lru_put(hr_lru *m, uint64_t key, int val) {
    int i = find(m, key);
    if (i >= 0) {
        m->s[i].val = val;
        unlink_recency(m, i);
        push_front(m, i);
        return;
    }
    if (m->n < m->cap) {
        i = m->n++;
    } else { /* the least recently used slot is reused */
        i = m->tail;
        unlink_recency(m, i);
        unlink_bucket(m, i);
    }
    int b = bucket_of(m, key);
    m->s[i] = (slot){.key = key, .val = val, .chain = m->bucket[b]};
    m->bucket[b] = i;
    push_front(m, i);
}
