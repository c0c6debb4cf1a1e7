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
    uint64_t key;                /* its SSD file's name: block_key, or tail_key(parent) */
    int32_t block;
    int32_t n;                   /* tokens held: HR_KV_BLOCK, or fewer for a tail */
    int32_t tokens[HR_KV_BLOCK]; /* the content [0, n), checked on every hit */
    double used;                 /* last hit or insert, hr_now() */
    bool pending;                /* a full block not yet queued for the SSD */
    bool reading;                /* its block is being read back (pc->run) */
    void *state;                 /* a full block's recurrent state after it, or NULL */
    struct entry *hnext;         /* hash bucket chain */
    struct entry *prev, *next;   /* LRU list, most recent first */
} entry;

#define PTAILS 64

struct hr_pcache {
    hr_kv *kv;
    hr_ssd *ssd;
    double demote_idle;
    int max_blocks, n;
    int n_pending;  /* entries whose SSD write waits for room in the queue */
    /* prompts' own tails (hr_pcache_keep_prompt_tail) waiting for room too,
     * oldest first, each holding a reference to its block */
    struct ptail {
        uint64_t key;
        int32_t t[HR_KV_BLOCK];
        int32_t block;
    } ptail[PTAILS];
    int n_ptail;
    size_t state_bytes; /* hybrid models: states kept beside full blocks */
    int n_states, max_states; /* states held; at most (LRU, hr_pcache_keep_states) */
    entry **buckets;
    size_t n_buckets;
    entry lru; /* sentinel */
    /* a run of blocks being read back from the SSD tier (hr_pcache_overlap):
     * its blocks, each with a reference of the run's, and their entries
     * (NULL: not indexed) */
    bool overlap;
    bool whole; /* hr_pcache_whole_files */
    hr_ssd_run *run;
    int run_n;
    int32_t *run_blk;
    entry **run_ent;
    /* blocks of finished runs that failed their checks, still held by
     * whoever got them (hr_pcache_failed) */
    int32_t *failed;
    int n_failed;
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
    hr_pcache_settle(pc);
    for (int i = 0; i < pc->n_ptail; i++)
        hr_kv_unref(pc->kv, pc->ptail[i].block);
    free(pc->failed);
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
    int32_t t[HR_KV_BLOCK]; /* a tail's tokens, padded with -1 (ssd.h) */
    for (int i = 0; i < HR_KV_BLOCK; i++)
        t[i] = i < e->n ? e->tokens[i] : -1;
    int r = hr_ssd_queue(pc->ssd, e->key, t, e->block, e->state);
    if (r == 1) {
        e->pending = false;
        pc->n_pending--;
        return true;
    }
    hr_kv_unref(pc->kv, e->block);
    return false;
}

/* Index block (n tokens) under parent (the cache takes over one reference
 * the caller holds); its SSD write is queued when write is set (a tail's
 * too, but for a hybrid model: under tail_key(parent), where the newest
 * tail of a prefix stays for a restart). NULL when out of memory. */
static entry *add(hr_pcache *pc, uint64_t parent, uint64_t key, const int32_t *tokens, int n,
                  int32_t block, bool write, void *state) {
    entry *e = malloc(sizeof *e);
    if (!e)
        return NULL;
    e->state = state;
    e->reading = false;
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
    /* (hybrid models reuse whole blocks only: no tail written) */
    e->pending = pc->ssd && write && (n == HR_KV_BLOCK || !pc->state_bytes);
    pc->n_pending += e->pending;
    if (e->pending)
        queue_write(pc, e);
    return e;
}

static uint64_t block_key(uint64_t parent, const int32_t *tokens) {
    return XXH3_64bits_withSeed(tokens, HR_KV_BLOCK * sizeof *tokens, parent);
}

/* The SSD file name of the newest not-full block after parent. */
static uint64_t tail_key(uint64_t parent) {
    return XXH3_64bits_withSeed("tail", 4, parent);
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

/* ---- a run read back in the background ------------------------------------------ */

void hr_pcache_overlap(hr_pcache *pc, bool on) { pc->overlap = on; }

void hr_pcache_whole_files(hr_pcache *pc, bool on) { pc->whole = on; }

bool hr_pcache_reading(const hr_pcache *pc) { return pc->run != NULL; }

int hr_pcache_failed(hr_pcache *pc, const int32_t **blocks) {
    int n = pc->n_failed;
    *blocks = pc->failed;
    pc->n_failed = 0;
    return n;
}

/* Start reading blks[0..m) (keys, tokens t0: from_ssd_run's) in the
 * background: the leading ones there, their number (*run set), or -1 when
 * the run is to be read now (none can be left in flight). */
static int run_start(hr_pcache *pc, const uint64_t *keys, const int32_t *t0,
                     const int32_t *blks, int m) {
    if (!pc->overlap || pc->run || m <= 0)
        return -1;
    int32_t *fl = realloc(pc->failed, (size_t)(pc->n_failed + m) * sizeof *fl);
    if (fl)
        pc->failed = fl;
    pc->run_blk = malloc((size_t)m * sizeof *pc->run_blk);
    pc->run_ent = calloc((size_t)m, sizeof *pc->run_ent);
    hr_ssd_run *run = NULL;
    int r = fl && pc->run_blk && pc->run_ent
                ? hr_ssd_run_start(pc->ssd, keys, t0, pc->kv, blks, m, !pc->whole, &run)
                : -1;
    if (!run) {
        free(pc->run_blk);
        free(pc->run_ent);
        pc->run_blk = NULL;
        pc->run_ent = NULL;
        return r;
    }
    pc->run = run;
    pc->run_n = r;
    for (int i = 0; i < r; i++) { /* the run's references: freed by nobody meanwhile */
        pc->run_blk[i] = blks[i];
        hr_kv_ref(pc->kv, blks[i]);
    }
    pc->kv->gate = hr_ssd_run_gate(run);
    return r;
}

void hr_pcache_settle(hr_pcache *pc) {
    if (!pc->run)
        return;
    int good = hr_ssd_run_finish(pc->run);
    pc->run = NULL;
    pc->kv->gate = NULL;
    for (int i = 0; i < pc->run_n; i++) {
        entry *e = pc->run_ent[i];
        if (e)
            e->reading = false;
        if (i >= good && e) /* the first failure ends the run (hr_ssd_read_run's) */
            drop(pc, e);
    }
    for (int i = 0; i < pc->run_n; i++) {
        hr_kv_unref(pc->kv, pc->run_blk[i]);
        if (i >= good && pc->kv->refs[pc->run_blk[i]] > 0) /* (room: run_start's) */
            pc->failed[pc->n_failed++] = pc->run_blk[i];
    }
    free(pc->run_ent);
    free(pc->run_blk);
    pc->run_ent = NULL;
    pc->run_blk = NULL;
    pc->run_n = 0;
}

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
 * first tokens with tokens[0..n), *len of them; NULL when none shares one. */
static entry *best_child(hr_pcache *pc, uint64_t parent, const int32_t *tokens, int n,
                         int *len) {
    entry *best = NULL;
    *len = 0;
    for (entry *e = *bucket(pc, parent); e; e = e->hnext) {
        if (e->parent != parent)
            continue;
        int l = common(e->tokens, tokens, e->n < n ? e->n : n);
        if (l > *len) {
            best = e;
            *len = l;
        }
    }
    return best;
}

/* best_child's rows [0, *len) copied into a fresh block, returned with
 * refcount 1. -1 when no child shares a token or no block is free. */
static int32_t copy_partial(hr_pcache *pc, uint64_t parent, const int32_t *tokens, int n,
                            int *len) {
    int l_best;
    entry *best = best_child(pc, parent, tokens, n, &l_best);
    if (best && best->reading) { /* its rows are wanted now: the run ends first */
        hr_pcache_settle(pc);
        best = best_child(pc, parent, tokens, n, &l_best);
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

/* The newest tail after parent on the SSD tier (tail_key), indexed; not
 * read again while RAM holds a tail after parent (that one, or a newer one
 * this process made: a prompt sharing none of its tokens would otherwise
 * read the file, and index another copy of it, on every lookup). */
static void tail_from_ssd(hr_pcache *pc, uint64_t parent) {
    for (entry *e = *bucket(pc, parent); e; e = e->hnext)
        if (e->parent == parent && e->n < HR_KV_BLOCK)
            return;
    if (pc->kv->n_free == 0)
        hr_pcache_evict(pc, 1);
    int32_t blk = hr_kv_alloc(pc->kv), t[HR_KV_BLOCK];
    if (blk < 0)
        return;
    int n = hr_ssd_read_tail(pc->ssd, tail_key(parent), pc->kv, blk, t);
    if (n == 0 || !add(pc, parent, tail_key(parent), t, n, blk, false, NULL))
        hr_kv_unref(pc->kv, blk);
}

/* Blocks whose SSD files are asked for ahead of the one being read back
 * (hr_ssd_prefetch) on the one-by-one path: enough to keep the disk's queue
 * full. */
#define SSD_AHEAD 32

/* The RAM misses from block `got` of tokens (key: the key before it) up to
 * block end or the next block RAM holds, read back from the SSD tier at
 * once (hr_ssd_read_run) and indexed; with bg (and hr_pcache_overlap), left
 * reading in the background (run_start), indexed before they are in. How
 * many were (0: the first is not there, or no block is free). Models
 * without recurrent state. */
static int from_ssd_run(hr_pcache *pc, uint64_t key, const int32_t *tokens, int got, int end,
                        bool bg) {
    int m = end - got;
    uint64_t *keys = malloc((size_t)m * 2 * sizeof *keys);
    int32_t *blks = malloc((size_t)m * sizeof *blks);
    if (!keys || !blks) {
        free(keys);
        free(blks);
        return 0;
    }
    uint64_t *parents = keys + m;
    const int32_t *t0 = tokens + (size_t)got * HR_KV_BLOCK;
    for (int i = 0; i < m; i++) {
        if (i > 0 && find_full(pc, key, t0 + (size_t)i * HR_KV_BLOCK)) {
            m = i;
            break;
        }
        parents[i] = key;
        keys[i] = key = block_key(key, t0 + (size_t)i * HR_KV_BLOCK);
    }
    if (pc->kv->n_free < m)
        hr_pcache_evict(pc, m - pc->kv->n_free);
    if (m > pc->kv->n_free)
        m = pc->kv->n_free;
    for (int i = 0; i < m; i++)
        blks[i] = hr_kv_alloc(pc->kv);
    hr_ssd_run *was = pc->run;
    int r = bg ? run_start(pc, keys, t0, blks, m) : -1;
    if (r < 0)
        r = m ? hr_ssd_read_run(pc->ssd, keys, t0, pc->kv, blks, m) : 0;
    for (int i = 0; i < m; i++) {
        entry *e = NULL;
        if (i >= r || !(e = add(pc, parents[i], keys[i], t0 + (size_t)i * HR_KV_BLOCK,
                                HR_KV_BLOCK, blks[i], false, NULL))) {
            hr_kv_unref(pc->kv, blks[i]); /* (one being read: the run's reference holds it) */
            r = r < i ? r : i;
        } else if (pc->run != was) { /* started here: its entries */
            e->reading = true;
            pc->run_ent[i] = e;
        }
    }
    free(keys);
    free(blks);
    return r;
}

/* The chain of whole cached blocks of tokens[0..n), at most max_blocks,
 * a reference each into blocks[]; *last: the last one's entry. */
static int whole_blocks(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n,
                        int max_blocks, int32_t *blocks, uint64_t *key_out, entry **last) {
    uint64_t key = seed, akey = seed; /* akey: the key after block `ahead` - 1 */
    int got = 0, ahead = 0;           /* blocks [got, ahead) are being prefetched */
    int end = n / HR_KV_BLOCK < max_blocks ? n / HR_KV_BLOCK : max_blocks;
    for (; got < end; got++) {
        const int32_t *t = tokens + (size_t)got * HR_KV_BLOCK;
        uint64_t next = block_key(key, t);
        entry *e = find_full(pc, key, t);
        if (!e && pc->ssd && !pc->state_bytes) {
            if (from_ssd_run(pc, key, tokens, got, end, true) > 0)
                e = find_full(pc, key, t);
        } else if (!e && pc->ssd) { /* one by one: each block's state comes with it */
            if (ahead <= got) {
                ahead = got;
                akey = key;
            }
            uint64_t keys[SSD_AHEAD];
            int k = 0;
            for (; ahead < got + SSD_AHEAD && ahead < end; ahead++)
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

int hr_pcache_lookup(hr_pcache *pc, uint64_t seed, const int32_t *tokens, int n, int known,
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
    const int32_t *t = tokens + (size_t)got * HR_KV_BLOCK;
    if (got < max_blocks && rest > 0 && pc->ssd && !pc->state_bytes &&
        !best_child(pc, key, t, rest, &len)) {
        /* after a restart RAM holds no next block: the SSD tier's, the
         * full one when the tokens past n say which (whole_blocks asked for
         * it when they were not needed), else the newest tail */
        int next = (got + 1) * HR_KV_BLOCK;
        if (next > n && next <= known)
            from_ssd_run(pc, key, tokens, got, got + 1, false);
        if (!best_child(pc, key, t, rest, &len))
            tail_from_ssd(pc, key);
    }
    if (got < max_blocks && rest > 0) {
        int32_t blk = copy_partial(pc, key, t, rest, &len);
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
    uint64_t key = n == HR_KV_BLOCK ? block_key(parent, tokens) : tail_key(parent);
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

/* The waiting prompts' tails queued, oldest first, while there is room; all
 * of them let go when the tier is paused after a write error (their blocks
 * are not pinned for the pause's length: a full disk can last). */
static void queue_ptails(hr_pcache *pc) {
    int i = 0, r = 1;
    while (i < pc->n_ptail && (r = hr_ssd_queue(pc->ssd, pc->ptail[i].key, pc->ptail[i].t,
                                                 pc->ptail[i].block, NULL)) == 1)
        i++;
    if (r < 0)
        for (; i < pc->n_ptail; i++)
            hr_kv_unref(pc->kv, pc->ptail[i].block);
    memmove(pc->ptail, pc->ptail + i, (size_t)(pc->n_ptail - i) * sizeof *pc->ptail);
    pc->n_ptail -= i;
}

void hr_pcache_keep_prompt_tail(hr_pcache *pc, uint64_t seed, const int32_t *tokens,
                                int n_prompt, int n, const int32_t *blocks) {
    int whole = n_prompt / HR_KV_BLOCK, k = n_prompt % HR_KV_BLOCK;
    if (!pc->ssd || pc->state_bytes || k == 0 || n < (whole + 1) * HR_KV_BLOCK)
        return; /* no tier, a hybrid model, or the prompt's tail is the sequence's */
    if (pc->n_ptail == PTAILS)
        return; /* (that many waiting: this one is not kept) */
    uint64_t parent = seed;
    for (int b = 0; b < whole; b++)
        parent = block_key(parent, tokens + (size_t)b * HR_KV_BLOCK);
    struct ptail *w = &pc->ptail[pc->n_ptail++];
    w->key = tail_key(parent);
    w->block = blocks[whole];
    for (int i = 0; i < HR_KV_BLOCK; i++)
        w->t[i] = i < k ? tokens[(size_t)whole * HR_KV_BLOCK + i] : -1;
    hr_kv_ref(pc->kv, w->block); /* until the writer gives it back (hr_pcache_poll) */
    queue_ptails(pc);
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

int hr_pcache_pending(const hr_pcache *pc) { return pc ? pc->n_pending + pc->n_ptail : 0; }

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
    queue_ptails(pc);
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
