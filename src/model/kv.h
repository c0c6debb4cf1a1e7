/* The KV block pool: fixed-size blocks of HR_KV_BLOCK token slots from one
 * allocation sized by a byte budget. Sequences hold block tables; blocks
 * are reference-counted so a shared prefix is stored once.
 *
 * Layout, per layer: [block][kv_head][slot][head_dim] f32, for K and V. */
#ifndef HR_MODEL_KV_H
#define HR_MODEL_KV_H

#include "hearth.h"
#include "model/config.h"

#include <stddef.h>
#include <stdint.h>

#define HR_KV_BLOCK 32

typedef struct hr_kv {
    int n_layers, n_kv_heads, head_dim, n_blocks;
    size_t block_stride;   /* floats per block per layer */
    float *k, *v;          /* [n_layers][n_blocks][block_stride] */
    int32_t *refs;         /* [n_blocks] */
    int32_t *free_list;    /* [n_blocks], stack of free block ids */
    int n_free;
} hr_kv;

/* Bytes one block takes across all layers (K and V). */
size_t hr_kv_block_bytes(const hr_hparams *hp);
/* A pool of n_blocks blocks; HR_ENOMEM when it cannot be allocated. */
int hr_kv_init(hr_kv *kv, const hr_hparams *hp, int n_blocks, hr_error *err);
void hr_kv_deinit(hr_kv *kv);

/* A free block with refcount 1, or -1 when the pool is exhausted. */
int32_t hr_kv_alloc(hr_kv *kv);
void hr_kv_ref(hr_kv *kv, int32_t block);
/* Drops one reference; the block returns to the pool at zero. */
void hr_kv_unref(hr_kv *kv, int32_t block);
/* Copy token slots [0, n) of block src to block dst, K and V of every layer
 * (copy-on-write of a shared prefix: src is only read). 0 < n <= HR_KV_BLOCK,
 * dst != src, both allocated. */
void hr_kv_copy_rows(hr_kv *kv, int32_t dst, int32_t src, int n);

static inline float *hr_kv_layer_k(const hr_kv *kv, int layer) {
    return kv->k + (size_t)layer * kv->n_blocks * kv->block_stride;
}
static inline float *hr_kv_layer_v(const hr_kv *kv, int layer) {
    return kv->v + (size_t)layer * kv->n_blocks * kv->block_stride;
}

#endif
