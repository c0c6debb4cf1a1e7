#include "kernels/cpu/moe.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct hr_moe_scratch {
    int max_tokens, d, n_experts, k, ff;
    float *logits;     /* [T][n_experts] */
    int32_t *sel;      /* [T][k] chosen experts */
    float *w;          /* [T][k] their weights */
    int32_t *slot;     /* [T][k] the row of (t, j) in the grouped buffers */
    int32_t *count, *off; /* [n_experts], [n_experts + 1] */
    float *xg, *yg;    /* [T * k][d] grouped inputs / outputs */
    float *gg, *ug;    /* [T * k][ff] */
    float *sh;         /* [T][d] shared expert's output */
    float *sh_s;       /* [T] its gate logits */
};

hr_moe_scratch *hr_moe_scratch_new(int max_tokens, int d, int n_experts, int k, int ff) {
    hr_moe_scratch *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    size_t T = (size_t)max_tokens, rows = T * (size_t)k;
    *s = (hr_moe_scratch){.max_tokens = max_tokens, .d = d, .n_experts = n_experts, .k = k,
                          .ff = ff};
    s->logits = malloc(T * n_experts * sizeof(float));
    s->sel = malloc(rows * sizeof(int32_t));
    s->w = malloc(rows * sizeof(float));
    s->slot = malloc(rows * sizeof(int32_t));
    s->count = malloc((size_t)n_experts * sizeof(int32_t));
    s->off = malloc(((size_t)n_experts + 1) * sizeof(int32_t));
    s->xg = malloc(rows * d * sizeof(float));
    s->yg = malloc(rows * d * sizeof(float));
    s->gg = malloc(rows * ff * sizeof(float));
    s->ug = malloc(rows * ff * sizeof(float));
    s->sh = malloc(T * d * sizeof(float));
    s->sh_s = malloc(T * sizeof(float));
    if (!s->logits || !s->sel || !s->w || !s->slot || !s->count || !s->off || !s->xg ||
        !s->yg || !s->gg || !s->ug || !s->sh || !s->sh_s) {
        hr_moe_scratch_free(s);
        return NULL;
    }
    return s;
}

void hr_moe_scratch_free(hr_moe_scratch *s) {
    if (!s)
        return;
    free(s->logits);
    free(s->sel);
    free(s->w);
    free(s->slot);
    free(s->count);
    free(s->off);
    free(s->xg);
    free(s->yg);
    free(s->gg);
    free(s->ug);
    free(s->sh);
    free(s->sh_s);
    free(s);
}

/* ---- routing ---------------------------------------------------------------- */

/* the k largest of v[0..n), best first, the lower index on ties */
static void top_k(const float *v, int n, int k, int32_t *sel) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++)
                taken = sel[i] == e;
            if (!taken && (best < 0 || v[e] > v[best]))
                best = e;
        }
        sel[j] = best;
    }
}

void hr_moe_route(const float *logits, int n_experts, int k, int router, bool norm_topk,
                  int32_t *sel, float *w) {
    top_k(logits, n_experts, k, sel); /* softmax keeps the order */
    float mx = logits[sel[0]];
    if (router == HR_BROUTER_TOPK_SOFTMAX) {
        float sum = 0;
        for (int j = 0; j < k; j++)
            sum += w[j] = expf(logits[sel[j]] - mx);
        for (int j = 0; j < k; j++)
            w[j] /= sum;
        return;
    }
    float sum = 0;
    for (int e = 0; e < n_experts; e++)
        sum += expf(logits[e] - mx);
    float ksum = 0;
    for (int j = 0; j < k; j++)
        ksum += w[j] = expf(logits[sel[j]] - mx) / sum;
    if (norm_topk)
        for (int j = 0; j < k; j++)
            w[j] /= ksum;
}

void hr_moe_route_grouped(const float *logits, const float *bias, int n_experts, int k,
                          int n_group, int topk_group, bool norm_topk, float scale,
                          int32_t *sel, float *w) {
    float s[1024], c[1024], gs[1024];
    int per = n_experts / n_group;
    for (int e = 0; e < n_experts; e++) {
        s[e] = 1.0f / (1.0f + expf(-logits[e]));
        c[e] = s[e] + bias[e];
    }
    for (int g = 0; g < n_group; g++) { /* a group: the sum of its 2 best */
        int32_t two[2];
        top_k(c + g * per, per, 2, two);
        gs[g] = c[g * per + two[0]] + c[g * per + two[1]];
    }
    int32_t keep[1024];
    top_k(gs, n_group, topk_group, keep);
    for (int g = 0; g < n_group; g++) {
        bool kept = false;
        for (int i = 0; i < topk_group && !kept; i++)
            kept = keep[i] == g;
        for (int e = 0; !kept && e < per; e++)
            c[g * per + e] = 0.0f; /* as transformers' masked_fill(.., 0.0) */
    }
    top_k(c, n_experts, k, sel);
    float sum = 0;
    for (int j = 0; j < k; j++)
        sum += w[j] = s[sel[j]];
    for (int j = 0; j < k; j++)
        w[j] = (norm_topk ? w[j] / (sum + 1e-20f) : w[j]) * scale;
}

/* ---- activations -------------------------------------------------------------- */

static inline float swiglu_clamped(float g, float u, float alpha, float limit) {
    g = g < limit ? g : limit;
    u = u < -limit ? -limit : u > limit ? limit : u;
    return (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
}

/* g = act(g) * u over n rows of ff (the dense path's kernels for the rest) */
static void act_rows(const hr_moe_args *a, float *g, const float *u, int n, int ff) {
    size_t m = (size_t)n * ff;
    switch (a->act) {
    case HR_BACT_SWIGLU_CLAMPED:
        for (size_t i = 0; i < m; i++)
            g[i] = swiglu_clamped(g[i], u[i], a->alpha, a->limit);
        break;
    case HR_BACT_GELU_TANH: hr_gelu_tanh_mul(g, u, (int)m); break;
    case HR_BACT_GELU: hr_gelu_mul(g, u, (int)m); break;
    default: hr_silu_mul(g, u, (int)m); break;
    }
}

/* ---- the layer ------------------------------------------------------------------ */

static const float *row_of(const float *b, int e, int n) { return b ? b + (size_t)e * n : NULL; }

void hr_moe(hr_pool *pool, hr_moe_scratch *s, const hr_moe_args *a, int T) {
    int d = a->d, E = a->n_experts, k = a->k, ff = a->ff;
    hr_matmul(pool, s->logits, E, a->router_x ? a->router_x : a->x, d, T, a->router_w,
              a->router_b);
    memset(s->count, 0, (size_t)E * sizeof *s->count);
    for (int t = 0; t < T; t++) {
        if (a->router == HR_BROUTER_SIGMOID_GROUPED)
            hr_moe_route_grouped(s->logits + (size_t)t * E, a->score_bias, E, k, a->n_group,
                                 a->topk_group, a->norm_topk, a->scale,
                                 s->sel + (size_t)t * k, s->w + (size_t)t * k);
        else
            hr_moe_route(s->logits + (size_t)t * E, E, k, a->router, a->norm_topk,
                         s->sel + (size_t)t * k, s->w + (size_t)t * k);
        for (int j = 0; j < k; j++) {
            int e = s->sel[(size_t)t * k + j];
            if (a->expert_scale)
                s->w[(size_t)t * k + j] *= a->expert_scale[e];
            s->count[e]++;
        }
    }
    /* group the rows by expert, in token order within a group */
    s->off[0] = 0;
    for (int e = 0; e < E; e++)
        s->off[e + 1] = s->off[e] + s->count[e];
    memset(s->count, 0, (size_t)E * sizeof *s->count);
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            int e = s->sel[(size_t)t * k + j], r = s->off[e] + s->count[e]++;
            s->slot[(size_t)t * k + j] = r;
            memcpy(s->xg + (size_t)r * d, a->x + (size_t)t * d, (size_t)d * sizeof(float));
        }
    /* each routed expert once, on its group; the threads that wait in one
     * product prefetch the next one's weights (down, then the next routed
     * expert's up and gate), as the dense layers do */
    for (int e = 0; e < E; e++) {
        int n = s->off[e + 1] - s->off[e];
        if (!n)
            continue;
        int next = e + 1;
        while (next < E && s->off[next + 1] == s->off[next])
            next++;
        size_t r0 = (size_t)s->off[e];
        float *g = s->gg + r0 * ff, *u = s->ug + r0 * ff;
        hr_matmul_prefetch_next(pool, 1, (const hr_tensor *[]){&a->down[e]});
        hr_matmul_multi(pool, s->xg + r0 * d, d, n, 2,
                        (hr_matmul_out[]){{u, ff, &a->up[e], row_of(a->b_up, e, ff)},
                                          {g, ff, &a->gate[e], row_of(a->b_gate, e, ff)}});
        act_rows(a, g, u, n, ff);
        if (next < E)
            hr_matmul_prefetch_next(pool, 2, (const hr_tensor *[]){&a->up[next], &a->gate[next]});
        hr_matmul(pool, s->yg + r0 * d, d, g, ff, n, &a->down[e], row_of(a->b_down, e, d));
    }
    /* each row: its k results in routing order */
    for (int t = 0; t < T; t++) {
        float *o = a->out + (size_t)t * d;
        memset(o, 0, (size_t)d * sizeof *o);
        for (int j = 0; j < k; j++) {
            const float *y = s->yg + (size_t)s->slot[(size_t)t * k + j] * d;
            float w = s->w[(size_t)t * k + j];
            for (int i = 0; i < d; i++)
                o[i] += w * y[i];
        }
    }
    if (!a->sh_ff)
        return;
    int sf = a->sh_ff;
    bool gated = a->sh_inp && a->sh_inp->data;
    hr_matmul_multi(pool, a->x, d, T, gated ? 3 : 2,
                    (hr_matmul_out[]){{s->ug, sf, a->sh_up, NULL}, {s->gg, sf, a->sh_gate, NULL},
                                      {s->sh_s, 1, a->sh_inp, NULL}});
    act_rows(&(hr_moe_args){.act = a->act == HR_BACT_SWIGLU_CLAMPED ? HR_BACT_SILU : a->act},
             s->gg, s->ug, T, sf);
    hr_matmul(pool, s->sh, d, s->gg, sf, T, a->sh_down, NULL);
    for (int t = 0; t < T; t++) {
        float gate = gated ? 1.0f / (1.0f + expf(-s->sh_s[t])) : 1.0f;
        float *o = a->out + (size_t)t * d;
        const float *y = s->sh + (size_t)t * d;
        for (int i = 0; i < d; i++)
            o[i] += gate * y[i];
    }
}
