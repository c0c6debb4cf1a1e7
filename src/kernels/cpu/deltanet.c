#include "kernels/cpu/deltanet.h"

#include <math.h>
#include <string.h>

typedef struct dn_job {
    const hr_deltanet_args *a;
    int T, n_seqs;
    const int32_t *pos, *seq;
} dn_job;

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* x * rsqrt(sum(x^2) + eps), as transformers' l2norm */
static inline void l2norm(float *x, int n, float scale) {
    float ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    float inv = 1.0f / sqrtf(ss + 1e-6f) * scale;
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

/* ---- per sequence: the channels in conv order, the conv, the L2 norms ---- */

static void conv_seq(const dn_job *j, int s) {
    const hr_deltanet_args *a = j->a;
    int nk = a->n_k_heads, r = a->n_v_heads / nk, dk = a->dk, dv = a->dv, K = a->conv_k;
    int kd = nk * dk, vd = a->n_v_heads * dv, C = 2 * kd + vd, W = 2 * dk + 2 * r * dv;
    float *st = a->conv_state + (size_t)a->slot[s] * C * (K - 1);
    float x[1 << 14];
    for (int t = 0; t < j->T; t++) {
        if (j->seq[t] != s)
            continue;
        if (j->pos[t] == 0)
            memset(st, 0, (size_t)C * (K - 1) * sizeof *st);
        const float *in = a->qkvz + (size_t)t * (2 * kd + 2 * vd);
        for (int g = 0; g < nk; g++) { /* [q_g k_g v_g z_g] -> [q | k | v] */
            memcpy(x + g * dk, in + g * W, (size_t)dk * sizeof *x);
            memcpy(x + kd + g * dk, in + g * W + dk, (size_t)dk * sizeof *x);
            memcpy(x + 2 * kd + g * r * dv, in + g * W + 2 * dk, (size_t)r * dv * sizeof *x);
        }
        float *m = a->mixed + (size_t)t * C;
        for (int c = 0; c < C; c++) {
            const float *w = a->conv_w + (size_t)c * K;
            float *h = st + (size_t)c * (K - 1);
            float acc = 0;
            for (int i = 0; i < K - 1; i++)
                acc += w[i] * h[i];
            acc += w[K - 1] * x[c];
            m[c] = silu(acc);
            if (K > 1) {
                memmove(h, h + 1, (size_t)(K - 2) * sizeof *h);
                h[K - 2] = x[c];
            }
        }
        for (int g = 0; g < nk; g++) {
            l2norm(m + g * dk, dk, 1.0f / sqrtf((float)dk));
            l2norm(m + kd + g * dk, dk, 1.0f);
        }
    }
}

static void conv_worker(void *p, int ith, int nth) {
    const dn_job *j = p;
    for (int s = ith; s < j->n_seqs; s += nth)
        if (j->a->slot[s] >= 0)
            conv_seq(j, s);
}

/* ---- per (sequence, value head): the delta rule and the gated norm ---- */

static void head_seq(const dn_job *j, int s, int h) {
    const hr_deltanet_args *a = j->a;
    int nk = a->n_k_heads, nv = a->n_v_heads, r = nv / nk, dk = a->dk, dv = a->dv;
    int kd = nk * dk, vd = nv * dv, C = 2 * kd + vd, W = 2 * dk + 2 * r * dv;
    int g = h / r, hh = h % r;
    float *S = a->state + ((size_t)a->slot[s] * nv + h) * dk * dv;
    float A = a->a[h];
    float kv[1024], o[1024];
    for (int t = 0; t < j->T; t++) {
        if (j->seq[t] != s)
            continue;
        if (j->pos[t] == 0)
            memset(S, 0, (size_t)dk * dv * sizeof *S);
        const float *m = a->mixed + (size_t)t * C;
        const float *q = m + g * dk, *k = m + kd + g * dk, *v = m + 2 * kd + h * dv;
        const float *ba = a->ba + (size_t)t * 2 * nv;
        float beta = sigmoid(ba[g * 2 * r + hh]);
        float decay = expf(A * softplus(ba[g * 2 * r + r + hh] + a->dt_bias[h]));
        for (int i = 0; i < dk * dv; i++)
            S[i] *= decay;
        for (int c = 0; c < dv; c++)
            kv[c] = 0;
        for (int i = 0; i < dk; i++)
            for (int c = 0; c < dv; c++)
                kv[c] += S[i * dv + c] * k[i];
        for (int c = 0; c < dv; c++)
            kv[c] = (v[c] - kv[c]) * beta;
        for (int i = 0; i < dk; i++)
            for (int c = 0; c < dv; c++)
                S[i * dv + c] += k[i] * kv[c];
        for (int c = 0; c < dv; c++)
            o[c] = 0;
        for (int i = 0; i < dk; i++)
            for (int c = 0; c < dv; c++)
                o[c] += S[i * dv + c] * q[i];
        /* rmsnorm(o) * w * silu(z) */
        const float *z = a->qkvz + (size_t)t * (2 * kd + 2 * vd) + g * W + 2 * dk + r * dv +
                         hh * dv;
        float ss = 0;
        for (int c = 0; c < dv; c++)
            ss += o[c] * o[c];
        float inv = 1.0f / sqrtf(ss / dv + a->norm_eps);
        float *out = a->out + (size_t)t * vd + h * dv;
        for (int c = 0; c < dv; c++)
            out[c] = a->norm_w[c] * (o[c] * inv) * silu(z[c]);
    }
}

static void head_worker(void *p, int ith, int nth) {
    const dn_job *j = p;
    int n = j->n_seqs * j->a->n_v_heads;
    for (int i = ith; i < n; i += nth)
        if (j->a->slot[i / j->a->n_v_heads] >= 0)
            head_seq(j, i / j->a->n_v_heads, i % j->a->n_v_heads);
}

void hr_deltanet(hr_pool *pool, const hr_deltanet_args *a, int T, const int32_t *pos,
                 const int32_t *seq, int n_seqs) {
    dn_job j = {a, T, n_seqs, pos, seq};
    hr_pool_run(pool, conv_worker, &j);
    hr_pool_run(pool, head_worker, &j);
}
