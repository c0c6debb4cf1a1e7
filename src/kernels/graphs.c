/* The graph cache's policy (kernels/graphs.h). */
#include "kernels/graphs.h"

#include <string.h>

static bool same(const hr_graph_key *a, const hr_graph_key *b) {
    return a->T == b->T && a->n_out == b->n_out && a->n_hidden == b->n_hidden &&
           a->split == b->split && a->img == b->img;
}

void hr_graph_cache_init(hr_graph_cache *g) { memset(g, 0, sizeof *g); }

hr_graph_act hr_graph_cache_pick(hr_graph_cache *g, const hr_graph_key *k, int *slot,
                                 bool *evict) {
    *slot = -1;
    *evict = false;
    g->clock++;
    int lru = 0;
    for (int i = 0; i < HR_GRAPH_SLOTS; i++) {
        if (g->used[i] && same(&g->slot[i], k)) {
            g->used[i] = g->clock;
            *slot = i;
            return HR_GRAPH_REPLAY;
        }
        if (g->used[i] < g->used[lru])
            lru = i;
    }
    for (int i = 0; i < g->n_seen; i++)
        if (same(&g->seen[i], k)) { /* the second time: captured */
            g->seen[i] = g->seen[--g->n_seen]; /* out of the ring (order is not kept) */
            *evict = g->used[lru] != 0;
            g->slot[lru] = *k;
            g->used[lru] = g->clock;
            *slot = lru;
            return HR_GRAPH_CAPTURE;
        }
    if (g->n_seen < HR_GRAPH_SEEN) {
        g->seen[g->n_seen++] = *k;
    } else {
        g->seen[g->seen_next] = *k;
        g->seen_next = (g->seen_next + 1) % HR_GRAPH_SEEN;
    }
    return HR_GRAPH_LAUNCH;
}

void hr_graph_cache_drop(hr_graph_cache *g, int slot) {
    if (slot >= 0 && slot < HR_GRAPH_SLOTS)
        g->used[slot] = 0;
}
