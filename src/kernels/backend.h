/* The backend seam: where a model's weights, its KV pool and the forward
 * pass's activations live, and the ops the one forward pass (model/forward.c)
 * runs on them. The model code never dereferences backend memory and never
 * knows which backend runs; each backend is one table of function pointers
 * (like the CPU kernel table, kernels/cpu/cpu.h):
 *   cpu      host memory, the CPU kernels on the forward's thread pool
 *   cuda:N   GPU N's memory, the kernels of kernels/cuda/ (built when the
 *            CUDA toolkit is found: HEARTH_CUDA)
 *
 * Memory calls take the backend; forward ops take a context (hr_bctx, one
 * per hr_fwd: a CUDA stream and its workspace, or the CPU pool's scratch).
 * A step is begin(), the ops in order, end(): ops are queued (CUDA) or run
 * at once (CPU); end() waits for them and reports any failure of the step. */
#ifndef HR_KERNELS_BACKEND_H
#define HR_KERNELS_BACKEND_H

#include "core/pool.h"
#include "core/tensor.h"
#include "hearth.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hr_backend hr_backend;
typedef struct hr_bctx hr_bctx;

/* One product of a shared x (model/forward.c's q/k/v, gate/up). */
typedef struct hr_matmul_out {
    float *y;
    int ldy;
    const hr_tensor *w;
    const float *bias;
} hr_matmul_out;

/* What a step's ops share, staged by begin() from the host batch
 * (model/batch.h's fields, passed flat so that this layer stays below the
 * model's). Token t of sequence seq[t] sits at pos[t]; its sequence's block
 * table is tables[tab_off[seq[t]] ..]. freq: per sequence, the RoPE inverse
 * frequencies and attention factor, [full half | factor][local half |
 * factor] (model/rope.h), 2 * (rot_dim/2 + 1) floats. */
typedef struct hr_step_in {
    int n_tokens, n_seqs;
    const int32_t *token, *pos, *seq; /* [n_tokens] */
    const uint8_t *logits;            /* [n_tokens] */
    const int32_t *tables;            /* every sequence's table, concatenated */
    const int32_t *tab_off;           /* [n_seqs] offsets into tables */
    int n_tables;                     /* entries in tables */
    const float *freq;                /* [n_seqs][2 * (rot_dim/2 + 1)] */
    int rot_dim;
    bool rope_local;                  /* a local (sliding) table exists */
    /* images (model/batch.h), host memory, or NULL: token t with
     * embd_row[t] >= 0 is embedded as row embd_row[t] of embd (no scale);
     * attn_end[t]: token t attends to [start, attn_end[t]) */
    const float *embd;
    const int32_t *embd_row;
    const int32_t *attn_end;
    /* M-RoPE, host memory, or NULL: token t's frequency i < rot_dim/2 turns
     * by mrope_pos[3t + k] for the section k that holds i (mrope_section
     * counts, in order) instead of pos[t] */
    const int32_t *mrope_pos;
    int mrope_section[3];
    /* a step over two KV pools (model/batch.h's kv2): the first token whose
     * rows are the second pool's (its qkv and attention ops come with t0,
     * nt); -1: one pool. The ops' arguments differ with it (CUDA keys its
     * step graphs by it). */
    int kv_split;
    /* the residual window (--kv-residual, docs/kv-quant.md), or NULL: none.
     * rtables[tab_off[s] + b]: the full-precision block holding block b of
     * sequence s (-1: none), the index of its block table; resid: the
     * window's length in tokens, a multiple of the block. Token t reads the
     * keys of its own window, [pos[t] / resid * resid, ..), from those
     * blocks, the others from the (quantized) pool. */
    const int32_t *rtables;
    int resid;
} hr_step_in;

enum { HR_BNORM_RMS, HR_BNORM_LAYER };
enum { HR_BQK_NONE, HR_BQK_HEAD, HR_BQK_FULL };
enum { HR_BACT_SILU, HR_BACT_GELU_TANH, HR_BACT_GELU,
       HR_BACT_SWIGLU_CLAMPED, /* gpt_oss: (clamp(u, +-limit) + 1) * g' * sigmoid(alpha
                                * g'), g' = min(g, limit) */
       HR_BACT_SIGMOID };      /* g = sigmoid(g) * u (qwen3_next's output gate) */
enum { HR_BROUTER_SOFTMAX_TOPK, HR_BROUTER_TOPK_SOFTMAX, HR_BROUTER_SIGMOID_GROUPED };

/* A layer's q/k/v after their products: q/k norms, RoPE, and K/V stored in
 * the KV pool's layer (k_cache/v_cache: [block][kv_head][slot][head_dim] of
 * kv_dtype, block_stride elements a block; AFFINE, Q8_0, Q4_0:
 * [block][kv_head][slot] of kernels/cpu/kvquant.h's row records,
 * block_stride bytes a block). */
typedef struct hr_qkv_args {
    float *q, *k;          /* [T][n_heads*hd], [T][n_kv_heads*hd], in place */
    const float *v;        /* [T][n_kv_heads*hd] */
    int n_heads, n_kv_heads, head_dim;
    int qk_norm;           /* HR_BQK_* */
    const float *q_norm, *k_norm; /* backend memory */
    float norm_offset, norm_eps;
    bool rope, rope_local, rope_interleaved;
    void *k_cache, *v_cache;
    hr_dtype kv_dtype;     /* F32, F16, BF16; AFFINE, Q8_0, Q4_0 (CPU only) */
    int kv_bits, kv_group; /* AFFINE */
    size_t block_stride;
    int block_size;
    hr_dtype v_dtype;      /* V's when v_block_stride > 0 (CPU only; K and V */
    size_t v_block_stride; /* differ: --cache-type-k/-v); 0: V is K's format */
    int v_bits;            /* TURBO (CPU only): V's rate, kv_bits K's; 0: kv_bits */
    int layer;             /* the layer's index (TURBO: its rows' rotations) */
    int t0, nt;            /* the step's tokens [t0, t0 + nt) only (nt 0: all of them;
                            * a step over two KV pools, model/batch.h) */
    /* the residual window (hr_step_in.rtables): the full-precision pool's
     * layer (each row is stored there too), its dtype (F32, F16, BF16) and
     * elements a block; r_k NULL: none (CPU only) */
    void *r_k, *r_v;
    hr_dtype r_dtype;
    size_t r_stride;
} hr_qkv_args;

/* Attention of the step's tokens over the paged cache of one layer: token t
 * attends to positions [max(0, pos[t]-window+1), pos[t]] (window 0: all). */
typedef struct hr_attn_in {
    const float *q;        /* [T][n_heads*hd] */
    float *out;            /* [T][n_heads*hd] */
    int n_heads, n_kv_heads, head_dim;
    const void *k_cache, *v_cache;
    hr_dtype kv_dtype;
    int kv_bits, kv_group;
    size_t block_stride;
    int block_size;
    hr_dtype v_dtype;      /* as hr_qkv_args */
    size_t v_block_stride;
    int v_bits, layer;     /* as hr_qkv_args */
    float scale, softcap;
    int window;
    int max_ctx;           /* 1 + the step's largest position */
    const float *sinks;    /* [n_heads] a logit per head in every softmax's
                            * denominator (gpt_oss), or NULL */
    bool bidirectional;    /* encoders: token t attends to every position of
                            * its sequence in this step, [0, 1 + the largest
                            * pos of its sequence] (window 0 only) */
    int t0, nt;            /* as hr_qkv_args: q and out are still the whole step's */
    const void *r_k, *r_v; /* as hr_qkv_args: the keys of a token's own */
    hr_dtype r_dtype;      /* residual window read from there */
    size_t r_stride;
} hr_attn_in;

/* A mixture-of-experts MLP over the step's T rows: the router's logits
 * r = rx . router_w^T (+ router_b) (rx: router_x, else x) pick k of
 * n_experts per row
 *   SOFTMAX_TOPK: p = softmax(r); the k largest p (renormalised to sum 1
 *                 when norm_topk)
 *   TOPK_SOFTMAX: the k largest r; softmax over those k
 *   SIGMOID_GROUPED: s = sigmoid(r), c = s + score_bias; the n_experts in
 *                 n_group groups, a group scored by its 2 largest c; the
 *                 experts of the topk_group best groups keep c, the others
 *                 0; the k largest of those; weights s (divided by their
 *                 sum + 1e-20 when norm_topk) times scale
 * (then each chosen expert e's weight times expert_scale[e], when given)
 * and out[t] = sum over the k of weight * down_e(act(gate_e x) * up_e x)
 * (each product + its bias when the b_ arrays are given), plus, with a
 * shared expert, sigmoid(sh_inp . x) * sh_down(act(sh_gate x) * sh_up x)
 * (no sh_inp: weight 1).
 * A row's result depends on that row alone (batch-invariant). */
typedef struct hr_moe_args {
    const float *x;        /* [T][d] */
    const float *router_x; /* [T][d] the router's input; NULL: x */
    float *out;            /* [T][d], written */
    int d, n_experts, k, ff;
    int router;            /* HR_BROUTER_* */
    bool norm_topk;
    const hr_tensor *router_w;          /* (n_experts, d) */
    const float *router_b;              /* [n_experts] or NULL */
    const hr_tensor *gate, *up, *down;  /* [n_experts]: (ff, d), (ff, d), (d, ff) */
    const float *b_gate, *b_up, *b_down; /* [n_experts][ff], .., [n_experts][d]; NULL */
    int act;               /* HR_BACT_* */
    float alpha, limit;    /* HR_BACT_SWIGLU_CLAMPED */
    int sh_ff;             /* shared expert's width; 0: none */
    const hr_tensor *sh_gate, *sh_up, *sh_down, *sh_inp; /* .., (1, d); sh_inp
                                                          * data NULL: none */
    const float *score_bias; /* SIGMOID_GROUPED: [n_experts] */
    int n_group, topk_group; /* SIGMOID_GROUPED */
    float scale;             /* SIGMOID_GROUPED: routed_scaling_factor */
    const float *expert_scale; /* [n_experts] or NULL (gemma4's per_expert_scale) */
} hr_moe_args;

/* One Mamba-2 mixer (granitemoehybrid's "mamba" layers) over the step's
 * tokens, each sequence's tokens in order through its recurrent state:
 *   zxbcdt[t] = [z (inner) | x (inner) | B (groups n) | C (groups n) | dt (heads)];
 *   the channels [x | B | C] through a causal depthwise conv of conv_k taps
 *   (+ conv_b; the last conv_k - 1 inputs kept in conv_state), then silu;
 *   head h (head_dim wide) reads group g = h / (heads / groups) of B and C;
 *   dt = softplus(dt + dt_bias), A = -exp(A_log);
 *   S = S exp(dt A) + dt x B^T; y = S C + D x (S: head_dim x n per head);
 *   out = rmsnorm(y * silu(z)) * norm_w over the whole inner width.
 * A token at position 0 starts its sequence from zero state. */
typedef struct hr_mamba2_args {
    const float *zxbcdt;   /* [T][2 inner + 2 groups n + heads] */
    float *mixed;          /* [T][inner + 2 groups n] scratch (the conv's output) */
    float *out;            /* [T][inner] */
    int heads, head_dim, groups, n, conv_k;
    const float *conv_w;   /* [inner + 2 groups n][conv_k] */
    const float *conv_b;   /* [inner + 2 groups n] or NULL */
    const float *a, *dt_bias, *d_skip; /* [heads]; a = -exp(A_log) */
    const float *norm_w;   /* [inner] */
    float norm_eps;
    float *conv_state;     /* [slots][inner + 2 groups n][conv_k - 1] this layer's */
    float *state;          /* [slots][heads][head_dim][n] this layer's */
    const int32_t *slot;   /* [n_seqs] each sequence's slot, -1: no tokens
                            * this step (host memory) */
} hr_mamba2_args;

/* One gated DeltaNet layer (qwen3_next's linear attention) over the step's
 * tokens, each sequence's tokens in order through its recurrent state:
 *   per key head group g of qkvz: [q_g (dk) | k_g (dk) | v_g (r dv) | z_g (r dv)],
 *   of ba: [b_g (r) | a_g (r)], r = n_v_heads / n_k_heads;
 *   the channels [q (all heads) | k | v] through a causal depthwise conv of
 *   conv_k taps (the last conv_k - 1 inputs kept in conv_state), then silu;
 *   q, k L2-normalised (eps 1e-6), q / sqrt(dk); value head h reads key
 *   head h / r; beta = sigmoid(b), g = A softplus(a + dt_bias) (A = -exp(A_log));
 *   S = S e^g; S += k (beta (v - S^T k))^T; o = S^T q (S: dk x dv per head);
 *   out = rmsnorm(o) * norm_w * silu(z) per value head.
 * A token at position 0 starts its sequence from zero state. */
typedef struct hr_deltanet_args {
    const float *qkvz;     /* [T][2 kd + 2 vd] */
    const float *ba;       /* [T][2 n_v_heads] */
    float *mixed;          /* [T][2 kd + vd] scratch (the conv's output) */
    float *out;            /* [T][vd] */
    int n_k_heads, n_v_heads, dk, dv, conv_k;
    const float *conv_w;   /* [2 kd + vd][conv_k] */
    const float *a, *dt_bias; /* [n_v_heads]; a = -exp(A_log) */
    const float *norm_w;   /* [dv] */
    float norm_eps;
    float *conv_state;     /* [slots][2 kd + vd][conv_k - 1] this layer's */
    float *state;          /* [slots][n_v_heads][dk][dv] this layer's */
    const int32_t *slot;   /* [n_seqs] each sequence's slot, -1 for one with
                            * no tokens this step (host memory) */
} hr_deltanet_args;

/* LoRA adapters (model/adapter.h): one adapted product's low-rank
 * matrices. A row t of the adapter's group gets
 *   d[t] = scale * (x[t] . a^T) . bt          a (r, k), bt (r, n)
 *   y[t] += d[t]                              (LoRA)
 *   y[t] = dora * (y[t] - bias + d[t]) + bias (DoRA: dora (n) is the
 *                                              magnitude over the row norm)
 * where y[t] already holds the base product x[t] . W^T + bias. */
typedef struct hr_lora_mat {
    const float *a;    /* (r, k) */
    const float *bt;   /* (r, n) */
    const float *dora; /* (n) or NULL */
    int r;             /* 1..HR_LORA_MAX_RANK */
    float scale;
} hr_lora_mat;

#define HR_LORA_MAX_RANK 256
#define HR_LORA_MAX_OUT 3  /* products of one lora op (q, k, v) */

typedef struct hr_lora_out {
    float *y;
    int ldy, n;
    const float *bias;             /* the base product's, or NULL */
    const hr_lora_mat *const *mat; /* [n_groups]; NULL: not adapted */
} hr_lora_out;

/* The step's rows grouped by adapter: group g's tokens are
 * rows[off[g] .. off[g + 1]) (rows of no adapter are in no group). */
typedef struct hr_lora_args {
    const float *x;
    int ldx, k;
    int n_groups;
    const int32_t *rows, *off;
    int count;                     /* 1..HR_LORA_MAX_OUT */
    const hr_lora_out *out;
} hr_lora_args;

/* What a forward context's steps can hold. */
typedef struct hr_bctx_dims {
    int max_tokens, max_seqs; /* a step's tokens and sequences */
    int max_ctx;              /* positions below it */
    int n_heads, n_kv_heads, head_dim, rot_dim;
    int max_k;                /* the widest product input (columns) */
    int d_model;
    int n_experts, n_experts_used, moe_ff; /* 0: no expert layers; moe_ff: the
                                            * widest expert (routed or shared) */
    bool images;              /* steps may carry hr_step_in.embd rows (d_model wide) */
    bool f32_act;             /* quantized products keep the activations f32-grade
                               * (quant_act "f32"); else a backend may round them
                               * (the CPU to int8, the GPU to bf16) */
} hr_bctx_dims;

typedef struct hr_backend_ops {
    /* ---- memory (any thread) ---- */
    void *(*alloc)(hr_backend *be, size_t bytes);      /* NULL: out of memory */
    void (*free)(hr_backend *be, void *p, size_t bytes); /* p may be NULL */
    /* host -> backend, backend -> host, backend -> backend; synchronous */
    int (*upload)(hr_backend *be, void *dst, const void *src, size_t n, hr_error *err);
    int (*download)(hr_backend *be, void *dst, const void *src, size_t n, hr_error *err);
    int (*copy)(hr_backend *be, void *dst, const void *src, size_t n, hr_error *err);
    /* host -> backend, backend -> host of `rows` rows of n bytes, the
     * destination's rows dpitch bytes apart, the source's spitch (one
     * block's layers: one call, not a call a layer); synchronous */
    int (*upload_rows)(hr_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                       size_t n, size_t rows, hr_error *err);
    int (*download_rows)(hr_backend *be, void *dst, size_t dpitch, const void *src,
                         size_t spitch, size_t n, size_t rows, hr_error *err);
    /* free / total memory of the device in bytes (host: 0, 0) */
    void (*mem_info)(hr_backend *be, size_t *free, size_t *total);
    /* The device memory's bandwidth in bytes/s, bytes read plus written by
     * a device-to-device copy of `bytes` (best of a few); 0 when it cannot
     * be measured. NULL on the host (bench reads memory on the pool). */
    double (*membw)(hr_backend *be, size_t bytes);

    /* ---- forward contexts ---- */
    /* Scratch for the steps `dims` bounds; pool: the forward's CPU threads. */
    int (*ctx_new)(hr_backend *be, hr_pool *pool, const hr_bctx_dims *dims, hr_bctx **out,
                   hr_error *err);
    void (*ctx_free)(hr_bctx *c);

    /* ---- one step ---- */
    int (*begin)(hr_bctx *c, const hr_step_in *in, hr_error *err);
    /* x[t] = emb[token[t]] * scale */
    void (*embed)(hr_bctx *c, float *x, const hr_tensor *emb, int d, float scale);
    /* y[t] = norm(x[t]) over T rows of d (b: LayerNorm bias or NULL) */
    void (*norm)(hr_bctx *c, float *y, const float *x, const float *w, const float *b,
                 int kind, float offset, float eps, int T, int d);
    void (*matmul)(hr_bctx *c, const float *x, int ldx, int T, int count,
                   const hr_matmul_out *out);
    void (*qkv)(hr_bctx *c, const hr_qkv_args *a);
    void (*attention)(hr_bctx *c, const hr_attn_in *a);
    /* g = act(g) * u over T rows of n (u NULL: g = act(g)) */
    void (*act)(hr_bctx *c, int act, float *g, const float *u, int T, int n);
    /* x += y * mult, n floats */
    void (*add)(hr_bctx *c, float *x, const float *y, float mult, size_t n);
    /* the rows t with logits[t] set copied from x to y: those with 1 (logits)
     * first, then those with 2 (hidden states), each in token order; their
     * count */
    int (*gather)(hr_bctx *c, float *y, const float *x, int d);
    /* logits = cap * tanh(logits / div / cap) (cap 0: logits / div) */
    void (*logit_scale)(hr_bctx *c, float *logits, size_t n, float div, float cap);
    /* A hint that the op after next reads these weights (NULL: none). */
    void (*prefetch_next)(hr_bctx *c, int count, const hr_tensor *const *w);
    /* Wait for the step's ops; a failure in any of them is reported here. */
    int (*end)(hr_bctx *c, hr_error *err);

    /* ---- optional ops: NULL where the backend has none; a model that needs
     * one is refused at load ("not supported yet on <backend>") ---- */
    /* hr_moe_args: a mixture-of-experts MLP */
    void (*moe)(hr_bctx *c, const hr_moe_args *a);
    /* attention with hr_attn_in.sinks set */
    bool attn_sinks;
    /* hr_deltanet_args: a gated DeltaNet layer */
    void (*deltanet)(hr_bctx *c, const hr_deltanet_args *a);
    /* encoders: attention with hr_attn_in.bidirectional, and embed_abs:
     * x[t] += pos_emb[pos[t]] + type_row (pos_emb [max_pos][d], type_row [d]) */
    bool encoder;
    void (*embed_abs)(hr_bctx *c, float *x, const float *pos_emb, const float *type_row, int d);
    /* The products of out[0..count) (as matmul) with the rows' adapter
     * deltas on out[0..a->count) (hr_lora_args of the same x; grouped:
     * each adapter's matrices are read once per step) */
    void (*lora)(hr_bctx *c, const float *x, int ldx, int T, int count,
                 const hr_matmul_out *out, const hr_lora_args *a);
    /* hr_mamba2_args: a Mamba-2 mixer */
    void (*mamba2)(hr_bctx *c, const hr_mamba2_args *a);
} hr_backend_ops;

struct hr_backend {
    char name[16];          /* "cpu", "cuda:0" */
    bool device_mem;        /* memory off the host: never dereferenced there */
    int math;               /* a device's version of its kernels' arithmetic, for
                             * the model's fingerprint (a prompt cache's rows
                             * are reused only where the pass gives the same
                             * bits; the CPU's: hr_cpu_kernels.math) */
    bool lost;              /* a step failed in a way that leaves the device
                             * unusable (a CUDA kernel fault): every later
                             * step fails (set and read by the thread that
                             * runs the steps) */
    const hr_backend_ops *ops;
    void *impl;
};

/* The host backend (a process-wide value). */
hr_backend *hr_backend_cpu(void);

/* The backend --device `name` asks for: "cpu", "cuda", "cuda:N" or "auto"
 * (also NULL: the first GPU when there is one, named on stderr, else the
 * CPU, with the reason logged at INFO). "cuda" with no GPU, no driver or a build without CUDA is an
 * error of one line naming the cause. Backends live as long as the process. */
int hr_backend_get(const char *name, hr_backend **out, hr_error *err);

#endif
