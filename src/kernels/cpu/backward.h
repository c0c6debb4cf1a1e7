/* Backward kernels for LoRA training (src/train/): the gradients of the
 * forward pass's ops with respect to their inputs, on the CPU pool.
 *
 * Determinism: every output element is one fixed sequence of float
 * operations whatever the pool's size (work is split by output elements,
 * never by the terms of a sum), so a training run's bits depend on the
 * seed only. */
#ifndef HR_KERNELS_CPU_BACKWARD_H
#define HR_KERNELS_CPU_BACKWARD_H

#include "core/pool.h"
#include "core/tensor.h"

#include <stdbool.h>

/* dx[i*lddx + c] += sum_j dy[i*lddy + j] * w[j][c] for i < n, c < k: the
 * input gradient of y = x . w^T for a frozen 2-D weight w (m, k) of any
 * dtype hr_dequant_range reads, in the row layout (not HR_LAYOUT_X16).
 * The sum runs over j = 0, 1, .. m - 1 in order. */
void hr_matmul_t(hr_pool *pool, float *dx, int lddx, const float *dy, int lddy, int n,
                 const hr_tensor *w);

/* Small dense f32 products (the LoRA factors): c = alpha * op(a) op(b),
 * added to c when acc, for c (M, N) with row stride ldc:
 *   HR_SG_NT  c[i][j] = sum_p a[i][p] b[j][p]   a (M, K), b (N, K)
 *   HR_SG_NN  c[i][j] = sum_p a[i][p] b[p][j]   a (M, K), b (K, N)
 *   HR_SG_TN  c[i][j] = sum_p a[p][i] b[p][j]   a (K, M), b (K, N)
 * p runs 0..K-1 in order; the sum is formed, times alpha, then added. */
enum { HR_SG_NT, HR_SG_NN, HR_SG_TN };
void hr_small_gemm(hr_pool *pool, int mode, int M, int N, int K, float alpha, const float *a,
                   int lda, const float *b, int ldb, float *c, int ldc, bool acc);

/* The input gradient of y = hr_rmsnorm(x, w, offset, d, eps) for one row:
 * dx (+)= r (dy (w + offset)) - x r^3 / d * sum(dy (w + offset) x), r =
 * 1 / sqrt(mean(x^2) + eps); added to dx when acc. */
void hr_rmsnorm_bwd(float *dx, const float *dy, const float *x, const float *w, float offset,
                    int d, float eps, bool acc);

/* The gradients of h = silu(g) u for one row of n: dg = dh u silu'(g),
 * du = dh silu(g) (g, u: the forward's inputs). */
void hr_silu_mul_bwd(float *dg, float *du, const float *dh, const float *g, const float *u,
                     int n);

/* Causal attention of packed sequences (training: every sequence starts
 * at position 0 and attends to itself). Sequence s is tokens [start[s],
 * start[s + 1]); q (T, n_heads*hd), k and v (T, n_kv_heads*hd); out
 * (T, n_heads*hd); lse (T, n_heads) the log of each row's softmax
 * normalizer (the backward's saved state). scratch: nth * max_len
 * floats, max_len the longest sequence. One task per (sequence, KV head). */
typedef struct hr_attn_train {
    const float *q, *k, *v;
    float *out, *lse;
    int n_seqs;
    const int *start;
    int n_heads, n_kv_heads, hd;
    float scale;
    float *scratch;
    int max_len;
    /* backward: dout in; dq, dk, dv out (overwritten) */
    const float *dout;
    float *dq, *dk, *dv;
} hr_attn_train;

void hr_attn_train_fwd(hr_pool *pool, const hr_attn_train *a);
void hr_attn_train_bwd(hr_pool *pool, const hr_attn_train *a);

#endif
