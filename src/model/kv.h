/* The KV block pool: fixed-size blocks of HR_KV_BLOCK token slots from one
 * allocation sized by a byte budget. Sequences hold block tables; blocks
 * are reference-counted so a shared prefix is stored once.
 *
 * Layout, per layer: [block][kv_head][slot][head_dim] of the pool's dtype,
 * for K and V. The dtype is F32 (exact: the default for Hugging Face and
 * MLX models, whose reference computes in f32), F16 (llama.cpp's default,
 * hearth's for GGUF files; values beyond ±65504 saturate there instead of
 * becoming inf) or BF16; values are rounded to it once, when stored
 * (hr_cpu()->to_half).
 *
 * Or the pool is quantized (AFFINE, --kv-bits): every row is a record of
 * kernels/cpu/kvquant.h (mlx-lm's QuantizedKVCache, mx.quantize over the
 * head dimension), row_bytes apart, so a block of a layer is [kv_head][slot]
 * of records; or llama.cpp's cache types (Q8_0, Q4_0: rows of ggml
 * blocks, kvquant.h), K's and V's each their own; or TurboQuant (TURBO,
 * --kv-quant turbo: kernels/cpu/turbo.h's records, K and V each at its
 * own rate, every (layer, head) its own rotation). The format is the
 * pool's, fixed at init: docs/kv-quant.md says how a sequence moves into a
 * quantized pool. */
#ifndef HR_MODEL_KV_H
#define HR_MODEL_KV_H

#include "hearth.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/cpu/kvquant.h"
#include "model/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HR_KV_BLOCK 32

/* A pool's block format: dtype F32, F16, BF16, Q8_0 or Q4_0 (llama.cpp's
 * cache types: head_dim a multiple of 32), or AFFINE with bits (2, 3, 4,
 * 6, 8) and group (32, 64, 128; dividing head_dim). V takes vdtype instead
 * when vown (llama.cpp's --cache-type-v; not with AFFINE). */
typedef struct hr_kv_fmt {
    hr_dtype dtype;
    int bits, group;       /* AFFINE only; TURBO: bits is K's rate r2 (bits x 2) */
    bool vown;
    hr_dtype vdtype;
    int vbits;             /* TURBO: V's rate r2 (kernels/cpu/turbo.h) */
} hr_kv_fmt;

/* A read-back into the pool in flight (the engine's SSD tier): layer l of
 * the blocks it fills may be read once wait(gate, l) returns. */
typedef struct hr_kv_gate {
    void (*wait)(struct hr_kv_gate *g, int layer);
} hr_kv_gate;

typedef struct hr_kv {
    int n_layers, n_kv_heads, head_dim, n_blocks;
    hr_dtype dtype;        /* K's: F32, F16, BF16, AFFINE, Q8_0, Q4_0 or TURBO */
    int bits, group;       /* AFFINE only; TURBO: bits is K's rate r2 */
    int vbits;             /* TURBO: V's rate r2 */
    size_t row_bytes;      /* one token's row of one head of K */
    size_t block_stride;   /* per block per layer of K: elements (records,
                            * hr_kv_is_rec: bytes) */
    hr_dtype vdtype;       /* V's, and its row and block (K's unless the */
    size_t vrow_bytes, vblock_stride; /* format's vown) */
    void *k, *v;           /* [n_layers][n_blocks][block_stride] */
    int32_t *refs;         /* [n_blocks] */
    uint32_t *gen;         /* [n_blocks] times each block was allocated (a
                            * block's holder: (id, gen), model/forward.c) */
    int32_t *free_list;    /* [n_blocks], stack of free block ids */
    int n_free;
    hr_backend *be;        /* where k and v live (hr_kv_init: the CPU) */
    struct hr_populator *populate; /* a big pool in host memory: its pages made
                                    * resident ahead (core/bigmem.h) */
    hr_kv_gate *gate;      /* a read-back in flight (NULL: none): the forward
                            * waits on it before each layer's attention */
} hr_kv;

/* The forward, before reading layer `layer` of the pool: waits for a
 * read-back in flight, if any. */
static inline void hr_kv_wait_layer(const hr_kv *kv, int layer) {
    if (kv->gate)
        kv->gate->wait(kv->gate, layer);
}

/* Bytes one block takes across all layers (K and V) in dtype t. */
size_t hr_kv_block_bytes(const hr_hparams *hp, hr_dtype t);
/* The same in format f. */
size_t hr_kv_fmt_block_bytes(const hr_hparams *hp, const hr_kv_fmt *f);
/* A pool of format f (hr_kv_init_on's contract). HR_EINVAL, naming the
 * flag, for a group that does not divide head_dim, and for a quantized
 * format on a device backend ("not supported yet on cuda"). */
int hr_kv_init_fmt(hr_kv *kv, hr_backend *be, const hr_hparams *hp, const hr_kv_fmt *f,
                   int n_blocks, hr_error *err);
/* The format --cache-type-k / --cache-type-v `name` names (llama.cpp's:
 * f32, f16, bf16, q8_0, q4_0; any case); HR_EINVAL naming `flag` and the
 * choices for another. */
int hr_kv_cache_type_pick(const char *name, const char *flag, hr_dtype *t, hr_error *err);
/* --kv-quant `spec`: "turbo" (3.5 bits K and V), "turbo:B" (K and V) or
 * "turbo:K,V", each B one of 2, 2.5, 3, 3.5, 4, into rates r2 (bits x 2);
 * NULL or "" gives 0, 0 (off). HR_EINVAL naming the flag otherwise. */
int hr_kv_quant_parse(const char *spec, int *k2, int *v2, hr_error *err);
/* Checks --kv-bits (0: off), --kv-group-size and --quantized-kv-start
 * (>= 0) as mlx-lm takes them; HR_EINVAL naming the flag. */
int hr_kv_quant_check(long bits, long group, long start, hr_error *err);
/* A pool of n_blocks blocks of dtype t (F32, F16, BF16); HR_ENOMEM when it
 * cannot be allocated, HR_EINVAL for another dtype. */
int hr_kv_init(hr_kv *kv, const hr_hparams *hp, hr_dtype t, int n_blocks, hr_error *err);
/* The same pool in backend be's memory (a model's: hr_model.be). */
int hr_kv_init_on(hr_kv *kv, hr_backend *be, const hr_hparams *hp, hr_dtype t, int n_blocks,
                  hr_error *err);

/* The dtype --kv-dtype `name` asks for: "f32", "f16", "bf16" or "auto"
 * (also NULL; any case), which is F16 for a model loaded from a GGUF file
 * (as llama.cpp) and F32 otherwise (parity with the f32 reference).
 * HR_EINVAL naming the choices for another name. */
int hr_kv_dtype_pick(const char *name, bool gguf, hr_dtype *t, hr_error *err);

/* Block `block`'s contents as the SSD tier stores them: per layer, its K
 * then its V (n_layers * (hr_kv_stride_bytes + hr_kv_vstride_bytes)
 * bytes at buf), copied out
 * of (read) or into (write) the pool, wherever the pool lives. A backend
 * failure is an error. */
int hr_kv_block_read(const hr_kv *kv, int32_t block, void *buf, hr_error *err);
int hr_kv_block_write(hr_kv *kv, int32_t block, const void *buf, hr_error *err);

/* Store head h's K and V rows (host pools only)  (head_dim f32 each) of one token in slot
 * `slot` of block `block`, layer `layer`, rounded to the pool's dtype. */
void hr_kv_store(hr_kv *kv, int layer, int32_t block, int h, int slot, const float *k,
                 const float *v);
void hr_kv_deinit(hr_kv *kv);

/* Head h's K (v false) or V row of slot `slot` of block `block`, layer
 * `layer`, as f32 (exact for F32/F16/BF16; dequantized for AFFINE); host
 * pools only. */
void hr_kv_load_row(const hr_kv *kv, int layer, int32_t block, int h, int slot, bool v,
                    float *out);
/* Move a sequence from pool src into pool dst (another format, the same
 * backend): for i < n, a fresh block of dst gets the first rows[i] token
 * slots of src block from[i] (K and V of every layer, read as f32 and
 * stored in dst's format) and to[i] names it (to may be from); from[i] is
 * unreferenced. Device pools: the blocks' bytes through the host.
 * HR_ENOMEM (nothing changed) when dst has fewer than n free blocks; a
 * failed device copy (HR_EIO) or no host memory changes nothing either. */
int hr_kv_convert(hr_kv *dst, hr_kv *src, const int32_t *from, const int *rows, int n,
                  int32_t *to, hr_error *err);

/* A free block with refcount 1, or -1 when the pool is exhausted. */
int32_t hr_kv_alloc(hr_kv *kv);
void hr_kv_ref(hr_kv *kv, int32_t block);
/* Drops one reference; the block returns to the pool at zero. */
void hr_kv_unref(hr_kv *kv, int32_t block);
/* Copy token slots [0, n) of block src to block dst, K and V of every layer
 * (copy-on-write of a shared prefix: src is only read). 0 < n <= HR_KV_BLOCK,
 * dst != src, both allocated. */
void hr_kv_copy_rows(hr_kv *kv, int32_t dst, int32_t src, int n);

/* Bytes of one block of one layer of K (V). */
static inline size_t hr_kv_stride_bytes(const hr_kv *kv) {
    return hr_kv_is_rec(kv->dtype) ? kv->block_stride
                                   : kv->block_stride * hr_dtype_size(kv->dtype);
}
static inline size_t hr_kv_vstride_bytes(const hr_kv *kv) {
    return hr_kv_is_rec(kv->vdtype) ? kv->vblock_stride
                                    : kv->vblock_stride * hr_dtype_size(kv->vdtype);
}
/* Bytes of one block over every layer, K and V (hr_kv_block_read's buffer) */
static inline size_t hr_kv_pool_block_bytes(const hr_kv *kv) {
    return (size_t)kv->n_layers * (hr_kv_stride_bytes(kv) + hr_kv_vstride_bytes(kv));
}
/* Layer `layer`'s K (V): n_blocks blocks of hr_kv_stride_bytes
 * (hr_kv_vstride_bytes) each. */
static inline void *hr_kv_layer_k(const hr_kv *kv, int layer) {
    return (char *)kv->k + (size_t)layer * kv->n_blocks * hr_kv_stride_bytes(kv);
}
static inline void *hr_kv_layer_v(const hr_kv *kv, int layer) {
    return (char *)kv->v + (size_t)layer * kv->n_blocks * hr_kv_vstride_bytes(kv);
}

#endif
