/* CPU ops over f32 activations. Matmul and attention split their work over
 * the pool's threads; the row ops (norms, rope, activations) work on one
 * row and are driven by the caller. Shapes are given per argument. ops.c
 * has the products and row ops, attention.c the attention. */
#ifndef HR_KERNELS_OPS_H
#define HR_KERNELS_OPS_H

#include "core/pool.h"
#include "core/tensor.h"
#include "kernels/backend.h"

#include <stdbool.h>
#include <stdint.h>

/* y[n][m] = x[n][k] . w[m][k]^T (+ bias[m] when not NULL), where w is a 2-D
 * weight of any dtype hr_matmul_supports and k = w->shape[1]. ldx/ldy are
 * row strides. GGUF quantized weights take the integer-activation path
 * (qdot.h) unless their act_digits is -1 (HR_QACT_F32 at load): the x16
 * kernels when the weight was repacked by hr_matmul_pack, the row-layout
 * ones otherwise; so do MLX affine weights that hr_matmul_pack repacked
 * (24-bit activations). */
void hr_matmul(hr_pool *pool, float *y, int ldy, const float *x, int ldx, int n,
               const hr_tensor *w, const float *bias);
/* Several products of the same x (a layer's q/k/v, gate/up): y = x . w^T
 * (+ bias when not NULL) for each. Consecutive ones with the same weight
 * dtype, layout and k (up to 3) run as one job: x quantized once, one pool
 * run. Each output is the same as hr_matmul's. */
/* (hr_matmul_out: kernels/backend.h) */
void hr_matmul_multi(hr_pool *pool, const float *x, int ldx, int n, int count,
                     const hr_matmul_out *out);
/* hr_matmul_multi's products with the rows' adapter deltas on
 * out[0..lora->count) (kernels/cpu/lora.h; lora->x is x), in the same
 * jobs: the down pass first, then each column range's up right after its
 * base product. z: lora.h's scratch for n rows. Each output is the same as
 * hr_matmul_multi's followed by hr_lora_ref. */
void hr_matmul_lora(hr_pool *pool, const float *x, int ldx, int n, int count,
                    const hr_matmul_out *out, const hr_lora_args *lora, float *z);
/* Arm the next pool job (hr_pool_prefetch_next) with the first bytes of
 * each thread's share of a product with these `count` weights (as one
 * hr_matmul_multi), for the job after it: a hint. hr_matmul_prefetch_ranges
 * gives those ranges for nth threads (r[i] for i < the count it returns;
 * n = 0 where a thread has none). */
void hr_matmul_prefetch_next(hr_pool *pool, int count, const hr_tensor *const *w);
int hr_matmul_prefetch_ranges(int nth, int count, const hr_tensor *const *w,
                              hr_pool_range *r);
/* Weight dtypes hr_matmul accepts. */
bool hr_matmul_supports(hr_dtype t);
/* Reserve the pool's scratch for products of up to n activation rows of up
 * to k columns, so that hr_matmul never allocates in them (the x16 layout
 * cannot run without it). false: out of memory. */
bool hr_matmul_reserve(hr_pool *pool, int n, int k);

/* How quantized weights meet the activations (a model's load option,
 * hr_llm_opts.quant_act / $HEARTH_QUANT_ACT; docs/quantization.md):
 *   DEFAULT  GGUF weights in the x16 layout take int8 activations, MLX
 *            affine ones 24-bit (f32-grade) ones
 *   INT8     both int8
 *   ROWS     GGUF weights stay in the file's row layout (the row integer
 *            kernels), MLX ones on the f32 kernels
 *   F32      every quantized matrix on the f32 kernels (act_digits -1) */
typedef enum hr_quant_act {
    HR_QACT_DEFAULT,
    HR_QACT_INT8,
    HR_QACT_ROWS,
    HR_QACT_F32,
} hr_quant_act;

/* "default" (also NULL or ""), "int8", "rows", "f32"; else an error naming
 * them. */
int hr_quant_act_parse(const char *name, hr_quant_act *out, hr_error *err);

/* A GGUF or MLX affine (4, 8 bits) weight is repacked into the x16 layout
 * (x16.h) when this CPU has x16 kernels for it, qa takes the integer path
 * and the shape allows (rows % 16, columns % 64). hr_matmul_packed_bytes
 * gives the bytes it then takes, else 0. hr_matmul_pack (only where that is
 * not 0) writes it to dst (64-byte aligned) and points w there; it returns
 * false, leaving w as it was, when an affine scale or bias has no exact
 * f16. dst must outlive the last use of w. */
size_t hr_matmul_packed_bytes(const hr_tensor *w, hr_quant_act qa);
bool hr_matmul_pack(hr_tensor *w, void *dst, hr_quant_act qa);

/* n floats of x stored at dst as dtype t (F32, F16, BF16), rounded once;
 * F16 saturates: a finite value never becomes inf (the KV pool's rows). */
void hr_store_row(void *dst, const float *x, int n, hr_dtype t);

/* y = x / rms(x) * (w + offset); y may alias x. */
void hr_rmsnorm(float *y, const float *x, const float *w, float offset, int d,
                float eps);
/* y = (x - mean) / sqrt(var + eps) * w + b (b may be NULL); y may alias x. */
void hr_layernorm(float *y, const float *x, const float *w, const float *b,
                  int d, float eps);

/* The rotation for one position: cs[i] = cos(pos * inv_freq[i]) and
 * cs[half + i] = sin(...), each times attn_factor, for i < half = rot_dim/2.
 * Computed once per token and shared by every layer's q and k. */
void hr_rope_table(float *cs, int rot_dim, int pos, const float *inv_freq,
                   float attn_factor);
/* hr_rope_table with M-RoPE (Qwen2.5-VL): frequency i turns by pos[k], k the
 * section (consecutive counts section[0..2]) that holds i. */
void hr_rope_table_mrope(float *cs, int rot_dim, const int32_t pos[3], const int section[3],
                         const float *inv_freq, float attn_factor);
/* Rotate the first rot_dim dims of each of n_heads heads (stride head_dim)
 * by the table cs (hr_rope_table). Half-split pairs (i, i + rot_dim/2) as
 * transformers' rotate_half; interleaved pairs (2i, 2i+1) as GLM. */
void hr_rope(float *x, int n_heads, int head_dim, int rot_dim, const float *cs,
             bool interleaved);

/* In place; the CPU's vector version (AVX-512: a polynomial e^x within 2
 * ulp of expf) or the scalar one with expf. */
void hr_softmax(float *x, int n);
/* x = cap * tanh(x / cap) */
void hr_softcap(float *x, int n, float cap);

void hr_silu_mul(float *g, const float *u, int n);      /* g = silu(g) * u */
void hr_gelu_tanh_mul(float *g, const float *u, int n); /* u NULL: g = gelu(g) */
void hr_gelu_mul(float *g, const float *u, int n);      /* exact erf gelu */

/* Longest head the per-head path takes (the fused kernels: any). */
#define HR_ATTN_MAX_HEAD_DIM 1024
/* Query tokens of one sequence per attention task (they share the K/V
 * loads and widenings); the scratch holds this many tokens' scores per
 * thread. The ISA's attn_heads kernel (AVX-512) takes tiles of
 * HR_ATTN_TILE_HEADS (docs/kv-quant.md has the figures). */
#define HR_ATTN_TILE 16
#define HR_ATTN_TILE_HEADS 8

/* Attention of n_tok query tokens over a paged KV cache.
 * K/V of block b, kv head h, slot s live at element b*block_stride +
 * (h*block_size + s)*head_dim of base, in kv_dtype (read as the f32 values
 * they are). Token t sits at pos[t] of the sequence whose block table is
 * blocks[t] and attends to positions [lo, pos[t]], lo = pos[t]-window+1
 * when window > 0 (clamped at 0). */
typedef struct hr_attn_args {
    const float *q;          /* [n_tok][n_heads*head_dim] */
    float *out;              /* [n_tok][n_heads*head_dim] */
    int n_tok, n_heads, n_kv_heads, head_dim;
    const void *k, *v;       /* the KV pool's layer: F32, F16, BF16, AFFINE, Q8_0, Q4_0, TURBO */
    hr_dtype kv_dtype;       /* K's (and V's unless v_block_stride) */
    int kv_bits, kv_group;   /* AFFINE: kvquant.h's row records */
    size_t block_stride;     /* elements per block (records, hr_kv_is_rec: bytes) */
    hr_dtype v_dtype;        /* V's format when v_block_stride > 0 (llama.cpp's */
    size_t v_block_stride;   /* --cache-type-v); 0: V is K's format */
    int v_bits;              /* TURBO: V's rate (kv_bits: K's); 0: kv_bits */
    int layer;               /* TURBO: the rows' rotations (turbo.h) */
    int block_size;
    const int32_t *pos;              /* [n_tok] */
    const int32_t *const *blocks;    /* [n_tok] block tables */
    float scale, softcap;
    int window;
    float *scratch;          /* [nth][HR_ATTN_TILE][n_heads / n_kv_heads][max_ctx] scores */
    int max_ctx;
    const float *sinks;      /* [n_heads] extra logit in each head's softmax
                              * denominator (gpt_oss), or NULL */
    const int32_t *end;      /* [n_tok] bidirectional (encoders): token t attends
                              * to [start, end[t]); NULL: causal, [start, pos] */
    /* the residual window (docs/kv-quant.md), or r_k NULL: the keys of
     * token t's window [pos / resid * resid, pos / resid * resid + resid)
     * are read from r_k / r_v (F32, F16 or BF16 rows, r_stride elements a
     * block, block rblocks[t][b]) instead of k / v */
    const void *r_k, *r_v;
    hr_dtype r_dtype;
    size_t r_stride;
    const int32_t *const *rblocks; /* [n_tok] */
    int resid;
} hr_attn_args;

void hr_attention(hr_pool *pool, const hr_attn_args *a);

#endif
