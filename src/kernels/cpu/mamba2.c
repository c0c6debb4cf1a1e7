#include "kernels/cpu/mamba2.h"

#include <math.h>
#include <string.h>

typedef struct mb_job {
    const hr_mamba2_args *a;
    int T, n_seqs;
    const int32_t *pos, *seq;
} mb_job;

static inline float silu(float x) { return x / (1.0f + expf(-x)); }
static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static int inner_of(const hr_mamba2_args *a) { return a->heads * a->head_dim; }
static int chans_of(const hr_mamba2_args *a) { return inner_of(a) + 2 * a->groups * a->n; }
static int row_of(const hr_mamba2_args *a) {
    return 2 * inner_of(a) + 2 * a->groups * a->n + a->heads;
}

/* ---- per sequence: the causal depthwise conv of [x | B | C], then silu ---- */

static void conv_seq(const mb_job *j, int s) {
    const hr_mamba2_args *a = j->a;
    int C = chans_of(a), K = a->conv_k, I = inner_of(a), W = row_of(a);
    float *st = a->conv_state + (size_t)a->slot[s] * C * (K - 1);
    for (int t = 0; t < j->T; t++) {
        if (j->seq[t] != s)
            continue;
        if (j->pos[t] == 0)
            memset(st, 0, (size_t)C * (K - 1) * sizeof *st);
        const float *x = a->zxbcdt + (size_t)t * W + I; /* past z */
        float *m = a->mixed + (size_t)t * C;
        for (int c = 0; c < C; c++) {
            const float *w = a->conv_w + (size_t)c * K;
            float *h = st + (size_t)c * (K - 1);
            float acc = 0;
            for (int i = 0; i < K - 1; i++)
                acc += w[i] * h[i];
            acc += w[K - 1] * x[c];
            if (a->conv_b)
                acc += a->conv_b[c];
            m[c] = silu(acc);
            if (K > 1) {
                memmove(h, h + 1, (size_t)(K - 2) * sizeof *h);
                h[K - 2] = x[c];
            }
        }
    }
}

static void conv_worker(void *p, int ith, int nth) {
    const mb_job *j = p;
    for (int s = ith; s < j->n_seqs; s += nth)
        if (j->a->slot[s] >= 0)
            conv_seq(j, s);
}

/* ---- per (sequence, head): the selective state space recurrence ---- */

static void head_seq(const mb_job *j, int s, int h) {
    const hr_mamba2_args *a = j->a;
    int I = inner_of(a), C = chans_of(a), W = row_of(a), P = a->head_dim, N = a->n;
    int g = h / (a->heads / a->groups);
    float *S = a->state + ((size_t)a->slot[s] * a->heads + h) * P * N;
    float A = a->a[h];
    for (int t = 0; t < j->T; t++) {
        if (j->seq[t] != s)
            continue;
        if (j->pos[t] == 0)
            memset(S, 0, (size_t)P * N * sizeof *S);
        const float *m = a->mixed + (size_t)t * C;
        const float *x = m + h * P, *B = m + I + g * N, *Cm = m + I + a->groups * N + g * N;
        float dt = softplus(a->zxbcdt[(size_t)t * W + W - a->heads + h] + a->dt_bias[h]);
        float dA = expf(dt * A);
        float *y = a->out + (size_t)t * I + h * P;
        for (int p = 0; p < P; p++) {
            float *Sp = S + (size_t)p * N, dx = dt * x[p], acc = 0;
            for (int k = 0; k < N; k++) {
                Sp[k] = Sp[k] * dA + dx * B[k];
                acc += Sp[k] * Cm[k];
            }
            y[p] = acc + a->d_skip[h] * x[p];
        }
    }
}

static void head_worker(void *p, int ith, int nth) {
    const mb_job *j = p;
    int n = j->n_seqs * j->a->heads;
    for (int i = ith; i < n; i += nth)
        if (j->a->slot[i / j->a->heads] >= 0)
            head_seq(j, i / j->a->heads, i % j->a->heads);
}

/* ---- per token: out = rmsnorm(y * silu(z)) * norm_w ---- */

static void norm_worker(void *p, int ith, int nth) {
    const mb_job *j = p;
    const hr_mamba2_args *a = j->a;
    int I = inner_of(a), W = row_of(a);
    for (int t = ith; t < j->T; t += nth) {
        if (a->slot[j->seq[t]] < 0)
            continue;
        const float *z = a->zxbcdt + (size_t)t * W;
        float *y = a->out + (size_t)t * I, ss = 0;
        for (int i = 0; i < I; i++) {
            y[i] *= silu(z[i]);
            ss += y[i] * y[i];
        }
        float inv = 1.0f / sqrtf(ss / I + a->norm_eps);
        for (int i = 0; i < I; i++)
            y[i] = a->norm_w[i] * (y[i] * inv);
    }
}

void hr_mamba2(hr_pool *pool, const hr_mamba2_args *a, int T, const int32_t *pos,
               const int32_t *seq, int n_seqs) {
    mb_job j = {a, T, n_seqs, pos, seq};
    hr_pool_run(pool, conv_worker, &j);
    hr_pool_run(pool, head_worker, &j);
    hr_pool_run(pool, norm_worker, &j);
}
