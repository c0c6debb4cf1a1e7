/* Plain string text: a fast path for trie walks through JSON string bodies.
 *
 * Most of a vocabulary is "plain text": UTF-8 characters other than '"',
 * '\' and controls, what a JSON string holds raw. A walk from a string
 * state accepts nearly every token, and visiting 270k trie nodes one by one
 * is what made a cold mask cost milliseconds. Two facts let a walk accept a
 * whole trie subtree at once:
 *
 *   vocabulary side (hr__plain_index): per trie node, for each UTF-8 decoder
 *   state w, whether every path below the node, decoded from w, is plain
 *   text (nplain bit w); the height of the subtree; the decoder state after
 *   the node's own path (nu8);
 *
 *   grammar side (hr__plain_reach): for a DFA state q and decoder state w,
 *   how many bytes of any plain text from w q reads for sure by byte edges
 *   alone (breadth-first over (state, decoder state) pairs until one lacks
 *   a plain byte): a string body reads all of them, a maxLength position
 *   as many as it has left.
 *
 * When a configuration at node n reads at least the subtree's height in
 * plain text from n's decoder state and the subtree is plain from there,
 * every token below n is accepted (by byte edges: whatever the context). */
#include "grammar/internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 decoder states --------------------------------------------------- */

enum { S0, S1, S2, S3, XE0, XED, XF0, XF4, N_U8 };

typedef struct prange {
    uint8_t w, lo, hi, to;
} prange;

/* Plain text bytes by decoder state (scalar values, no surrogates or
 * overlongs; ASCII but '"', '\' and controls). */
static const prange PR[] = {
    {S0, 0x20, 0x21, S0}, {S0, 0x23, 0x5b, S0},  {S0, 0x5d, 0x7f, S0},
    {S0, 0xc2, 0xdf, S1}, {S0, 0xe0, 0xe0, XE0}, {S0, 0xe1, 0xec, S2},
    {S0, 0xed, 0xed, XED}, {S0, 0xee, 0xef, S2}, {S0, 0xf0, 0xf0, XF0},
    {S0, 0xf1, 0xf3, S3}, {S0, 0xf4, 0xf4, XF4}, {S1, 0x80, 0xbf, S0},
    {S2, 0x80, 0xbf, S1}, {S3, 0x80, 0xbf, S2},  {XE0, 0xa0, 0xbf, S1},
    {XED, 0x80, 0x9f, S1}, {XF0, 0x90, 0xbf, S2}, {XF4, 0x80, 0x8f, S2},
};
#define N_PR (sizeof PR / sizeof *PR)

/* Decoder state after byte b from w, -1 if b cannot come there; plain:
 * plain text only, else any UTF-8 (all ASCII). */
static int u8next(int w, uint8_t b, int plain) {
    if (!plain && w == S0 && b < 0x80)
        return S0;
    for (size_t i = 0; i < N_PR; i++)
        if (PR[i].w == w && b >= PR[i].lo && b <= PR[i].hi)
            return PR[i].to;
    return -1;
}

/* ---- vocabulary side ----------------------------------------------------------- */

int hr__plain_index(hr_grammar_vocab *v) {
    uint32_t n = v->n_nodes;
    v->nplain = malloc(n ? n : 1);
    v->nu8 = malloc(n ? n : 1);
    v->nheight = malloc((n ? n : 1) * sizeof *v->nheight);
    if (!v->nplain || !v->nu8 || !v->nheight)
        return HR_ENOMEM;
    /* preorder: a parent comes before its children */
    v->nu8[0] = S0;
    for (uint32_t i = 1; i < n; i++) {
        uint8_t pw = v->nu8[v->nparent[i]];
        int w = pw == 0xff ? -1 : u8next(pw, v->nbyte[i], 0);
        v->nu8[i] = w < 0 ? 0xff : (uint8_t)w;
    }
    for (uint32_t i = n; i-- > 0;) {
        uint8_t ok = 0xff;
        uint16_t h = 0;
        for (uint32_t c = i + 1; c < v->nend[i]; c = v->nend[c]) {
            for (int w = 0; w < N_U8; w++) {
                int w2 = u8next(w, v->nbyte[c], 1);
                if (w2 < 0 || !(v->nplain[c] >> w2 & 1))
                    ok &= (uint8_t)~(1u << w);
            }
            if (v->nheight[c] + 1 > h)
                h = (uint16_t)(v->nheight[c] + 1);
        }
        v->nplain[i] = ok;
        v->nheight[i] = h;
    }
    return 0;
}

/* ---- grammar side ----------------------------------------------------------------- */

#define MEMO_EMPTY UINT64_MAX
#define MAX_PAIRS 480 /* beyond: stop and answer the level reached (the
                             pair set stays under half its table) */

/* Memo lookup / insert; key = q * N_U8 + w. */
static uint16_t *memo_slot(hr__plainmemo *pm, uint64_t key) {
    if ((pm->n + 1) * 2 > pm->cap) {
        uint32_t nc = pm->cap ? pm->cap * 2 : 256;
        uint64_t *k = malloc(nc * sizeof *k);
        uint16_t *val = malloc(nc * sizeof *val);
        if (!k || !val) {
            free(k);
            free(val);
            return NULL;
        }
        memset(k, 0xff, nc * sizeof *k);
        for (uint32_t i = 0; i < pm->cap; i++)
            if (pm->key[i] != MEMO_EMPTY) {
                uint32_t p = (uint32_t)(pm->key[i] * 0x9e3779b97f4a7c15ull >> 32) & (nc - 1);
                while (k[p] != MEMO_EMPTY)
                    p = (p + 1) & (nc - 1);
                k[p] = pm->key[i];
                val[p] = pm->val[i];
            }
        free(pm->key);
        free(pm->val);
        pm->key = k;
        pm->val = val;
        pm->cap = nc;
    }
    uint32_t m = pm->cap - 1;
    for (uint32_t p = (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 32) & m;; p = (p + 1) & m) {
        if (pm->key[p] == key)
            return &pm->val[p];
        if (pm->key[p] == MEMO_EMPTY) {
            pm->key[p] = key;
            pm->val[p] = UINT16_MAX; /* not computed yet */
            pm->n++;
            return &pm->val[p];
        }
    }
}

/* The breadth-first search: levels of pairs in pm->q. */
static uint16_t reach(const hr_grammar *g, hr__plainmemo *pm, uint32_t q0, int w0,
                      uint16_t limit) {
    hr__cset_clear(&pm->seen);
    pm->q.n = 0;
    hr__cfg start = {q0, (uint32_t)w0};
    if (hr__cset_add(&pm->seen, start) < 0 || hr__cbuf_push(&pm->q, start))
        return 0;
    size_t lo = 0;
    for (uint16_t t = 0; t < limit; t++) {
        size_t hi = pm->q.n;
        if (lo == hi)
            return limit; /* nothing left to read: every plain text is read */
        for (size_t i = lo; i < hi; i++) {
            hr__cfg x = pm->q.v[i];
            const hr__gstate *st = &g->st[x.state];
            for (size_t r = 0; r < N_PR; r++) {
                if (PR[r].w != x.below)
                    continue;
                /* the edges must cover [lo, hi] */
                uint32_t need = PR[r].lo;
                for (uint32_t j = 0; j < st->ne && need <= PR[r].hi; j++) {
                    const hr__gedge *e = &g->edges[st->e0 + j];
                    if (e->hi < need)
                        continue;
                    if (e->lo > need)
                        break;
                    hr__cfg y = {e->to, PR[r].to};
                    int k = hr__cset_add(&pm->seen, y);
                    if (k < 0 || pm->q.n >= MAX_PAIRS)
                        return t;
                    if (k > 0 && hr__cbuf_push(&pm->q, y))
                        return t;
                    need = (uint32_t)e->hi + 1;
                }
                if (need <= PR[r].hi)
                    return t; /* a plain byte q cannot read after t bytes */
            }
        }
        lo = hi;
    }
    return limit;
}

uint16_t hr__plain_reach(const hr_grammar *g, hr__plainmemo *pm, uint32_t q, int w,
                         uint16_t limit) {
    if (!pm->seen.keys && hr__cset_init(&pm->seen))
        return 0;
    uint16_t *slot = memo_slot(pm, (uint64_t)q * N_U8 + (uint64_t)w);
    if (slot && *slot != UINT16_MAX)
        return *slot;
    uint16_t r = reach(g, pm, q, w, limit);
    if (slot)
        *slot = r;
    return r;
}

void hr__plainmemo_free(hr__plainmemo *pm) {
    free(pm->key);
    free(pm->val);
    free(pm->q.v);
    hr__cset_deinit(&pm->seen);
    memset(pm, 0, sizeof *pm);
}
