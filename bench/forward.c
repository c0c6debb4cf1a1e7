/* bench_forward: where a forward step's time goes, by batch shape (the
 * verify rows of speculative decoding, docs/speculative.md):
 *   bench_forward MODEL [THREADS] [CTX] [REPS] [SHAPES] [--profile]
 * SHAPES (default 1,2,3,4,5,8,9,4x1,4x2,4x4) is a comma list of T (one
 * sequence, T tokens at positions CTX .. CTX + T - 1, every row with
 * logits: a decode step with T - 1 drafts) or SxT (S sequences of T such
 * tokens: concurrent clients). Each sequence has CTX tokens of KV
 * (prefilled once). The shapes run round-robin, REPS rounds (default 200),
 * so that a change of the machine's load touches them all alike; printed:
 * the median and the best of each, and the ratio of the medians to T = 1;
 * then the median CPU time of the calling thread (with 1 thread: the step's
 * time without the stalls of a loaded machine) and its ratio.
 * --profile wraps the backend's ops in a clock (two clock reads a call):
 * the medians per op kind for each shape, the products by weight (with 1
 * thread in CPU time). */
#include "core/error.h"
#include "core/timer.h"
#include "kernels/backend.h"
#include "model/batch.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the op clock (--profile) ----------------------------------------------- */

enum {
    P_BEGIN, P_EMBED, P_NORM, P_QKVW, P_OW, P_UPGATE, P_DOWN, P_HEAD, P_QKV, P_ATTN, P_ACT,
    P_ADD, P_GATHER, P_END, P_OTHER, P_N
};
static const char *const p_name[P_N] = {
    "begin", "embed", "norm", "mm q/k/v", "mm o", "mm up/gate", "mm down", "mm lm_head",
    "qk rope+kv", "attention", "act", "add", "gather", "end", "other"};
static double g_acc[P_N];
static const hr_backend_ops *g_ops; /* the real ones */
static const hr_model *g_m;

static int mm_kind(const hr_matmul_out *o) {
    if (o->w == g_m->lm_head)
        return P_HEAD;
    for (int il = 0; il < g_m->hp.n_layers; il++) {
        const hr_layer *L = &g_m->layers[il];
        if (o->w == &L->wq || o->w == &L->wk || o->w == &L->wv)
            return P_QKVW;
        if (o->w == &L->wo)
            return P_OW;
        if (o->w == &L->w_up || o->w == &L->w_gate)
            return P_UPGATE;
        if (o->w == &L->w_down)
            return P_DOWN;
    }
    return P_OTHER;
}

/* wall time, or with 1 thread the thread's CPU time (a system call) */
static bool g_cpu_clock;
static double op_clock(void) { return g_cpu_clock ? hr_thread_cpu() : hr_now(); }

#define CLOCKED(kind, call)                                                    \
    do {                                                                       \
        double t0_ = op_clock();                                               \
        call;                                                                  \
        g_acc[kind] += op_clock() - t0_;                                       \
    } while (0)

static int w_begin(hr_bctx *c, const hr_step_in *in, hr_error *err) {
    int rc;
    CLOCKED(P_BEGIN, rc = g_ops->begin(c, in, err));
    return rc;
}
static void w_embed(hr_bctx *c, float *x, const hr_tensor *e, int d, float s) {
    CLOCKED(P_EMBED, g_ops->embed(c, x, e, d, s));
}
static void w_norm(hr_bctx *c, float *y, const float *x, const float *w, const float *b,
                   int kind, float off, float eps, int T, int d) {
    CLOCKED(P_NORM, g_ops->norm(c, y, x, w, b, kind, off, eps, T, d));
}
static void w_matmul(hr_bctx *c, const float *x, int ldx, int T, int count,
                     const hr_matmul_out *out) {
    CLOCKED(mm_kind(out), g_ops->matmul(c, x, ldx, T, count, out));
}
static void w_qkv(hr_bctx *c, const hr_qkv_args *a) { CLOCKED(P_QKV, g_ops->qkv(c, a)); }
static void w_attention(hr_bctx *c, const hr_attn_in *a) {
    CLOCKED(P_ATTN, g_ops->attention(c, a));
}
static void w_act(hr_bctx *c, int act, float *g, const float *u, int T, int n) {
    CLOCKED(P_ACT, g_ops->act(c, act, g, u, T, n));
}
static void w_add(hr_bctx *c, float *x, const float *y, float mult, size_t n) {
    CLOCKED(P_ADD, g_ops->add(c, x, y, mult, n));
}
static int w_gather(hr_bctx *c, float *y, const float *x, int d) {
    int n;
    CLOCKED(P_GATHER, n = g_ops->gather(c, y, x, d));
    return n;
}
static int w_end(hr_bctx *c, hr_error *err) {
    int rc;
    CLOCKED(P_END, rc = g_ops->end(c, err));
    return rc;
}

static hr_backend_ops g_wrapped;
static hr_backend g_be;

static void wrap_backend(hr_model *m) {
    g_ops = m->be->ops;
    g_m = m;
    g_wrapped = *g_ops;
    g_wrapped.begin = w_begin;
    g_wrapped.embed = w_embed;
    g_wrapped.norm = w_norm;
    g_wrapped.matmul = w_matmul;
    g_wrapped.qkv = w_qkv;
    g_wrapped.attention = w_attention;
    g_wrapped.act = w_act;
    g_wrapped.add = w_add;
    g_wrapped.gather = w_gather;
    g_wrapped.end = w_end;
    g_be = *m->be;
    g_be.ops = &g_wrapped;
    m->be = &g_be;
}

/* ---- shapes ------------------------------------------------------------------- */

typedef struct shape {
    int S, T; /* sequences, tokens each */
    double *t, *op; /* [reps] seconds; [reps][P_N] */
    double *cpu;    /* [reps] the calling thread's CPU seconds */
} shape;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    bool profile = false;
    int na = 0;
    char *args[8] = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--profile"))
            profile = true;
        else if (na < 8)
            args[na++] = argv[i];
    }
    if (na < 1) {
        fprintf(stderr, "usage: bench_forward MODEL [THREADS] [CTX] [REPS] [SHAPES] "
                        "[--profile]\n");
        return 2;
    }
    int nth = na > 1 ? atoi(args[1]) : 2, ctx = na > 2 ? atoi(args[2]) : 200;
    int reps = na > 3 ? atoi(args[3]) : 200;
    const char *spec = na > 4 ? args[4] : "1,2,3,4,5,8,9,4x1,4x2,4x4";
    shape sh[32];
    int ns = 0, maxS = 1, maxT = 1;
    for (const char *p = spec; *p && ns < 32;) {
        int a = atoi(p), b = 0;
        while (*p >= '0' && *p <= '9')
            p++;
        if (*p == 'x') {
            b = atoi(++p);
            while (*p >= '0' && *p <= '9')
                p++;
        }
        sh[ns] = b ? (shape){.S = a, .T = b} : (shape){.S = 1, .T = a};
        if (sh[ns].S < 1 || sh[ns].T < 1 || reps < 1 || ctx < 1) {
            fprintf(stderr, "bench_forward: bad shape list '%s'\n", spec);
            return 2;
        }
        maxS = sh[ns].S > maxS ? sh[ns].S : maxS;
        maxT = sh[ns].S * sh[ns].T > maxT ? sh[ns].S * sh[ns].T : maxT;
        ns++;
        if (*p == ',')
            p++;
    }
    hr_error err = {0};
    hr_model *m = NULL;
    if (hr_model_open(&m, args[0], &err)) {
        fprintf(stderr, "bench_forward: %s\n", err.msg);
        return 1;
    }
    if (profile)
        wrap_backend(m);
    g_cpu_clock = nth == 1;
    int pmax = ctx + maxT + 1, nb = (pmax + HR_KV_BLOCK - 1) / HR_KV_BLOCK;
    hr_kv kv;
    hr_fwd *f = NULL;
    if (hr_kv_init(&kv, &m->hp, HR_DTYPE_F32, nb * maxS, &err) ||
        hr_fwd_new(&f, m, ctx > maxT ? ctx : maxT, maxS, pmax, nth, &err)) {
        fprintf(stderr, "bench_forward: %s\n", err.msg);
        return 1;
    }
    int V = m->hp.n_vocab, big = ctx > maxT ? ctx : maxT;
    int32_t *tables = malloc((size_t)maxS * nb * sizeof *tables);
    int32_t *tok = malloc((size_t)big * sizeof *tok), *pos = malloc((size_t)big * sizeof *pos);
    int32_t *seq = malloc((size_t)big * sizeof *seq);
    uint8_t *want = malloc((size_t)big);
    float *logits = malloc((size_t)big * V * sizeof *logits);
    hr_seq_blocks *sb = malloc((size_t)maxS * sizeof *sb);
    for (int s = 0; s < maxS; s++) {
        for (int i = 0; i < nb; i++)
            tables[s * nb + i] = hr_kv_alloc(&kv);
        sb[s] = (hr_seq_blocks){tables + s * nb, nb, 0, 0};
    }
    /* prefill each sequence's CTX tokens (one at a time: a batch of 1 seq) */
    for (int s = 0; s < maxS; s++) {
        for (int i = 0; i < ctx; i++) {
            tok[i] = (int32_t)((i * 7919 + s * 31) % (V - 8) + 8);
            pos[i] = i;
            seq[i] = 0;
            want[i] = i == ctx - 1;
        }
        hr_batch b = {.n_tokens = ctx, .token = tok, .pos = pos, .seq = seq, .logits = want,
                      .n_seqs = 1, .seqs = &sb[s]};
        if (hr_forward(f, &kv, &b, logits, &err)) {
            fprintf(stderr, "bench_forward: %s\n", err.msg);
            return 1;
        }
    }
    for (int i = 0; i < ns; i++) {
        sh[i].t = malloc((size_t)reps * sizeof(double));
        sh[i].cpu = malloc((size_t)reps * sizeof(double));
        sh[i].op = calloc((size_t)reps * P_N, sizeof(double));
    }
    for (int r = -3; r < reps; r++) /* 3 rounds of warm-up */
        for (int i = 0; i < ns; i++) {
            int T = 0;
            for (int s = 0; s < sh[i].S; s++)
                for (int j = 0; j < sh[i].T; j++) {
                    tok[T] = (int32_t)(((r + 3) * 13 + j * 101 + s) % (V - 8) + 8);
                    pos[T] = ctx + j;
                    seq[T] = s;
                    want[T] = 1;
                    T++;
                }
            hr_batch b = {.n_tokens = T, .token = tok, .pos = pos, .seq = seq, .logits = want,
                          .n_seqs = sh[i].S, .seqs = sb};
            memset(g_acc, 0, sizeof g_acc);
            double t0 = hr_now(), c0 = hr_thread_cpu();
            if (hr_forward(f, &kv, &b, logits, &err)) {
                fprintf(stderr, "bench_forward: %s\n", err.msg);
                return 1;
            }
            double dt = hr_now() - t0, dc = hr_thread_cpu() - c0;
            if (r < 0)
                continue;
            sh[i].t[r] = dt;
            sh[i].cpu[r] = dc;
            for (int k = 0; k < P_N; k++)
                sh[i].op[(size_t)k * reps + r] = g_acc[k];
        }
    double base = 0, cbase = 0;
    printf("%s, %d threads, context %d, %d rounds (ms: median, best; x: median / T=1's)\n",
           args[0], nth, ctx, reps);
    for (int i = 0; i < ns; i++) {
        double med = median(sh[i].t, reps), best = sh[i].t[0];
        double cmed = median(sh[i].cpu, reps);
        if (i == 0)
            base = med, cbase = cmed;
        char name[32];
        if (sh[i].S > 1)
            snprintf(name, sizeof name, "%dx%d", sh[i].S, sh[i].T);
        else
            snprintf(name, sizeof name, "%d", sh[i].T);
        printf("T=%-5s %7.3f %7.3f  %5.2fx   cpu %7.3f %5.2fx\n", name, med * 1e3, best * 1e3,
               med / base, cmed * 1e3, cmed / cbase);
        if (!profile)
            continue;
        double sum = 0;
        for (int k = 0; k < P_N; k++) {
            double v = median(sh[i].op + (size_t)k * reps, reps);
            sum += v;
            if (v > 0)
                printf("    %-12s %7.3f\n", p_name[k], v * 1e3);
        }
        printf("    %-12s %7.3f\n", "(untimed)", ((nth == 1 ? cmed : med) - sum) * 1e3);
    }
    for (int i = 0; i < ns; i++) {
        free(sh[i].t);
        free(sh[i].cpu);
        free(sh[i].op);
    }
    free(tables);
    free(tok);
    free(pos);
    free(seq);
    free(want);
    free(logits);
    free(sb);
    hr_fwd_free(f);
    hr_kv_deinit(&kv);
    hr_model_free(m);
    return 0;
}
