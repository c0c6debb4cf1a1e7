#include "engine/pcache.h"

#include "core/timer.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- entries --------------------------------------------------------------------- */

/* One indexed block. Entries are hashed by their parent's key, so the
 * children of a prefix (the candidates for the next block) share a bucket. */
typedef struct entry {
    uint64_t parent;             /* key of the block before it; 0 for a first block */
    uint64_t key;                /* its own key (full blocks; the SSD file name) */
    int32_t block;
    int32_t n;                   /* tokens held: HR_KV_BLOCK, or fewer for a tail */
    int32_t tokens[HR_KV_BLOCK]; /* the content [0, n), checked on every hit */
    double used;                 /* last hit or insert, hr_now() */
    bool pending;                /* a full block not yet queued for the SSD */
    void *state;                 /* a full block's recurrent state after it, or NULL */
    struct entry *hnext;         /* hash bucket chain */
    struct entry *prev, *next;   /* LRU list, most recent first */
} entry;

struct hr_pcache {
    hr_kv *kv;
    hr_ssd *ssd;
    double demote_idle;
    int max_blocks, n;
    int n_pending;  /* entries whose SSD write waits for room in the queue */
    size_t state_bytes; /* hybrid models: states kept beside full blocks */
    int n_states, max_states; /* states held; at most (LRU, hr_pcache_keep_states) */
    entry **buckets;
    size_t n_buckets;
    entry lru; /* sentinel */
};

hr_pcache *hr_pcache_new(hr_kv *kv, int max_blocks, hr_ssd *ssd, double demote_idle) {
    hr_pcache *pc = calloc(1, sizeof *pc);
    if (!pc)
        return NULL;
    pc->kv = kv;
    pc->ssd = ssd;
    pc->demote_idle = demote_idle;
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

static entry **bucket(const hr_pcache *pc, uint64_t parent) {
    return &pc->buckets[parent & (pc->n_buckets - 1)];
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

static void touch(hr_pcache *pc, entry *e) {
    lru_unlink(e);
    lru_front(pc, e);
    e->used = hr_now();
}

static void drop(hr_pcache *pc, entry *e) {
    entry **pp = bucket(pc, e->parent);
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(e);
    hr_kv_unref(pc->kv, e->block);
    pc->n--;
    pc->n_pending -= e->pending;
    pc->n_states -= e->state != NULL;
    free(e->state);
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

/* Queue a pending entry's SSD write; the writer reads the block, so it is
 * held until hr_ssd_done gives it back. A full queue leaves it pending (the
 * next poll retries), and so does a tier paused after a disk error (it
 * comes back by itself). false when not queued. */
static bool queue_write(hr_pcache *pc, entry *e) {
    hr_kv_ref(pc->kv, e->block);
    int r = hr_ssd_queue(pc->ssd, e->key, e->tokens, e->block, e->state);
    if (r == 1) {
        e->pending = false;
        pc->n_pending--;
        return true;
    }
    hr_kv_unref(pc->kv, e->block);
    return false;
}

/* Index block (n tokens) under parent (the cache takes over one reference
 * the caller holds); a full block's SSD write is queued when write is set.
 * NULL when out of memory. */
static entry *add(hr_pcache *pc, uint64_t parent, uint64_t key, const int32_t *tokens, int n,
                  int32_t block, bool write, void *state) {
    entry *e = malloc(sizeof *e);
    if (!e)
        return NULL;
    e->state = state;
    pc->n_states += state != NULL;
    e->parent = parent;
    e->key = key;
    e->block = block;
    e->n = n;
    memset(e->tokens, 0, sizeof e->tokens);
    memcpy(e->tokens, tokens, (size_t)n * sizeof *tokens);
    entry **b = bucket(pc, parent);
    e->hnext = *b;
    *b = e;
    e->used = hr_now();
    lru_front(pc, e);
    pc->n++;
    e->pending = pc->ssd && write && n == HR_KV_BLOCK;
    pc->n_pending += e->pending;
    if (e->pending)
        queue_write(pc, e);
    return e;
}

static uint64_t block_key(uint64_t parent, const int32_t *tokens) {
    return XXH3_64bits_withSeed(tokens, HR_KV_BLOCK * sizeof *tokens, parent);
}

/* Length of the common prefix of a[0..n) and b[0..n). */
static int common(const int32_t *a, const int32_t *b, int n) {
    int i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* ---- lookup ---------------------------------------------------------------------- */

static entry *find_full(hr_pcache *pc, uint64_t parent, const int32_t *tokens) {
    for (entry *e = *bucket(pc, parent); e; e = e->hnext)
        if (e->parent == parent && e->n == HR_KV_BLOCK &&
            !memcmp(e->tokens, tokens, sizeof e->tokens))
            return e;
    return NULL;
}

/* A RAM miss of a full block: read it back from the SSD tier. */
static entry *from_ssd(hr_pcache *pc, uint64_t parent, uint64_t key, const int32_t *tokens) {
    if (pc->kv->n_free == 0)
        hr_pcache_evict(pc, 1);
    int32_t blk = hr_kv_alloc(pc->kv);
    if (blk < 0)
        return NULL;
    entry *e = NULL;
    void *state = pc->state_bytes ? malloc(pc->state_bytes) : NULL;
    bool has = false;
    if ((pc->state_bytes && !state) ||
        !hr_ssd_read(pc->ssd, key, tokens, pc->kv, blk, state, &has) ||
        !(e = add(pc, parent, key, tokens, HR_KV_BLOCK, blk, false, has ? state : NULL))) {
        hr_kv_unref(pc->kv, blk);
        free(state);
        return NULL;
    }
    if (!has)
        free(state);
    return e;
}

/* The child of parent (a full block or a tail) sharing the longest run of
 * first tokens with tokens[0..n): its rows [0, *len) are copied into a
 * fresh block, returned with refcount 1. -1 when no child shares a token
 * or no block is free. */
static int32_t copy_partial(hr_pcache *pc, uint64_t parent, const int32_t *tokens, int n,
                            int *len) {
    entry *best = NULL;
    int l_best = 0;
    for (entry *e = *bucket(pc, parent); e; e = e->hnext) {
        if (e->parent != parent)
            continue;
        int l = common(e->tokens, tokens, e->n < n ? e->n : n);
        if (l > l_best) {
            best = e;
            l_best = l;
        }
    }
    if (!best)
        return -1;
    hr_kv_ref(pc->kv, best->block); /* not evicted to make room for its copy */
    if (pc->kv->n_free == 0)
        hr_pcache_evict(pc, 1);
    int32_t blk = hr_kv_alloc(pc->kv);
    if (blk >= 0) {
        hr_kv_copy_rows(pc->kv, blk, best->block, l_best);
        touch(pc, best);
        *len = l_best;
    }
    hr_kv_unref(pc->kv, best->block);
    return blk;
}

/* Blocks whose SSD files are asked for ahead of the one being read back
 * (hr_ssd_prefetch): enough to keep the disk's queue full. */
#define SSD_AHEAD 32

/* The chain of whole cached blocks of tokens[0..n), at most max_blocks,
 * a reference each into blocks[]; *last: the last one's entry. */
static int whole_blocks(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n,
                        int max_blocks, int32_t *blocks, uint64_t *key_out, entry **last) {
    uint64_t key = seed, akey = seed; /* akey: the key after block `ahead` - 1 */
    int got = 0, ahead = 0;           /* blocks [got, ahead) are being prefetched */
    for (; got < max_blocks && (got + 1) * HR_KV_BLOCK <= n; got++) {
        const int32_t *t = tokens + (size_t)got * HR_KV_BLOCK;
        uint64_t next = block_key(key, t);
        entry *e = find_full(pc, key, t);
        if (!e && pc->ssd) {
            if (ahead <= got) {
                ahead = got;
                akey = key;
            }
            uint64_t keys[SSD_AHEAD];
            int k = 0;
            for (; ahead < got + SSD_AHEAD && ahead < max_blocks &&
                   (ahead + 1) * HR_KV_BLOCK <= n; ahead++)
                keys[k++] = akey = block_key(akey, tokens + (size_t)ahead * HR_KV_BLOCK);
            hr_ssd_prefetch(pc->ssd, keys, k);
            e = from_ssd(pc, key, next, t);
        }
        if (!e)
            break;
        touch(pc, e);
        hr_kv_ref(pc->kv, e->block);
        blocks[got] = e->block;
        key = next;
        last[got] = e;
    }
    *key_out = key;
    return got;
}

int hr_pcache_lookup_state(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n,
                           int max_blocks, int32_t *blocks, int *n_tokens, const void **state) {
    *state = NULL;
    *n_tokens = 0;
    if (max_blocks <= 0)
        return 0;
    entry **last = malloc((size_t)max_blocks * sizeof *last);
    if (!last)
        return 0;
    uint64_t key;
    int got = whole_blocks(pc, seed, tokens, n, max_blocks, blocks, &key, last);
    while (got > 0 && !last[got - 1]->state) /* back to the last state */
        hr_kv_unref(pc->kv, blocks[--got]);
    if (got > 0)
        *state = last[got - 1]->state;
    free(last);
    *n_tokens = got * HR_KV_BLOCK;
    return got;
}

int hr_pcache_lookup(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n,
                     int max_blocks, int32_t *blocks, int *n_tokens) {
    uint64_t key = seed;
    entry *lastbuf[64], **last = max_blocks <= 64 ? lastbuf : malloc((size_t)max_blocks *
                                                                      sizeof *last);
    int got = last ? whole_blocks(pc, seed, tokens, n, max_blocks, blocks, &key, last) : 0;
    if (last != lastbuf)
        free(last);
    if (!last)
        return *n_tokens = 0;
    *n_tokens = got * HR_KV_BLOCK;
    int len = 0, rest = n - got * HR_KV_BLOCK;
    if (got < max_blocks && rest > 0) {
        int32_t blk = copy_partial(pc, key, tokens + (size_t)got * HR_KV_BLOCK, rest, &len);
        if (blk >= 0) {
            blocks[got++] = blk;
            *n_tokens += len;
        }
    }
    return got;
}

/* ---- insert and evict ------------------------------------------------------------ */

/* Index block (tokens[0..n)) under parent, unless an entry holds the same
 * first n tokens already (then it is touched). Tails that it extends and
 * only the cache holds are dropped. false when the cache takes no more. */
static bool index_block(hr_pcache *pc, uint64_t parent, const int32_t *tokens, int n,
                        int32_t block, void **state) {
    for (entry *e = *bucket(pc, parent), *nx; e; e = nx) {
        nx = e->hnext;
        if (e->parent != parent)
            continue;
        if (e->n >= n && common(e->tokens, tokens, n) == n) {
            touch(pc, e);
            if (*state && !e->state && e->n == HR_KV_BLOCK) { /* it gains a state */
                e->state = *state;
                *state = NULL;
                pc->n_states++;
                if (pc->ssd && !e->pending) { /* its file, rewritten with it */
                    e->pending = true;
                    pc->n_pending++;
                    queue_write(pc, e);
                }
            }
            return true;
        }
        if (e->n < n && common(e->tokens, tokens, e->n) == e->n &&
            pc->kv->refs[e->block] == 1)
            drop(pc, e);
    }
    if (pc->max_blocks && pc->n >= pc->max_blocks && hr_pcache_evict(pc, 1) == 0)
        return false; /* full of blocks in use */
    uint64_t key = n == HR_KV_BLOCK ? block_key(parent, tokens) : 0;
    hr_kv_ref(pc->kv, block);
    void *st = n == HR_KV_BLOCK ? *state : NULL;
    if (!add(pc, parent, key, tokens, n, block, true, st)) {
        hr_kv_unref(pc->kv, block);
        return false;
    }
    if (st)
        *state = NULL;
    return true;
}

/* Past max_states, the least recently used entries let their states go (the
 * blocks stay, reusable by a longer prefix's state or not at all). An entry
 * being written to the SSD keeps its state until the write is queued. */
static void trim_states(hr_pcache *pc) {
    for (entry *e = pc->lru.prev; e != &pc->lru && pc->n_states > pc->max_states; e = e->prev)
        if (e->state && !e->pending) {
            free(e->state);
            e->state = NULL;
            pc->n_states--;
        }
}

void hr_pcache_insert_states(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n,
                             const int32_t *blocks, hr_pcache_state *states, int n_states) {
    uint64_t key = seed;
    for (int b = 0; b * HR_KV_BLOCK < n; b++) {
        const int32_t *t = tokens + (size_t)b * HR_KV_BLOCK;
        int m = n - b * HR_KV_BLOCK < HR_KV_BLOCK ? n - b * HR_KV_BLOCK : HR_KV_BLOCK;
        void *none = NULL, **st = &none;
        for (int i = 0; i < n_states; i++)
            if (states[i].data && states[i].pos == (b + 1) * HR_KV_BLOCK && m == HR_KV_BLOCK)
                st = &states[i].data;
        if (!index_block(pc, key, t, m, blocks[b], st))
            break;
        if (m == HR_KV_BLOCK)
            key = block_key(key, t);
    }
    for (int i = 0; i < n_states; i++) { /* those no entry took */
        free(states[i].data);
        states[i].data = NULL;
    }
    trim_states(pc);
}

void hr_pcache_insert(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n,
                      const int32_t *blocks) {
    hr_pcache_insert_states(pc, seed, tokens, n, blocks, NULL, 0);
}

void hr_pcache_keep_states(hr_pcache *pc, size_t state_bytes, size_t max_bytes) {
    pc->state_bytes = state_bytes;
    pc->max_states = state_bytes ? (int)(max_bytes / state_bytes) : 0;
    if (pc->max_states < 2)
        pc->max_states = 2;
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

void hr_pcache_poll(hr_pcache *pc, double now) {
    if (!pc->ssd)
        return;
    int32_t done[64];
    int n;
    while ((n = hr_ssd_done(pc->ssd, done, 64)) > 0)
        for (int i = 0; i < n; i++)
            hr_kv_unref(pc->kv, done[i]);
    /* writes that found the queue full, oldest first, while there is room */
    for (entry *e = pc->lru.prev; pc->n_pending && e != &pc->lru; e = e->prev)
        if (e->pending && !queue_write(pc, e))
            break;
    if (pc->demote_idle <= 0)
        return;
    /* idle full entries nobody uses leave RAM (they are on SSD); tails and
     * blocks still waiting for their write, which are not, stay until evicted */
    for (entry *e = pc->lru.prev; e != &pc->lru;) {
        entry *prev = e->prev;
        if (now - e->used < pc->demote_idle)
            break; /* the rest are more recent */
        if (e->n == HR_KV_BLOCK && !e->pending && pc->kv->refs[e->block] == 1)
            drop(pc, e);
        e = prev;
    }
}
