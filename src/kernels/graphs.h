/* Which forward steps of a device backend run as captured graphs (the CUDA
 * backend's CUDA graphs, docs/gpu.md): a step's shape (tokens, logit rows,
 * hidden-state rows, image rows or not, KV split) is captured the second
 * time it is seen and replayed after; the first time its ops launch one by
 * one (a shape seen once, a long prompt's odd chunk, would cost a capture
 * and an instantiation for nothing). When every slot holds a graph, the
 * least recently replayed one makes room, so the shapes a long-running
 * server keeps seeing stay graphs whatever came first. Host-only policy:
 * the backend owns the graphs, this says what to do with them. */
#ifndef HR_KERNELS_GRAPHS_H
#define HR_KERNELS_GRAPHS_H

#include <stdbool.h>
#include <stdint.h>

#define HR_GRAPH_SLOTS 32 /* graphs kept per forward context */
#define HR_GRAPH_SEEN 64  /* shapes remembered as seen once */

typedef struct hr_graph_key {
    int T, n_out, n_hidden, split;
    bool img;
} hr_graph_key;

typedef struct hr_graph_cache {
    hr_graph_key slot[HR_GRAPH_SLOTS];
    uint64_t used[HR_GRAPH_SLOTS]; /* last use (clock); 0: empty */
    hr_graph_key seen[HR_GRAPH_SEEN];
    int n_seen, seen_next; /* a ring: the oldest is forgotten */
    uint64_t clock;
} hr_graph_cache;

typedef enum hr_graph_act {
    HR_GRAPH_LAUNCH,  /* launch the step's ops */
    HR_GRAPH_REPLAY,  /* replay the graph in *slot */
    HR_GRAPH_CAPTURE, /* capture the step into *slot (its old graph, if any, goes first) */
} hr_graph_act;

void hr_graph_cache_init(hr_graph_cache *g);

/* the action for a step of shape k; *slot: the slot to replay or capture
 * into, *evict: it holds a graph that must be destroyed first */
hr_graph_act hr_graph_cache_pick(hr_graph_cache *g, const hr_graph_key *k, int *slot,
                                 bool *evict);

/* a capture into slot failed: the slot is empty again */
void hr_graph_cache_drop(hr_graph_cache *g, int slot);

#endif
