#include "kernels/cpu/lora.h"
#include "kernels/cpu/cpu.h"

#include <stddef.h>

static inline float *z_of(float *z, int T, int o, int i) {
    return z + ((size_t)o * T + (size_t)i) * HR_LORA_MAX_RANK;
}

/* the group of the i-th grouped row */
static inline int group_of(const hr_lora_args *a, int i) {
    int g = 0;
    while (i >= a->off[g + 1])
        g++;
    return g;
}

long hr_lora_items(const hr_lora_args *a) {
    return a->n_groups == 0 ? 0 : (long)a->count * a->off[a->n_groups];
}

void hr_lora_down(const hr_lora_args *a, float *z, int T, long item) {
    int n_rows = a->off[a->n_groups];
    int o = (int)(item / n_rows), i = (int)(item % n_rows);
    const hr_lora_mat *m = a->out[o].mat[group_of(a, i)];
    if (!m)
        return;
    const hr_cpu_kernels *K = hr_cpu();
    const float *x = a->x + (size_t)a->rows[i] * a->ldx;
    float *zi = z_of(z, T, o, i);
    for (int k = 0; k < m->r; k++)
        zi[k] = m->scale * K->dot(x, m->a + (size_t)k * a->k, a->k);
}

void hr_lora_up(const hr_lora_args *a, const float *z, int T, int o, int j0, int j1) {
    const hr_lora_out *out = &a->out[o];
    const hr_cpu_kernels *K = hr_cpu();
    int len = j1 - j0;
    if (len <= 0)
        return;
    for (int g = 0; g < a->n_groups; g++) {
        const hr_lora_mat *m = out->mat[g];
        if (!m)
            continue;
        for (int i = a->off[g]; i < a->off[g + 1]; i++) {
            float *y = out->y + (size_t)a->rows[i] * out->ldy;
            if (m->dora && out->bias)
                for (int j = j0; j < j1; j++)
                    y[j] -= out->bias[j];
            K->axpys(y + j0, len, z_of((float *)z, T, o, i), m->r, m->bt + j0, (size_t)out->n);
            if (m->dora)
                for (int j = j0; j < j1; j++)
                    y[j] = m->dora[j] * y[j] + (out->bias ? out->bias[j] : 0.0f);
        }
    }
}

void hr_lora_ref(float *z, int T, const hr_lora_args *a) {
    long items = hr_lora_items(a);
    for (long it = 0; it < items; it++)
        hr_lora_down(a, z, T, it);
    for (int o = 0; o < a->count && items; o++)
        hr_lora_up(a, z, T, o, 0, a->out[o].n);
}
