#include "engine/pcache.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct entry {
    uint64_t key;
    int32_t block;
    int32_t tokens[HR_KV_BLOCK]; /* the content, checked on every hit */
    struct entry *hnext;         /* hash bucket chain */
    struct entry *prev, *next;   /* LRU list, most recent first */
} entry;

struct hr_pcache {
    hr_kv *kv;
    int max_blocks, n;
    entry **buckets;
    size_t n_buckets;
    entry lru; /* sentinel */
};

hr_pcache *hr_pcache_new(hr_kv *kv, int max_blocks) {
    hr_pcache *pc = calloc(1, sizeof *pc);
    if (!pc)
        return NULL;
    pc->kv = kv;
    pc->max_blocks = max_blocks;
    pc->n_buckets = 1;
    while (pc->n_buckets < (size_t)kv->n_blocks * 2)
        pc->n_buckets <<= 1;
    pc->buckets = calloc(pc->n_buckets, sizeof *pc->buckets);
    if (!pc->buckets) {
        free(pc);
        return NULL;
    }
    pc->lru.prev = pc->lru.next = &pc->lru;
    return pc;
}

static void lru_unlink(entry *e) {
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_front(hr_pcache *pc, entry *e) {
    e->next = pc->lru.next;
    e->prev = &pc->lru;
    pc->lru.next->prev = e;
    pc->lru.next = e;
}

static void drop(hr_pcache *pc, entry *e) {
    entry **pp = &pc->buckets[e->key & (pc->n_buckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(e);
    hr_kv_unref(pc->kv, e->block);
    pc->n--;
    free(e);
}

void hr_pcache_free(hr_pcache *pc) {
    if (!pc)
        return;
    while (pc->lru.next != &pc->lru)
        drop(pc, pc->lru.next);
    free(pc->buckets);
    free(pc);
}

static uint64_t block_key(uint64_t parent, const int32_t *tokens) {
    return XXH3_64bits_withSeed(tokens, HR_KV_BLOCK * sizeof *tokens, parent);
}

static entry *find(hr_pcache *pc, uint64_t key, const int32_t *tokens) {
    for (entry *e = pc->buckets[key & (pc->n_buckets - 1)]; e; e = e->hnext)
        if (e->key == key && !memcmp(e->tokens, tokens, sizeof e->tokens))
            return e;
    return NULL;
}

int hr_pcache_lookup(hr_pcache *pc, const int32_t *tokens, int n, int max_blocks,
                     int32_t *blocks) {
    uint64_t key = 0;
    int got = 0;
    for (int b = 0; b < max_blocks && (b + 1) * HR_KV_BLOCK <= n; b++) {
        const int32_t *t = tokens + (size_t)b * HR_KV_BLOCK;
        key = block_key(key, t);
        entry *e = find(pc, key, t);
        if (!e)
            break;
        lru_unlink(e);
        lru_front(pc, e);
        hr_kv_ref(pc->kv, e->block);
        blocks[got++] = e->block;
    }
    return got;
}

void hr_pcache_insert(hr_pcache *pc, const int32_t *tokens, int n_blocks,
                      const int32_t *blocks) {
    uint64_t key = 0;
    for (int b = 0; b < n_blocks; b++) {
        const int32_t *t = tokens + (size_t)b * HR_KV_BLOCK;
        key = block_key(key, t);
        entry *e = find(pc, key, t);
        if (e) {
            lru_unlink(e);
            lru_front(pc, e);
            continue;
        }
        if (pc->max_blocks && pc->n >= pc->max_blocks && hr_pcache_evict(pc, 1) == 0)
            return; /* full of blocks in use: index no more */
        if (!(e = malloc(sizeof *e)))
            return;
        e->key = key;
        e->block = blocks[b];
        memcpy(e->tokens, t, sizeof e->tokens);
        size_t h = key & (pc->n_buckets - 1);
        e->hnext = pc->buckets[h];
        pc->buckets[h] = e;
        lru_front(pc, e);
        hr_kv_ref(pc->kv, e->block);
        pc->n++;
    }
}

int hr_pcache_evict(hr_pcache *pc, int n) {
    int freed = 0;
    for (entry *e = pc->lru.prev; e != &pc->lru && freed < n;) {
        entry *prev = e->prev;
        if (pc->kv->refs[e->block] == 1) { /* only the cache holds it */
            drop(pc, e);
            freed++;
        }
        e = prev;
    }
    return freed;
}

int hr_pcache_blocks(const hr_pcache *pc) { return pc->n; }
