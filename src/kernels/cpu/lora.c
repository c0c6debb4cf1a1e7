#include "kernels/cpu/lora.h"
#include "kernels/cpu/cpu.h"

#include <stddef.h>

typedef struct lora_task {
    const hr_lora_args *a;
    float *z;   /* [count][T][HR_LORA_MAX_RANK] */
    int T;
} lora_task;

static inline float *z_of(const lora_task *t, int o, int i) {
    return t->z + ((size_t)o * t->T + (size_t)i) * HR_LORA_MAX_RANK;
}

/* the group of the i-th grouped row */
static inline int group_of(const hr_lora_args *a, int i) {
    int g = 0;
    while (i >= a->off[g + 1])
        g++;
    return g;
}

/* z[o][i][k] = scale * x[rows[i]] . a[k], items (o, i, k) split evenly */
static void down_worker(void *p, int ith, int nth) {
    const lora_task *t = p;
    const hr_lora_args *a = t->a;
    const hr_cpu_kernels *K = hr_cpu();
    int n_rows = a->off[a->n_groups];
    long items = (long)a->count * n_rows * HR_LORA_MAX_RANK, lo, hi;
    hr_split(items, ith, nth, &lo, &hi);
    for (long it = lo; it < hi; it++) {
        int k = (int)(it % HR_LORA_MAX_RANK);
        int i = (int)(it / HR_LORA_MAX_RANK % n_rows);
        int o = (int)(it / HR_LORA_MAX_RANK / n_rows);
        const hr_lora_mat *m = a->out[o].mat[group_of(a, i)];
        if (!m || k >= m->r)
            continue;
        const float *x = a->x + (size_t)a->rows[i] * a->ldx;
        z_of(t, o, i)[k] = m->scale * K->dot(x, m->a + (size_t)k * a->k, a->k);
    }
}

/* columns [j0, j1) of output o for every grouped row */
static void up_cols(const lora_task *t, int o, int j0, int j1) {
    const hr_lora_args *a = t->a;
    const hr_lora_out *out = &a->out[o];
    const hr_cpu_kernels *K = hr_cpu();
    int len = j1 - j0;
    for (int g = 0; g < a->n_groups; g++) {
        const hr_lora_mat *m = out->mat[g];
        if (!m)
            continue;
        for (int i = a->off[g]; i < a->off[g + 1]; i++) {
            float *y = out->y + (size_t)a->rows[i] * out->ldy;
            const float *z = z_of(t, o, i);
            if (m->dora && out->bias)
                for (int j = j0; j < j1; j++)
                    y[j] -= out->bias[j];
            for (int k = 0; k < m->r; k++)
                K->axpy(y + j0, z[k], m->bt + (size_t)k * out->n + j0, len);
            if (m->dora)
                for (int j = j0; j < j1; j++)
                    y[j] = m->dora[j] * y[j] + (out->bias ? out->bias[j] : 0.0f);
        }
    }
}

/* outputs' columns in 16-column chunks, split evenly: a chunk's bounds
 * do not depend on the thread count, so neither does any element */
static void up_worker(void *p, int ith, int nth) {
    const lora_task *t = p;
    const hr_lora_args *a = t->a;
    long chunks = 0;
    for (int o = 0; o < a->count; o++)
        chunks += (a->out[o].n + 15) / 16;
    long lo, hi;
    hr_split(chunks, ith, nth, &lo, &hi);
    long c = 0;
    for (int o = 0; o < a->count && c < hi; o++) {
        int n = a->out[o].n;
        long nc = (n + 15) / 16;
        long c0 = lo > c ? lo - c : 0, c1 = hi - c < nc ? hi - c : nc;
        for (long q = c0; q < c1; q++) {
            int j0 = (int)q * 16, j1 = j0 + 16 < n ? j0 + 16 : n;
            up_cols(t, o, j0, j1);
        }
        c += nc;
    }
}

/* Multiply-adds below which the deltas run on the calling thread (waking
 * the pool twice costs more): one decode row of rank 16 on a 576-wide
 * model is ~18K a product; 4 rows of 4 adapters, ~74K, spread (0.545x ->
 * 0.75x of the base with 4 clients, docs/adapters.md). Either way every
 * element is computed the same way. */
#define INLINE_MACS (1L << 16)

void hr_lora(hr_pool *pool, float *z, int T, const hr_lora_args *a) {
    if (a->n_groups == 0 || a->off[a->n_groups] == 0)
        return;
    long macs = 0;
    for (int o = 0; o < a->count; o++)
        for (int g = 0; g < a->n_groups; g++)
            if (a->out[o].mat[g])
                macs += (long)(a->off[g + 1] - a->off[g]) * a->out[o].mat[g]->r *
                        (a->k + a->out[o].n);
    lora_task t = {a, z, T};
    if (macs < INLINE_MACS) {
        down_worker(&t, 0, 1);
        up_worker(&t, 0, 1);
        return;
    }
    hr_pool_run(pool, down_worker, &t);
    hr_pool_run(pool, up_worker, &t);
}

void hr_lora_ref(float *z, int T, const hr_lora_args *a) {
    if (a->n_groups == 0 || a->off[a->n_groups] == 0)
        return;
    lora_task t = {a, z, T};
    down_worker(&t, 0, 1);
    up_worker(&t, 0, 1);
}
