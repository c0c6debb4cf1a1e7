#include "kernels/cpu/ops.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/lora.h"
#include "kernels/cpu/qdot.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/x16.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- matmul: split output columns over threads, 16 at a time ---------- */

/* One product of a job: y[n][m] = x . w^T (+ bias). */
typedef struct mm_part {
    float *y;
    int ldy, m;
    const hr_tensor *w;
    const float *bias;
} mm_part;

#define MAX_PARTS 3

/* Each thread owns a contiguous share of a job's 16-row groups and claims
 * from its front, half of what is left at a time: its claims read the
 * weights as one stream, the prefetches of one running on into the next
 * (Qwen3-0.6B decode 3-5% faster per token than claims from one shared
 * counter, where every claim started a new stream). A thread done with its
 * share takes half of what is left from the back of another's: on shared
 * cores a thread that loses its core for a while would otherwise hold up
 * the job (the results do not depend on who computes a group). */
#define MAX_SHARES 64 /* threads beyond it share the shares */
typedef struct share {
    _Alignas(64) _Atomic uint64_t fb; /* front | back << 32: groups [front, back) */
} share;

/* Products of the same x (same dtype and layout): their 16-row groups, in
 * order, are split over the threads as one list. */
typedef struct matmul_task {
    mm_part part[MAX_PARTS];
    int n_parts;
    int ldx, n;
    const float *x;
    const hr_tensor *w; /* part[0].w: the dtype and layout of all */
    hr_gemm_fn fn;
    hr_gemm_i8_fn fn_i8; /* integer path: x quantized into qx */
    hr_qact qx;
    hr_gemm_x16_fn fn_x16; /* x16 layout: x quantized into q32 */
    hr_qact32 q32;
    long groups, min_chunk; /* 16-row groups in all parts; the fewest per claim */
    int n_shares;
    share share[MAX_SHARES]; /* [i]: thread i's (i % MAX_SHARES) */
    /* adapter deltas (hr_matmul_lora): part i is the lora's output
     * lora_base + i; the job's threads first run the down items (claimed
     * one at a time, any thread any item), wait until all are done, then
     * each claimed column range gets its up right after its product */
    const hr_lora_args *lora;
    float *lz;
    int lora_base;
    long down_items;
    _Alignas(64) _Atomic long down_next;
    _Alignas(64) _Atomic long down_done;
} matmul_task;

/* thread i's share of a job's `groups` 16-row groups: [*f, *b) of ns */
static void share_bounds(long groups, int i, int ns, long *f, long *b) {
    *f = (groups * i / ns) & ~1L;
    *b = i == ns - 1 ? groups : (groups * (i + 1) / ns) & ~1L;
}

static void matmul_part(const matmul_task *t, const mm_part *p, int m0, int m1) {
    if (t->fn_x16)
        t->fn_x16(p->y, p->ldy, &t->q32, t->n, p->w, m0, m1);
    else if (t->fn_i8)
        t->fn_i8(p->y, p->ldy, &t->qx, t->n, p->w, m0, m1);
    else
        t->fn(p->y, p->ldy, t->x, t->ldx, t->n, p->w, m0, m1);
    if (p->bias)
        for (int i = 0; i < t->n; i++)
            for (int j = m0; j < m1; j++)
                p->y[(size_t)i * p->ldy + j] += p->bias[j];
}

/* claim from s's front (or back): half of what is left, at least min
 * groups, whole pairs (the x16 tiles) where it can; false when empty */
static bool claim(share *s, bool back, long min, long *lo, long *hi) {
    uint64_t v = atomic_load_explicit(&s->fb, memory_order_relaxed), nv;
    do {
        long f = (long)(v & 0xffffffffu), b = (long)(v >> 32), c = ((b - f) / 2 + 1) & ~1L;
        if (f >= b)
            return false;
        c = c < min ? min : c;
        if (back) {
            *lo = (b - c) & ~1L;
            *lo = *lo < f ? f : *lo;
            *hi = b;
            nv = (uint64_t)f | (uint64_t)*lo << 32;
        } else {
            *lo = f;
            *hi = f + c < b ? f + c : b;
            nv = (uint64_t)*hi | (uint64_t)b << 32;
        }
    } while (!atomic_compare_exchange_weak_explicit(&s->fb, &v, nv, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

static void matmul_range(const matmul_task *t, long lo, long hi) {
    for (int i = 0; i < t->n_parts && lo < hi; i++) {
        const mm_part *p = &t->part[i];
        long g = (p->m + 15) / 16;
        if (lo < g) {
            int m0 = (int)lo * 16, m1 = hi < g ? (int)hi * 16 : p->m;
            matmul_part(t, p, m0, m1);
            if (t->lora && t->lora_base + i < t->lora->count)
                hr_lora_up(t->lora, t->lz, t->n, t->lora_base + i, m0, m1);
        }
        lo = lo > g ? lo - g : 0;
        hi -= g;
    }
}

/* the down items of the job's adapters, then the wait for all of them
 * (a thread that lost its core mid-item is waited for, spinning a little,
 * then yielding as the pool does) */
static void lora_down_all(matmul_task *t) {
    long it, n = t->down_items;
    while ((it = atomic_fetch_add_explicit(&t->down_next, 1, memory_order_relaxed)) < n) {
        hr_lora_down(t->lora, t->lz, t->n, it);
        atomic_fetch_add_explicit(&t->down_done, 1, memory_order_release);
    }
    for (int spins = 0; atomic_load_explicit(&t->down_done, memory_order_acquire) < n;)
        if (++spins < 2000) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else
            sched_yield();
}

static void matmul_worker(void *arg, int ith, int nth) {
    (void)nth;
    matmul_task *t = arg;
    int ns = t->n_shares;
    long lo, hi;
    if (t->down_items)
        lora_down_all(t);
    while (claim(&t->share[ith % ns], false, t->min_chunk, &lo, &hi))
        matmul_range(t, lo, hi);
    for (int j = 1; j < ns; j++)
        while (claim(&t->share[(ith + j) % ns], true, t->min_chunk, &lo, &hi))
            matmul_range(t, lo, hi);
}

static void qact_worker(void *p, int ith, int nth) {
    matmul_task *t = p;
    long lo, hi;
    hr_split(t->n, ith, nth, &lo, &hi);
    int k = t->qx.k, off = hr_qdot_offset(t->w->dtype);
    for (long i = lo; i < hi; i++) {
        size_t at = (size_t)i * (k / 4);
        hr_cpu()->qact_row(t->x + (size_t)i * t->ldx, k, off,
                           (int8_t *)t->qx.q + (size_t)i * k, (float *)t->qx.d4 + at,
                           (int32_t *)t->qx.c4 + at, (float *)t->qx.s4 + at);
    }
}

static void qact32_worker(void *p, int ith, int nth) {
    matmul_task *t = p;
    long lo, hi;
    hr_split(t->n, ith, nth, &lo, &hi);
    const hr_qact32 *a = &t->q32;
    int k = a->k, D = a->digits, off = hr_qdot_offset(t->w->dtype);
    for (long i = lo; i < hi; i++)
        if (a->block == 256)
            hr_cpu()->qactk_row(t->x + (size_t)i * t->ldx, k, off, a->group,
                                (int8_t *)a->q + (size_t)i * k,
                                (float *)a->d + (size_t)i * (k / 256),
                                (int32_t *)a->c + (size_t)i * (k / a->group),
                                (int8_t *)a->sd + (size_t)i * (k / 16));
        else
            (D == 3 ? hr_cpu()->qact24_row : hr_cpu()->qact32_row)(
                t->x + (size_t)i * t->ldx, k, off, a->group, (int8_t *)a->q + (size_t)i * D * k,
                (float *)a->d + (size_t)i * (k / 32),
                (int32_t *)a->c + (size_t)i * D * (k / a->group),
                (float *)a->s + (size_t)i * (k / 32));
}

int hr_quant_act_parse(const char *name, hr_quant_act *out, hr_error *err) {
    static const char *const names[] = {"default", "int8", "rows", "f32"};
    if (!name || !*name) {
        *out = HR_QACT_DEFAULT;
        return 0;
    }
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, names[i])) {
            *out = (hr_quant_act)i;
            return 0;
        }
    return hr_err(err, HR_EINVAL, "quantized activations '%s': default, int8, rows or f32",
                  name);
}

bool hr_matmul_supports(hr_dtype t) {
    return (unsigned)t < HR_DTYPE_COUNT && hr_cpu()->gemm[t] != NULL;
}

/* GGUF matrices and 4- and 8-bit MLX affine ones (when every scale and
 * bias has an exact f16) are repacked into the x16 layout, where the CPU
 * has its kernels. */
size_t hr_matmul_packed_bytes(const hr_tensor *w, hr_quant_act qa) {
    if (w->ndim != 2 || w->layout != HR_LAYOUT_ROWS || !hr_x16_supports(w) ||
        !hr_cpu()->gemm_x16[w->dtype] || qa == HR_QACT_F32 || qa == HR_QACT_ROWS ||
        w->shape[0] % 16 || w->shape[1] % 64 || w->shape[1] % hr_x16_unit_cols(w))
        return 0;
    return hr_x16_bytes(w);
}

bool hr_matmul_pack(hr_tensor *w, void *dst, hr_quant_act qa) {
    HR_ASSERT(hr_matmul_packed_bytes(w, qa) > 0 && (uintptr_t)dst % 64 == 0);
    if (!hr_x16_pack(w, 0, w->shape[0] / 16, dst)) {
        hr_log(HR_LOG_INFO, "%s: a scale or bias has no exact f16; kept on the f32 path",
               w->name ? w->name : "matrix");
        return false;
    }
    /* int8 activations for GGUF weights (as llama.cpp), 24-bit (f32-grade)
     * ones for MLX weights unless HR_QACT_INT8 */
    bool int8 = w->dtype != HR_DTYPE_AFFINE || qa == HR_QACT_INT8;
    w->nbytes = hr_x16_bytes(w);
    w->data = dst;
    w->layout = HR_LAYOUT_X16;
    w->act_digits = int8 ? 1 : 3;
    return true;
}

/* Scratch bytes for the quantized activations of n rows of k: the row
 * layout's q, d4, c4, s4 (4 bytes a value), and the x16 layout's q, d, s,
 * c (at most 3 + 1/4 + 3/4 bytes a value: 3 digits, groups of 16 or more,
 * plus alignment) */
static size_t scratch_bytes(size_t nk) { return nk * 4 + 128; }

bool hr_matmul_reserve(hr_pool *pool, int n, int k) {
    return !pool || hr_pool_scratch(pool, scratch_bytes((size_t)n * k)) != NULL;
}

/* Quantize x for the integer kernels (into scratch b), then the products:
 * x16 layout (x16.h) or the row layout (qdot.h); the f32 kernels when b is
 * NULL (out of memory for the row layout, which they can read). */
static void run_task(hr_pool *pool, matmul_task *t) {
    const hr_cpu_kernels *K = hr_cpu();
    const hr_tensor *w = t->w;
    int k = (int)w->shape[1], n = t->n;
    size_t nk = (size_t)n * k, bytes = 0;
    bool x16 = w->layout == HR_LAYOUT_X16;
    int G = hr_qdot_group(w->dtype), D = w->act_digits == 3 ? 3 : 1;
    t->fn = K->gemm[w->dtype];
    if (x16) /* q: D nk bytes; d, s: nk/32 floats; c: D nk/G ints */
        bytes = D * nk + 63 + (nk / 32) * 8 + D * (nk / (size_t)G) * 4 + 64;
    else if (K->gemm_i8[w->dtype] && k % 64 == 0 && w->act_digits >= 0)
        bytes = nk * 4; /* q: nk bytes; d4, c4, s4: nk/4 x 4 bytes */
    void *owned = NULL;
    char *b = !bytes ? NULL : pool ? hr_pool_scratch(pool, bytes) : (owned = malloc(bytes));
    hr_task_fn quantize = NULL;
    if (x16) {
        HR_ASSERT(K->gemm_x16[w->dtype] && b); /* no f32 kernel reads this layout */
        HR_ASSERT(D == 1 || w->dtype == HR_DTYPE_AFFINE); /* gemm_x16_avx512.c's DIGS */
        /* the K-quants' sd (nk/16 bytes) where the others' s is */
        size_t at = (D * nk + 63) / 64 * 64;
        int blk = D == 1 ? hr_qdot_act_block(w->dtype) : 32;
        t->fn_x16 = K->gemm_x16[w->dtype];
        t->q32 = (hr_qact32){.q = (int8_t *)b, .d = (float *)(b + at),
                             .s = blk == 32 ? (float *)(b + at + nk / 32 * 4) : NULL,
                             .sd = blk == 256 ? (int8_t *)(b + at + nk / 32 * 4) : NULL,
                             .c = (int32_t *)(b + at + nk / 32 * 8), .k = k, .group = G,
                             .digits = D, .block = blk};
        quantize = qact32_worker;
    } else if (b) {
        t->fn_i8 = K->gemm_i8[w->dtype];
        t->qx = (hr_qact){.q = (int8_t *)b, .d4 = (float *)(b + nk),
                          .c4 = (int32_t *)(b + 2 * nk), .s4 = (float *)(b + 3 * nk), .k = k};
        quantize = qact_worker;
    }
    int nth = hr_pool_size(pool);
    t->groups = 0;
    for (int i = 0; i < t->n_parts; i++)
        t->groups += (t->part[i].m + 15) / 16;
    t->min_chunk = nth == 1 ? t->groups : 2;
    t->n_shares = nth < MAX_SHARES ? nth : MAX_SHARES;
    HR_ASSERT(t->groups < ((long)1 << 32));
    for (int i = 0, ns = t->n_shares; i < ns; i++) {
        long f, b;
        share_bounds(t->groups, i, ns, &f, &b);
        atomic_init(&t->share[i].fb, (uint64_t)f | (uint64_t)b << 32);
    }
    if (quantize && n >= 8)
        hr_pool_run(pool, quantize, t);
    else if (quantize)
        quantize(t, 0, 1);
    hr_pool_run(pool, matmul_worker, t);
    free(owned);
}

/* The first bytes of each thread's share it prefetches (hr_pool.h): the
 * waits between a decode step's jobs last 5-30 us, at most about 400 KiB
 * of reading at a core's share of the bandwidth. */
#define PREFETCH_CAP (256 << 10)

int hr_matmul_prefetch_ranges(int nth, int count, const hr_tensor *const *w,
                              hr_pool_range *r) {
    int ns = nth < MAX_SHARES ? nth : MAX_SHARES;
    long groups = 0;
    for (int i = 0; i < count; i++)
        groups += (w[i]->shape[0] + 15) / 16;
    for (int i = 0; i < ns; i++) {
        long f, b;
        share_bounds(groups, i, ns, &f, &b);
        r[i] = (hr_pool_range){0};
        /* the share's groups from f on in its first part, up to b */
        for (int j = 0; j < count && f < b; j++) {
            long g = (w[j]->shape[0] + 15) / 16;
            if (f < g) {
                size_t gb = w[j]->nbytes / (size_t)g, n = (size_t)((b < g ? b : g) - f) * gb;
                r[i] = (hr_pool_range){(const char *)w[j]->data + (size_t)f * gb,
                                       n < PREFETCH_CAP ? n : PREFETCH_CAP};
                break;
            }
            f -= g;
            b -= g;
        }
    }
    return ns;
}

void hr_matmul_prefetch_next(hr_pool *pool, int count, const hr_tensor *const *w) {
    int nth = hr_pool_size(pool);
    if (nth == 1)
        return;
    hr_pool_range r[MAX_SHARES];
    hr_pool_prefetch_next(pool, r, hr_matmul_prefetch_ranges(nth, count, w, r));
}

void hr_matmul(hr_pool *pool, float *y, int ldy, const float *x, int ldx, int n,
               const hr_tensor *w, const float *bias) {
    hr_matmul_multi(pool, x, ldx, n, 1, &(hr_matmul_out){y, ldy, w, bias});
}

void hr_matmul_multi(hr_pool *pool, const float *x, int ldx, int n, int count,
                     const hr_matmul_out *out) {
    hr_matmul_lora(pool, x, ldx, n, count, out, NULL, NULL);
}

void hr_matmul_lora(hr_pool *pool, const float *x, int ldx, int n, int count,
                    const hr_matmul_out *out, const hr_lora_args *lora, float *z) {
    long items = lora ? hr_lora_items(lora) : 0;
    for (int i = 0; i < count;) {
        const hr_tensor *w = out[i].w;
        HR_ASSERT(w->ndim == 2 && hr_matmul_supports(w->dtype));
        /* the first job runs the down items; every job its parts' ups */
        matmul_task t = {.ldx = ldx, .n = n, .x = x, .w = w, .lora = items ? lora : NULL,
                         .lz = z, .lora_base = i, .down_items = i == 0 ? items : 0};
        atomic_init(&t.down_next, 0);
        atomic_init(&t.down_done, 0);
        /* the next products with the same dtype, layout and k join this job */
        for (; i < count && t.n_parts < MAX_PARTS; i++) {
            const hr_tensor *v = out[i].w;
            if (v->dtype != w->dtype || v->layout != w->layout || v->shape[1] != w->shape[1] ||
                v->act_digits != w->act_digits ||
                (w->dtype == HR_DTYPE_AFFINE &&
                 (v->q.bits != w->q.bits || v->q.group != w->q.group)))
                break;
            t.part[t.n_parts++] = (mm_part){out[i].y, out[i].ldy, (int)v->shape[0], v,
                                            out[i].bias};
        }
        run_task(pool, &t);
    }
}

/* ---- row ops ------------------------------------------------------------ */

void hr_rmsnorm(float *y, const float *x, const float *w, float offset, int d,
                float eps) {
    hr_cpu()->rmsnorm(y, x, w, offset, d, eps);
}

void hr_layernorm(float *y, const float *x, const float *w, const float *b,
                  int d, float eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < d; i++)
        mean += x[i];
    mean /= d;
    for (int i = 0; i < d; i++)
        var += ((double)x[i] - mean) * ((double)x[i] - mean);
    var /= d;
    float r = 1.0f / sqrtf((float)var + eps), mu = (float)mean;
    for (int i = 0; i < d; i++)
        y[i] = (x[i] - mu) * r * w[i] + (b ? b[i] : 0.0f);
}

void hr_rope_table(float *cs, int rot_dim, int pos, const float *inv_freq,
                   float attn_factor) {
    int half = rot_dim / 2;
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * inv_freq[i];
        cs[i] = cosf(ang) * attn_factor;
        cs[half + i] = sinf(ang) * attn_factor;
    }
}

void hr_rope_table_mrope(float *cs, int rot_dim, const int32_t pos[3], const int section[3],
                         const float *inv_freq, float attn_factor) {
    int half = rot_dim / 2, k = 0, end = section[0];
    for (int i = 0; i < half; i++) {
        while (i >= end && k < 2)
            end += section[++k];
        float ang = (float)pos[k] * inv_freq[i];
        cs[i] = cosf(ang) * attn_factor;
        cs[half + i] = sinf(ang) * attn_factor;
    }
}

void hr_rope(float *x, int n_heads, int head_dim, int rot_dim, const float *cs,
             bool interleaved) {
    int half = rot_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
            float c = cs[i], s = cs[half + i], x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x1 * c + x0 * s;
        }
    }
}

void hr_softmax(float *x, int n) { hr_cpu()->softmax(x, n); }

void hr_softcap(float *x, int n, float cap) {
    for (int i = 0; i < n; i++)
        x[i] = tanhf(x[i] / cap) * cap;
}

void hr_silu_mul(float *g, const float *u, int n) { hr_cpu()->silu_mul(g, u, n); }

void hr_gelu_tanh_mul(float *g, const float *u, int n) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int i = 0; i < n; i++) {
        float x = g[i];
        g[i] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) *
               (u ? u[i] : 1.0f);
    }
}

void hr_gelu_mul(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++)
        g[i] = 0.5f * g[i] * (1.0f + erff(g[i] * 0.7071067811865476f)) *
               (u ? u[i] : 1.0f);
}

void hr_store_row(void *dst, const float *x, int n, hr_dtype t) {
    if (t == HR_DTYPE_F32)
        memcpy(dst, x, (size_t)n * sizeof *x);
    else
        hr_cpu()->to_half(dst, x, n, t);
}
