#include "kernels/cpu/backward.h"
#include "core/error.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quant.h"

#include <math.h>
#include <string.h>

/* ---- dx += dy . w (frozen weight) --------------------------------------------- */

#define MT_ROWS 8   /* weight rows dequantized together */
#define MT_COLS 256 /* the widest column slice (a multiple of every block) */

typedef struct mt_task {
    float *dx;
    const float *dy;
    int lddx, lddy, n, cols;
    const hr_tensor *w;
} mt_task;

/* one column slice [c0, c0 + nc) of dx for every row */
static inline void mt_slice(const mt_task *t, int c0, int nc) {
    float wb[MT_ROWS][MT_COLS];
    int m = (int)t->w->shape[0];
    for (int j0 = 0; j0 < m; j0 += MT_ROWS) {
        int nr = m - j0 < MT_ROWS ? m - j0 : MT_ROWS;
        for (int r = 0; r < nr; r++)
            hr_dequant_range(t->w, j0 + r, c0, nc, wb[r]);
        if (nr < MT_ROWS) /* the missing rows add 0 * 0 */
            memset(wb[nr], 0, (size_t)(MT_ROWS - nr) * MT_COLS * sizeof(float));
        for (int i = 0; i < t->n; i++) {
            const float *a = t->dy + (size_t)i * t->lddy + j0;
            float c8[MT_ROWS];
            bool any = false;
            for (int r = 0; r < MT_ROWS; r++) {
                c8[r] = r < nr ? a[r] : 0.0f;
                any |= c8[r] != 0.0f;
            }
            if (!any)
                continue; /* adding 0 * w changes nothing (finite w) */
            float *o = t->dx + (size_t)i * t->lddx + c0;
            /* one pass over the slice: o + a0 w0 + a1 w1 + .. in that order */
            for (int c = 0; c < nc; c++) {
                float v = o[c];
                for (int r = 0; r < MT_ROWS; r++)
                    v += c8[r] * wb[r][c];
                o[c] = v;
            }
        }
    }
}

static void mt_worker(void *p, int ith, int nth) {
    const mt_task *t = p;
    int k = (int)t->w->shape[1], n_sl = (k + t->cols - 1) / t->cols;
    for (int s = ith; s < n_sl; s += nth) {
        int c0 = s * t->cols;
        mt_slice(t, c0, k - c0 < t->cols ? k - c0 : t->cols);
    }
}

void hr_matmul_t(hr_pool *pool, float *dx, int lddx, const float *dy, int lddy, int n,
                 const hr_tensor *w) {
    HR_ASSERT(w->ndim == 2 && w->layout == HR_LAYOUT_ROWS);
    int k = (int)w->shape[1], nth = hr_pool_size(pool);
    /* narrower slices when the wide ones would leave threads idle */
    int cols = k / MT_COLS >= nth ? MT_COLS : 64;
    int blk = hr_tensor_block_cols(w);
    if (blk > cols)
        cols = blk <= MT_COLS ? blk : MT_COLS;
    mt_task t = {dx, dy, lddx, lddy, n, cols, w};
    hr_pool_run(pool, mt_worker, &t);
}

/* ---- dot and axpy ----------------------------------------------------------------- */

/* 8 partial sums (element i in sum i % 8), added pairwise at the end: a
 * fixed order the compiler vectorizes */
static inline float dotf(const float *a, const float *b, int n) {
    float s[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            s[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++)
        s[l] += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static inline void axpyf(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* ---- small products ----------------------------------------------------------- */

#define SG_COLS 64

typedef struct sg_task {
    int mode, M, N, K, lda, ldb, ldc;
    float alpha;
    const float *a, *b;
    float *c;
    bool acc;
} sg_task;

static void sg_worker(void *p, int ith, int nth) {
    const sg_task *t = p;
    int nb = (t->N + SG_COLS - 1) / SG_COLS;
    long tasks = (long)t->M * nb;
    float acc[SG_COLS];
    for (long u = ith; u < tasks; u += nth) {
        int i = (int)(u / nb), j0 = (int)(u % nb) * SG_COLS;
        int nj = t->N - j0 < SG_COLS ? t->N - j0 : SG_COLS;
        float *c = t->c + (size_t)i * t->ldc + j0;
        if (t->mode == HR_SG_NT) {
            const float *ar = t->a + (size_t)i * t->lda;
            for (int j = 0; j < nj; j++) {
                acc[j] = dotf(ar, t->b + (size_t)(j0 + j) * t->ldb, t->K);
            }
        } else {
            memset(acc, 0, sizeof acc);
            for (int q = 0; q < t->K; q++) {
                float av = t->mode == HR_SG_NN ? t->a[(size_t)i * t->lda + q]
                                               : t->a[(size_t)q * t->lda + i];
                if (av == 0.0f)
                    continue;
                const float *br = t->b + (size_t)q * t->ldb + j0;
                for (int j = 0; j < nj; j++)
                    acc[j] += av * br[j];
            }
        }
        for (int j = 0; j < nj; j++)
            c[j] = t->acc ? c[j] + t->alpha * acc[j] : t->alpha * acc[j];
    }
}

void hr_small_gemm(hr_pool *pool, int mode, int M, int N, int K, float alpha, const float *a,
                   int lda, const float *b, int ldb, float *c, int ldc, bool acc) {
    sg_task t = {mode, M, N, K, lda, ldb, ldc, alpha, a, b, c, acc};
    if ((long)M * N * K < 32768)
        sg_worker(&t, 0, 1);
    else
        hr_pool_run(pool, sg_worker, &t);
}

/* ---- row ops ------------------------------------------------------------------ */

void hr_rmsnorm_bwd(float *dx, const float *dy, const float *x, const float *w, float offset,
                    int d, float eps, bool acc) {
    double ss = 0, dot = 0;
    for (int i = 0; i < d; i++) {
        ss += (double)x[i] * x[i];
        dot += (double)dy[i] * (w[i] + offset) * x[i];
    }
    double r = 1.0 / sqrt(ss / d + eps);
    float c = (float)(dot * r * r * r / d);
    float rf = (float)r;
    for (int i = 0; i < d; i++) {
        float g = rf * dy[i] * (w[i] + offset) - c * x[i];
        dx[i] = acc ? dx[i] + g : g;
    }
}

void hr_silu_mul_bwd(float *dg, float *du, const float *dh, const float *g, const float *u,
                     int n) {
    for (int i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + expf(-g[i]));
        float silu = g[i] * s;
        du[i] = dh[i] * silu;
        dg[i] = dh[i] * u[i] * (s * (1.0f + g[i] * (1.0f - s)));
    }
}

/* ---- attention ---------------------------------------------------------------- */

/* task u: sequence u / n_kv_heads, KV head u % n_kv_heads */
static void attn_fwd_worker(void *p, int ith, int nth) {
    const hr_attn_train *a = p;
    int hd = a->hd, G = a->n_heads / a->n_kv_heads;
    int qd = a->n_heads * hd, kvd = a->n_kv_heads * hd;
    float *sc = a->scratch + (size_t)ith * a->max_len;
    for (int u = ith; u < a->n_seqs * a->n_kv_heads; u += nth) {
        int s = u / a->n_kv_heads, kvh = u % a->n_kv_heads;
        int t0 = a->start[s], L = a->start[s + 1] - t0;
        const float *k = a->k + (size_t)t0 * kvd + kvh * hd;
        const float *v = a->v + (size_t)t0 * kvd + kvh * hd;
        for (int i = 0; i < L; i++)
            for (int g = 0; g < G; g++) {
                int h = kvh * G + g;
                const float *q = a->q + (size_t)(t0 + i) * qd + h * hd;
                float *o = a->out + (size_t)(t0 + i) * qd + h * hd;
                float mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    sc[j] = dotf(q, k + (size_t)j * kvd, hd) * a->scale;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) {
                    sc[j] = expf(sc[j] - mx);
                    sum += sc[j];
                }
                float inv = (float)(1.0 / sum);
                memset(o, 0, (size_t)hd * sizeof *o);
                for (int j = 0; j <= i; j++)
                    axpyf(o, sc[j] * inv, v + (size_t)j * kvd, hd);
                a->lse[(size_t)(t0 + i) * a->n_heads + h] = mx + (float)log(sum);
            }
    }
}

void hr_attn_train_fwd(hr_pool *pool, const hr_attn_train *a) {
    hr_pool_run(pool, attn_fwd_worker, (void *)a);
}

/* dS = P (dP - D), D = dout . out; dq = scale dS k, dk += scale dS^T q,
 * dv += P^T dout; the task owns its sequence's rows of dk, dv for its KV
 * head and of dq for its query heads. */
static void attn_bwd_worker(void *p, int ith, int nth) {
    const hr_attn_train *a = p;
    int hd = a->hd, G = a->n_heads / a->n_kv_heads;
    int qd = a->n_heads * hd, kvd = a->n_kv_heads * hd;
    for (int u = ith; u < a->n_seqs * a->n_kv_heads; u += nth) {
        int s = u / a->n_kv_heads, kvh = u % a->n_kv_heads;
        int t0 = a->start[s], L = a->start[s + 1] - t0;
        const float *k = a->k + (size_t)t0 * kvd + kvh * hd;
        const float *v = a->v + (size_t)t0 * kvd + kvh * hd;
        float *dk = a->dk + (size_t)t0 * kvd + kvh * hd;
        float *dv = a->dv + (size_t)t0 * kvd + kvh * hd;
        for (int j = 0; j < L; j++) {
            memset(dk + (size_t)j * kvd, 0, (size_t)hd * sizeof *dk);
            memset(dv + (size_t)j * kvd, 0, (size_t)hd * sizeof *dv);
        }
        for (int i = 0; i < L; i++)
            for (int g = 0; g < G; g++) {
                int h = kvh * G + g;
                size_t qo = (size_t)(t0 + i) * qd + h * hd;
                const float *q = a->q + qo, *o = a->out + qo, *dout = a->dout + qo;
                float *dq = a->dq + qo;
                float lse = a->lse[(size_t)(t0 + i) * a->n_heads + h];
                float D = dotf(dout, o, hd);
                memset(dq, 0, (size_t)hd * sizeof *dq);
                for (int j = 0; j <= i; j++) {
                    float pj = expf(dotf(q, k + (size_t)j * kvd, hd) * a->scale - lse);
                    float dp = dotf(dout, v + (size_t)j * kvd, hd);
                    float ds = pj * (dp - D) * a->scale;
                    axpyf(dq, ds, k + (size_t)j * kvd, hd);
                    axpyf(dk + (size_t)j * kvd, ds, q, hd);
                    axpyf(dv + (size_t)j * kvd, pj, dout, hd);
                }
            }
    }
}

void hr_attn_train_bwd(hr_pool *pool, const hr_attn_train *a) {
    hr_pool_run(pool, attn_bwd_worker, (void *)a);
}
