#include "engine/lcache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define LCACHE_ENTRIES 16

typedef struct entry {
    uint64_t key, seed;
    int n, cap;     /* tokens (0: empty), and room for them */
    int32_t *tokens;
    float *logits;
    uint64_t used;  /* the clock at its last put or hit */
    bool pending;   /* its SSD file still to be queued (the writer's queue was full) */
} entry;

struct hr_lcache {
    int n_vocab, ssd_min;
    hr_ssd *ssd;
    entry e[LCACHE_ENTRIES];
    uint64_t clock;
};

/* The files' and the entries' key: the tokens hashed with the seed. */
static uint64_t key_of(uint64_t seed, const int32_t *tokens, int n) {
    return XXH64(tokens, (size_t)n * sizeof *tokens, seed);
}

hr_lcache *hr_lcache_new(int n_vocab, hr_ssd *ssd, int ssd_min) {
    hr_lcache *lc = calloc(1, sizeof *lc);
    if (lc) {
        lc->n_vocab = n_vocab;
        lc->ssd = ssd;
        lc->ssd_min = ssd_min;
    }
    return lc;
}

void hr_lcache_free(hr_lcache *lc) {
    if (!lc)
        return;
    for (int i = 0; i < LCACHE_ENTRIES; i++) {
        free(lc->e[i].tokens);
        free(lc->e[i].logits);
    }
    free(lc);
}

static entry *find(hr_lcache *lc, uint64_t key, uint64_t seed, const int32_t *tokens, int n) {
    for (int i = 0; i < LCACHE_ENTRIES; i++) {
        entry *e = &lc->e[i];
        if (e->n == n && e->key == key && e->seed == seed &&
            !memcmp(e->tokens, tokens, (size_t)n * sizeof *tokens))
            return e;
    }
    return NULL;
}

/* The entry to fill for a new prompt: an empty one, else the least
 * recently used (emptied). */
static entry *victim(hr_lcache *lc) {
    entry *v = &lc->e[0];
    for (int i = 0; i < LCACHE_ENTRIES && v->n; i++)
        if (!lc->e[i].n || lc->e[i].used < v->used)
            v = &lc->e[i];
    return v;
}

/* Into RAM (the entry's buffers reused where they fit); NULL when out of
 * memory. */
static entry *keep(hr_lcache *lc, uint64_t key, uint64_t seed, const int32_t *tokens, int n,
                   const float *logits) {
    entry *e = victim(lc);
    e->n = 0; /* empty until complete */
    e->pending = false;
    if (e->cap < n) {
        int32_t *t = realloc(e->tokens, (size_t)n * sizeof *t);
        if (!t)
            return NULL;
        e->tokens = t;
        e->cap = n;
    }
    if (!e->logits && !(e->logits = malloc((size_t)lc->n_vocab * sizeof *e->logits)))
        return NULL;
    memcpy(e->tokens, tokens, (size_t)n * sizeof *tokens);
    memcpy(e->logits, logits, (size_t)lc->n_vocab * sizeof *logits);
    e->key = key;
    e->seed = seed;
    e->n = n;
    e->used = ++lc->clock;
    return e;
}

void hr_lcache_put(hr_lcache *lc, uint64_t seed, const int32_t *tokens, int n,
                   const float *logits) {
    if (!lc || n <= 0)
        return;
    uint64_t key = key_of(seed, tokens, n);
    entry *e = find(lc, key, seed, tokens, n);
    if (e) { /* (the same prompt computed again: the same logits) */
        e->used = ++lc->clock;
        return;
    }
    e = keep(lc, key, seed, tokens, n, logits);
    if (lc->ssd && n >= lc->ssd_min) /* (a full queue: hr_lcache_poll retries) */
        if (hr_ssd_queue_logits(lc->ssd, key, seed, tokens, n, logits, lc->n_vocab) != 1 && e)
            e->pending = true;
}

int hr_lcache_poll(hr_lcache *lc) {
    int left = 0;
    for (int i = 0; lc && i < LCACHE_ENTRIES; i++) {
        entry *e = &lc->e[i];
        if (!e->pending)
            continue;
        if (!left && hr_ssd_queue_logits(lc->ssd, e->key, e->seed, e->tokens, e->n, e->logits,
                                         lc->n_vocab) == 1)
            e->pending = false;
        else
            left++;
    }
    return left;
}

bool hr_lcache_get(hr_lcache *lc, uint64_t seed, const int32_t *tokens, int n, float *out) {
    if (!lc || n <= 0)
        return false;
    uint64_t key = key_of(seed, tokens, n);
    entry *e = find(lc, key, seed, tokens, n);
    if (e) {
        memcpy(out, e->logits, (size_t)lc->n_vocab * sizeof *out);
        e->used = ++lc->clock;
    } else if (lc->ssd && n >= lc->ssd_min && hr_ssd_read_logits(lc->ssd, key, seed, tokens, n, out, lc->n_vocab)) {
        keep(lc, key, seed, tokens, n, out);
    } else {
        return false;
    }
    return true;
}
