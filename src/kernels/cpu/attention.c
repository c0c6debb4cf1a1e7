/* Attention over the paged KV pool (ops.h hr_attention): tasks of up to
 * HR_ATTN_TILE tokens of a sequence and one KV head, claimed by the pool's
 * threads; each runs the ISA's fused attn_heads kernel (AVX-512) or
 * attn_group below, which reads quantized records in place and widens
 * half-precision rows once a run. */
#include "kernels/cpu/ops.h"
#include "core/error.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"

#include <stdatomic.h>
#include <string.h>

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

/* The first n records of KV head kvh in block blk, into L1 (the next
 * block of the same head is a block stride away, where the hardware
 * prefetcher starts over): requested PF_AHEAD blocks ahead of the records
 * read in place, so that a decode step over a long context does not wait
 * for each block's records (1 KB of TurboQuant 3.5 at head_dim 64) as it
 * reaches them. One block ahead was too close: a block's pass (32 keys,
 * 0.1 us at TurboQuant 3.5) is shorter than a DRAM miss here (bench_kernels
 * attn 16384 2 6 2 64 t3.5: 172 us a layer, 157 with 2-6 blocks ahead, 175
 * with 8). Into L2 (T1) as attn_heads' pf, a real decode step's
 * turbo_axpys waited on its first loads of each 16 records (half its
 * samples) where the attention op alone did not; into L1 the 16k-token
 * decode ran 12-22% faster at TurboQuant 3.5 and 11% at q8_0
 * (docs/kv-quant.md). */
#define PF_AHEAD 4

static void prefetch_block(const kv_side *sd, int32_t blk, int kvh, int bs, int n) {
    const char *r = (const char *)sd->base + (size_t)blk * sd->stride +
                    (size_t)kvh * bs * sd->rb;
    for (size_t o = 0; o < (size_t)n * sd->rb; o += 64)
        __builtin_prefetch(r + o, 0, 3);
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
 * called with it (cpu.h), so this is the per-token call's result.
 *
 * With a residual window (a->resid) the keys of the tile's window (its
 * tokens share one: attention_worker) are the full-precision pool's rows,
 * through attn_dots / attn_axpys with the query rows as they came (not
 * rotated or prepared) into outputs of their own, added once at the end
 * to the quantized keys' outputs (rotated back, biases added): out = the
 * quantized part + the window's part. The softmax is over both. */
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
    /* the residual window: positions [w0, w1) from the full-precision rows */
    int w0 = a->resid ? a->pos[t0] / a->resid * a->resid : 0, w1 = a->resid ? w0 + a->resid : 0;
    size_t rsz = hr_dtype_size(a->r_dtype);
    kv_side rsides[2] = {{a->r_k, a->r_dtype, (size_t)hd * rsz, a->r_stride * rsz, 0},
                         {a->r_v, a->r_dtype, (size_t)hd * rsz, a->r_stride * rsz, 0}};
    /* records read in place (affine: while a task's rows' group bias sums
     * fit bias[] and its prepared query rows qbuf, else the rows are loaded) */
    bool direct[2];
    for (int w = 0; w < 2; w++) {
        hr_dtype t = sides[w].t;
        direct[w] = t == HR_DTYPE_Q8_0 || t == HR_DTYPE_Q4_0 || t == HR_DTYPE_TURBO ||
                    (t == HR_DTYPE_AFFINE && nq * G * (hd / a->kv_group) <= BIAS_BUF &&
                     (size_t)nq * G * hd <= ROWS_BUF);
    }
    /* V's affine group bias sums */
    int ng = sides[1].t == HR_DTYPE_AFFINE ? hd / a->kv_group : 0;
    bool vbias = ng > 0 && direct[1];
    /* qbuf: the tile's query rows (copied, rotated or prepared), rbuf: a
     * run of K or V rows as f32 (pools not read in place), obuf: the tile's
     * output rows; aligned, so that no row's vector load splits a cache
     * line (unaligned, the AVX2 kernels' 32-byte loads split every other
     * one: docs/kv-quant.md, the thirty-third session) */
    _Alignas(64) float qbuf[ROWS_BUF], rbuf[ROWS_BUF], bias[BIAS_BUF], obuf[ROWS_BUF];
    /* the residual window's query rows as they came and its output rows */
    _Alignas(64) float q0buf[ROWS_BUF], o2buf[ROWS_BUF];
    /* token i's G query rows at qrows + i * ldr, its output rows at orows +
     * i * ldo (hd apart within a token) */
    size_t first = ((size_t)t0 * a->n_heads + (size_t)kvh * G) * hd, tok = (size_t)G * hd;
    size_t ldr = (size_t)a->n_heads * hd, ldo = ldr;
    const float *qrows = a->q + first;
    float *orows = a->out + first;
    bool packed = (size_t)nq * tok <= ROWS_BUF; /* the tile's rows fit qbuf and obuf */
    HR_ASSERT(packed || !a->resid); /* attention_worker caps such tiles */
    if (a->resid)
        for (int i = 0; i < nq; i++)
            memcpy(q0buf + i * tok, qrows + i * ldr, tok * sizeof *qbuf);
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
                    if (a->resid)
                        memset(o2buf + i * tok + (size_t)g * hd, 0, (size_t)hd * sizeof(float));
                    if (vbias)
                        memset(bias + (size_t)(i * G + g) * ng, 0, (size_t)ng * sizeof(float));
                }
        for (int p = lo; p < hi;) {
            bool res = p >= w0 && p < w1; /* a run of the residual window's rows */
            const kv_side *sd = res ? &rsides[w] : &sides[w];
            bool dir = direct[w] && !res;
            bool ggml = !res && (sd->t == HR_DTYPE_Q8_0 || sd->t == HR_DTYPE_Q4_0);
            bool turbo = !res && sd->t == HR_DTYPE_TURBO;
            int run = dir ? bs : ROWS_BUF / hd;
            /* where the run's query (output) rows are, and whether the rows
             * of several tokens may share one call (hd apart across tokens) */
            const float *qbase = res ? q0buf : qrows;
            float *obase = res ? o2buf : orows;
            size_t lq = res ? tok : ldr, lo_ = res ? tok : ldo;
            bool join = (w == 0 ? lq : lo_) == tok;
            int s = p % bs, cnt = bs - s < hi - p ? bs - s : hi - p;
            cnt = cnt < run ? cnt : run;
            int32_t blk = (res ? a->rblocks : a->blocks)[t0][p / bs];
            const char *rec = (const char *)sd->base + (size_t)blk * sd->stride +
                              ((size_t)kvh * bs + (size_t)s) * sd->rb;
            /* a run of records read in place is one block (or the pass's
             * first and last keys): the blocks PF_AHEAD ahead of it, all of
             * them at the pass's first run, then the one that comes in */
            for (int d = p == lo ? 1 : PF_AHEAD; dir && d <= PF_AHEAD; d++) {
                int b = (p / bs + d) * bs; /* that block's first key */
                if (b < hi && !(b >= w0 && b < w1))
                    prefetch_block(sd, a->blocks[t0][b / bs], kvh, bs, hi - b < bs ? hi - b : bs);
            }
            const float *rows = dir ? NULL : kv_rows(a, sd, blk, kvh, s, cnt, rbuf);
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
                const float *qr = qbase + i * lq;
                float *orow = obase + i * lo_;
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
                else if (dir && w == 0)
                    cpu->kvq_dots(sp, a->max_ctx, qr, bias + (size_t)i * G * (hd / a->kv_group),
                                  nr, r0, sd->rb, j1 - j0, hd, a->kv_bits, a->kv_group,
                                  a->scale);
                else if (dir)
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
            if (a->resid) /* + the residual window's part */
                for (int e = 0; e < hd; e++)
                    o[e] += o2buf[i * tok + (size_t)g * hd + e];
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
           a->pos[t0 + nq] == a->pos[t0] + nq &&
           !(a->resid && a->pos[t0 + nq] % a->resid == 0)) /* one residual window a tile */
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
                 !a->v_block_stride && !a->sinks && !a->end && /* encoders (end): attn_group */
                 !a->resid;
    int start[HR_ATTN_TILE], n[HR_ATTN_TILE];
    /* with sinks a row's softmax borrows the float after its n scores (the
     * next row's first, put back after): the last row of the thread's
     * scratch stays unused, so that float is never another thread's */
    int tile = tiled ? HR_ATTN_TILE_HEADS : a->sinks ? HR_ATTN_TILE - 1 : HR_ATTN_TILE;
    if ((a->kv_dtype == HR_DTYPE_TURBO || a->kv_dtype == HR_DTYPE_AFFINE || a->resid) &&
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
