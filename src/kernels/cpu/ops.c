#include "kernels/cpu/ops.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"
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

/* ---- attention ------------------------------------------------------------ */

/* One side (K or V) of the pool's layer: its format, its rows' bytes and
 * a block's bytes */
typedef struct kv_side {
    const void *base;
    hr_dtype t;
    size_t rb, stride;
    int bits;          /* AFFINE: bits; TURBO: the rate */
} kv_side;

static kv_side side_of(const hr_attn_args *a, bool v) {
    hr_dtype t = v && a->v_block_stride ? a->v_dtype : a->kv_dtype;
    size_t bs = v && a->v_block_stride ? a->v_block_stride : a->block_stride;
    int bits = v && a->v_bits ? a->v_bits : a->kv_bits;
    return (kv_side){v ? a->v : a->k, t, hr_kv_row_size(t, a->head_dim, bits, a->kv_group),
                     hr_kv_is_rec(t) ? bs : bs * hr_dtype_size(t), bits};
}

/* Rows [s, s + cnt) of one block (a block's slots of a KV head are
 * contiguous) of KV head kvh, as f32: the pool's own rows when they are
 * F32, else converted (half precision exactly, quantized records through
 * their loaders: the ISA's kvq_load) into buf. */
static const float *kv_rows(const hr_attn_args *a, const kv_side *sd, int32_t blk, int kvh,
                            int s, int cnt, float *buf) {
    int hd = a->head_dim;
    const char *r = (const char *)sd->base + (size_t)blk * sd->stride +
                    ((size_t)kvh * a->block_size + (size_t)s) * sd->rb;
    if (sd->t == HR_DTYPE_F32)
        return (const float *)r;
    for (int j = 0; j < cnt && hr_kv_is_rec(sd->t); j++) {
        if (sd->t == HR_DTYPE_AFFINE)
            hr_cpu()->kvq_load(buf + (size_t)j * hd, r + (size_t)j * sd->rb, hd, a->kv_bits,
                               a->kv_group);
        else
            hr_kv_row_load(buf + (size_t)j * hd, r + (size_t)j * sd->rb, hd, sd->t, 0, 0);
    }
    if (!hr_kv_is_rec(sd->t))
        hr_cpu()->widen(buf, (const uint16_t *)r, (size_t)cnt * hd, sd->t);
    return buf;
}

/* Floats of converted K/V rows a task holds at once (a run of a block) */
#define ROWS_BUF 4096

/* The ISA's attn_dots and attn_axpys (cpu.h), or their definition */
static void attn_dots(const hr_cpu_kernels *cpu, float *sc, size_t ldsc, const float *q, int nr,
                      const float *k, int nk, int hd, float scale) {
    if (cpu->attn_dots) {
        cpu->attn_dots(sc, ldsc, q, nr, k, nk, hd, scale);
        return;
    }
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nk; j++)
            sc[r * ldsc + j] = cpu->dot(q + (size_t)r * hd, k + (size_t)j * hd, hd) * scale;
}

static void attn_axpys(const hr_cpu_kernels *cpu, float *o, const float *p, size_t ldp, int nr,
                       const float *v, int nv, int hd) {
    if (cpu->attn_axpys) {
        cpu->attn_axpys(o, p, ldp, nr, v, nv, hd);
        return;
    }
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nv; j++)
            cpu->axpy(o + (size_t)r * hd, p[r * ldp + j], v + (size_t)j * hd, hd);
}

/* The first n records of KV head kvh in block blk, into L2 (as attn_heads'
 * pf: the next block of the same head is a block stride away, where the
 * hardware prefetcher starts over): requested one block run ahead of the
 * records read in place, so that a decode step over a long context does
 * not wait for each block's records (1 KB of TurboQuant 3.5 at head_dim
 * 64) as it reaches them. */
static void prefetch_block(const kv_side *sd, int32_t blk, int kvh, int bs, int n) {
    const char *r = (const char *)sd->base + (size_t)blk * sd->stride +
                    (size_t)kvh * bs * sd->rb;
    for (size_t o = 0; o < (size_t)n * sd->rb; o += 64)
        __builtin_prefetch(r + o, 0, 2);
}

/* Bias sums a task of quantized rows holds (kvq_axpys) */
#define BIAS_BUF 4096

/* One task without the ISA's attn_heads kernel: the nq tokens of a tile
 * (start[i], n[i]: token i's positions) and the G query heads of KV head
 * kvh. Each key and value row is read once for the task's nq * G query
 * rows, a block run at a time. Quantized rows are read in place (the ISA's
 * kvq_dots and kvq_axpys: kvquant_attn.c; Q8_0 / Q4_0: kvg_dots and
 * kvg_axpys, kvggml.c), K's and V's each in their own format (llama.cpp's
 * --cache-type-k / -v may differ; TurboQuant: turbo_dots and turbo_axpys,
 * turbo_attn.c, in the rotated basis: the task's query rows rotated once
 * into qbuf, its outputs rotated back once at the end); the other pools'
 * rows (f16 and bf16 widened once) go through attn_dots and attn_axpys: each score
 * dot(q, k) * scale, each output the axpy of the values in position order,
 * the operations of attention per head, so its bits on the same ISA. The
 * softmax is hr_softmax. sc: nq * G rows of max_ctx floats.
 *
 * The kernels take the rows of consecutive tokens that see the same keys
 * of a run (every token of a prefill tile but at the run holding their own
 * positions) in one call, so that a record's codes are widened once for all
 * of them and a call has rows to pair: their query rows (and output rows) are then
 * consecutive, hd apart, in qrows (orows), copied there (or rotated there)
 * at the start and back at the end. A row's bits do not depend on the rows
 * called with it (cpu.h), so this is the per-token call's result. */
static void attn_group(const hr_attn_args *a, int t0, int nq, int kvh, const int *start,
                       const int *n, float *sc) {
    const hr_cpu_kernels *cpu = hr_cpu();
    int hd = a->head_dim, G = a->n_heads / a->n_kv_heads, bs = a->block_size;
    int lo = start[0], hi = start[0] + n[0];
    for (int i = 1; i < nq; i++) {
        lo = start[i] < lo ? start[i] : lo;
        hi = start[i] + n[i] > hi ? start[i] + n[i] : hi;
    }
    HR_ASSERT(hd <= ROWS_BUF);
    kv_side sides[2] = {side_of(a, false), side_of(a, true)};
    /* records read in place (affine: while a task's rows' group bias sums
     * fit bias[], else the rows are loaded) */
    bool direct[2];
    for (int w = 0; w < 2; w++) {
        hr_dtype t = sides[w].t;
        direct[w] = t == HR_DTYPE_Q8_0 || t == HR_DTYPE_Q4_0 || t == HR_DTYPE_TURBO ||
                    (t == HR_DTYPE_AFFINE && nq * G * (hd / a->kv_group) <= BIAS_BUF);
    }
    /* V's affine group bias sums */
    int ng = sides[1].t == HR_DTYPE_AFFINE ? hd / a->kv_group : 0;
    bool vbias = ng > 0 && direct[1];
    /* qbuf: the tile's query rows (copied, rotated or prepared), rbuf: a
     * run of K or V rows as f32 (pools not read in place), obuf: the tile's
     * output rows */
    float qbuf[ROWS_BUF], rbuf[ROWS_BUF], bias[BIAS_BUF], obuf[ROWS_BUF];
    /* token i's G query rows at qrows + i * ldr, its output rows at orows +
     * i * ldo (hd apart within a token) */
    size_t first = ((size_t)t0 * a->n_heads + (size_t)kvh * G) * hd, tok = (size_t)G * hd;
    size_t ldr = (size_t)a->n_heads * hd, ldo = ldr;
    const float *qrows = a->q + first;
    float *orows = a->out + first;
    bool packed = (size_t)nq * tok <= ROWS_BUF; /* the tile's rows fit qbuf and obuf */
    /* TurboQuant (K and V alike): the rows' layouts, and the query rows
     * rotated into qbuf (attention_worker caps nq * G * hd at ROWS_BUF) */
    hr_turbo_kv TL[2];
    float tsigns[HR_TURBO_KV_SIGNS];
    for (int w = 0; w < 2; w++)
        if (sides[w].t == HR_DTYPE_TURBO)
            hr_turbo_kv_layout(&TL[w], hd, sides[w].bits);
    if (sides[0].t == HR_DTYPE_TURBO) {
        HR_ASSERT(packed);
        hr_turbo_kv_signs(tsigns, &TL[0], a->layer, kvh, false);
        for (int i = 0; i < nq; i++)
            for (int g = 0; g < G; g++)
                hr_turbo_kv_rotate(qbuf + i * tok + (size_t)g * hd,
                                   qrows + i * ldr + (size_t)g * hd, &TL[0], tsigns);
        qrows = qbuf;
        ldr = tok;
    } else if (sides[0].t == HR_DTYPE_AFFINE && direct[0]) {
        /* affine: the query rows in layout order and their group sums, once
         * (hr_kvq_prep); the sums in bias[], which V's pass zeroes after */
        HR_ASSERT(packed);
        for (int i = 0; i < nq; i++)
            hr_kvq_prep(qbuf + i * tok, bias + (size_t)i * G * (hd / a->kv_group),
                        qrows + i * ldr, G, hd, a->kv_bits, a->kv_group);
        qrows = qbuf;
        ldr = tok;
    } else if (packed && ldr != tok) {
        for (int i = 0; i < nq; i++)
            memcpy(qbuf + i * tok, qrows + i * ldr, tok * sizeof *qbuf);
        qrows = qbuf;
        ldr = tok;
    }
    if (packed) {
        orows = obuf;
        ldo = tok;
    }
    for (int w = 0; w < 2; w++) { /* 0: the scores, 1: the outputs */
        const kv_side *sd = &sides[w];
        bool ggml = sd->t == HR_DTYPE_Q8_0 || sd->t == HR_DTYPE_Q4_0;
        bool turbo = sd->t == HR_DTYPE_TURBO;
        int run = direct[w] ? bs : ROWS_BUF / hd;
        /* rows whose tokens may share one call: hd apart across tokens */
        bool join = (w == 0 ? ldr : ldo) == tok;
        if (w == 1)
            for (int i = 0; i < nq; i++)
                for (int g = 0; g < G; g++) {
                    int h = kvh * G + g;
                    float *s = sc + (size_t)(i * G + g) * a->max_ctx;
                    if (a->softcap > 0)
                        hr_softcap(s, n[i], a->softcap);
                    if (a->sinks) { /* the sink takes its share of the softmax, then is dropped */
                        float next = s[n[i]]; /* the next row's first score, or unused */
                        s[n[i]] = a->sinks[h];
                        hr_softmax(s, n[i] + 1);
                        s[n[i]] = next;
                    } else {
                        hr_softmax(s, n[i]);
                    }
                    memset(orows + i * ldo + (size_t)g * hd, 0, (size_t)hd * sizeof(float));
                    if (vbias)
                        memset(bias + (size_t)(i * G + g) * ng, 0, (size_t)ng * sizeof(float));
                }
        for (int p = lo; p < hi;) {
            int s = p % bs, cnt = bs - s < hi - p ? bs - s : hi - p;
            cnt = cnt < run ? cnt : run;
            int32_t blk = a->blocks[t0][p / bs];
            const char *rec = (const char *)sd->base + (size_t)blk * sd->stride +
                              ((size_t)kvh * bs + (size_t)s) * sd->rb;
            if (direct[w] && p + cnt < hi && (p + cnt) % bs == 0)
                prefetch_block(sd, a->blocks[t0][(p + cnt) / bs], kvh, bs,
                               hi - (p + cnt) < bs ? hi - (p + cnt) : bs);
            const float *rows = direct[w] ? NULL : kv_rows(a, sd, blk, kvh, s, cnt, rbuf);
            for (int i = 0, m; i < nq; i += m) { /* tokens i .. i + m - 1: keys [p + j0, p + j1) */
                int j0 = start[i] > p ? start[i] - p : 0;
                int j1 = start[i] + n[i] < p + cnt ? start[i] + n[i] - p : cnt;
                for (m = 1; join && i + m < nq && start[i + m] == start[i]; m++) {
                    int e = start[i + m] + n[i + m] < p + cnt ? start[i + m] + n[i + m] - p : cnt;
                    if (e != j1)
                        break;
                }
                if (j0 >= j1)
                    continue;
                int nr = m * G;
                const float *qr = qrows + i * ldr;
                float *orow = orows + i * ldo;
                float *sp = sc + (size_t)i * G * a->max_ctx + (p + j0 - start[i]);
                const char *r0 = rec + (size_t)j0 * sd->rb;
                if (turbo && w == 0)
                    cpu->turbo_dots(sp, a->max_ctx, qr, nr, r0, sd->rb, j1 - j0, &TL[0],
                                    a->scale);
                else if (turbo)
                    cpu->turbo_axpys(orow, sp, a->max_ctx, nr, r0, sd->rb, j1 - j0, &TL[1]);
                else if (ggml && w == 0)
                    cpu->kvg_dots(sp, a->max_ctx, qr, nr, r0, sd->rb, j1 - j0, hd, sd->t,
                                  a->scale);
                else if (ggml)
                    cpu->kvg_axpys(orow, sp, a->max_ctx, nr, r0, sd->rb, j1 - j0, hd, sd->t);
                else if (direct[w] && w == 0)
                    cpu->kvq_dots(sp, a->max_ctx, qr, bias + (size_t)i * G * (hd / a->kv_group),
                                  nr, r0, sd->rb, j1 - j0, hd, a->kv_bits, a->kv_group,
                                  a->scale);
                else if (direct[w])
                    cpu->kvq_axpys(orow, bias + (size_t)i * G * ng, sp, a->max_ctx, nr, r0,
                                   sd->rb, j1 - j0, hd, a->kv_bits, a->kv_group);
                else if (w == 0)
                    attn_dots(cpu, sp, a->max_ctx, qr, nr, rows + (size_t)j0 * hd, j1 - j0, hd,
                              a->scale);
                else
                    attn_axpys(cpu, orow, sp, a->max_ctx, nr, rows + (size_t)j0 * hd, j1 - j0,
                               hd);
            }
            p += cnt;
        }
    }
    /* the output rows back in place: rotated back (TurboQuant), their
     * group biases added (affine) */
    for (int i = 0; i < nq; i++)
        for (int g = 0; g < G; g++) {
            float *o = a->out + first + (size_t)i * a->n_heads * hd + (size_t)g * hd;
            const float *from = orows + i * ldo + (size_t)g * hd;
            if (sides[1].t == HR_DTYPE_TURBO) {
                if (i == 0 && g == 0)
                    hr_turbo_kv_signs(tsigns, &TL[1], a->layer, kvh, true);
                float row[256];
                hr_turbo_kv_unrotate(row, from, &TL[1], tsigns);
                memcpy(o, row, (size_t)hd * sizeof *o);
            } else if (from != o) {
                memcpy(o, from, (size_t)hd * sizeof *o);
            }
            if (vbias)
                hr_kvq_finish(o, bias + (size_t)(i * G + g) * ng, hd, a->kv_bits, a->kv_group);
        }
}

/* An attention job: its arguments and the first unclaimed task */
typedef struct attn_job {
    const hr_attn_args *a;
    _Atomic long next;
} attn_job;

/* The tokens of the tile at t0 (up to tile consecutive positions of one
 * sequence's block table) */
static int tile_len(const hr_attn_args *a, int t0, int tile) {
    int nq = 1;
    while (t0 + nq < a->n_tok && nq < tile && a->blocks[t0 + nq] == a->blocks[t0] &&
           a->pos[t0 + nq] == a->pos[t0] + nq)
        nq++;
    return nq;
}

/* A task: up to HR_ATTN_TILE consecutive tokens of one sequence (they
 * share every K/V load) and one KV head. Threads claim them in order as
 * they go (on shared cores a thread that loses its core for a while would
 * otherwise hold up the layer), each its next one ahead, whose first keys
 * the task before prefetches (the ISA's attn_heads; the other pools and
 * ISAs go through attn_group) - but where there are fewer than two tasks a
 * thread (a decode step: a sequence's KV heads), one at a time, so that
 * every thread gets one (claiming two at once, the first thread to come
 * took both KV heads of a one-sequence step and the other waited). */
static void attention_worker(void *p, int ith, int nth) {
    attn_job *job = p;
    const hr_attn_args *a = job->a;
    const hr_cpu_kernels *cpu = hr_cpu();
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    float *sc = a->scratch + (size_t)ith * a->max_ctx * group * HR_ATTN_TILE;
    bool tiled = cpu->attn_heads && hd % 16 == 0 && !hr_kv_is_rec(a->kv_dtype) &&
                 !a->v_block_stride && !a->sinks && !a->end; /* encoders (end): attn_group */
    int start[HR_ATTN_TILE], n[HR_ATTN_TILE];
    /* with sinks a row's softmax borrows the float after its n scores (the
     * next row's first, put back after): the last row of the thread's
     * scratch stays unused, so that float is never another thread's */
    int tile = tiled ? HR_ATTN_TILE_HEADS : a->sinks ? HR_ATTN_TILE - 1 : HR_ATTN_TILE;
    if ((a->kv_dtype == HR_DTYPE_TURBO || a->kv_dtype == HR_DTYPE_AFFINE) &&
        tile > ROWS_BUF / (group * hd)) /* rotated or prepared queries (attn_group's qbuf) */
        tile = ROWS_BUF / (group * hd);
    hr_attn_tile T = {.ldq = a->n_heads * hd, .G = group, .hd = hd, .k = a->k, .v = a->v,
                      .kv_dtype = a->kv_dtype, .stride = a->block_stride,
                      .bs = a->block_size, .start = start, .n = n, .scale = a->scale,
                      .softcap = a->softcap, .sc = sc};
    long ntask = 0;
    for (int t0 = 0; t0 < a->n_tok && ntask < 2L * nth; t0 += tile_len(a, t0, tile))
        ntask += a->n_kv_heads;
    bool ahead = ntask >= 2L * nth;
    long task = 0, mine = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed),
         after = ahead ? atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed) : -1;
    for (int t0 = 0; t0 < a->n_tok; t0 += T.nq) {
        T.nq = tile_len(a, t0, tile);
        for (int kvh = 0; kvh < a->n_kv_heads; kvh++, task++) {
            if (task != mine)
                continue;
            for (int i = 0; i < T.nq; i++) {
                int pos = a->pos[t0 + i];
                start[i] = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
                n[i] = (a->end ? a->end[t0 + i] : pos + 1) - start[i];
            }
            if (tiled) {
                size_t at = ((size_t)t0 * a->n_heads + (size_t)kvh * group) * hd;
                T.q = a->q + at;
                T.out = a->out + at;
                T.kvh = kvh;
                long next_kvh = after - (task - kvh); /* in this tile when < n_kv_heads */
                T.next_kvh = after >= 0 && next_kvh < a->n_kv_heads ? (int)next_kvh : -1;
                T.bt = a->blocks[t0];
                cpu->attn_heads(&T);
            } else {
                attn_group(a, t0, T.nq, kvh, start, n, sc);
            }
            if (ahead) {
                mine = after;
                after = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
            } else {
                mine = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
            }
        }
    }
}

void hr_attention(hr_pool *pool, const hr_attn_args *a) {
    attn_job job = {.a = a};
    atomic_init(&job.next, 0);
    hr_pool_run(pool, attention_worker, &job);
}

void hr_store_row(void *dst, const float *x, int n, hr_dtype t) {
    if (t == HR_DTYPE_F32)
        memcpy(dst, x, (size_t)n * sizeof *x);
    else
        hr_cpu()->to_half(dst, x, n, t);
}
