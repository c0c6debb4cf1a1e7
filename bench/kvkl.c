/* The KV cache formats' cost as KL per decode step (docs/kv-quant.md): the
 * same model and tokens through an f32 cache and through each format,
 * teacher-forced: PROMPT random tokens (a fixed seed) prefilled, then STEPS
 * decode steps, each step's whole next-token distribution compared with
 * the f32 cache's: KL(f32 || format) mean and max over the steps, the
 * logits' RMS difference over the f32 logits' standard deviation (what
 * still says something where the distributions are one-hot: hearth
 * synth's random weights give logits so far apart that every format's KL
 * is below 1e-170), how often the top token agrees, and the format's KV
 * bytes per token.
 *   bench_kvkl MODEL [PROMPT [STEPS [THREADS]]]   (default 1024 32 2)
 * bench/kvkl.sh runs it on the random Llama-3.2-1B shape (hearth synth). */
#include "core/error.h"
#include "sample/rng.h"
#include "model/kv.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "support/kl.h"
#include "support/runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct kv_case {
    const char *name;
    hr_kv_fmt f;
    int resid; /* --kv-residual */
} kv_case;

static const kv_case k_cases[] = {
    {"f16", {.dtype = HR_DTYPE_F16}, 0},
    {"bf16", {.dtype = HR_DTYPE_BF16}, 0},
    {"q8_0", {.dtype = HR_DTYPE_Q8_0}, 0},
    {"q4_0", {.dtype = HR_DTYPE_Q4_0}, 0},
    {"q8_0 K, f16 V", {.dtype = HR_DTYPE_Q8_0, .vown = true, .vdtype = HR_DTYPE_F16}, 0},
    {"affine 8-bit g64", {.dtype = HR_DTYPE_AFFINE, .bits = 8, .group = 64}, 0},
    {"affine 4-bit g64", {.dtype = HR_DTYPE_AFFINE, .bits = 4, .group = 64}, 0},
    {"affine 4-bit g32", {.dtype = HR_DTYPE_AFFINE, .bits = 4, .group = 32}, 0},
    {"affine 2-bit g64", {.dtype = HR_DTYPE_AFFINE, .bits = 2, .group = 64}, 0},
    {"turbo 4", {.dtype = HR_DTYPE_TURBO, .bits = 8, .vbits = 8}, 0},
    {"turbo 3.5", {.dtype = HR_DTYPE_TURBO, .bits = 7, .vbits = 7}, 0},
    {"turbo 3", {.dtype = HR_DTYPE_TURBO, .bits = 6, .vbits = 6}, 0},
    {"turbo 2.5", {.dtype = HR_DTYPE_TURBO, .bits = 5, .vbits = 5}, 0},
    {"turbo 3.5 +r128", {.dtype = HR_DTYPE_TURBO, .bits = 7, .vbits = 7}, 128},
    {"turbo 2.5 +r128", {.dtype = HR_DTYPE_TURBO, .bits = 5, .vbits = 5}, 128},
};
#define N_CASES (int)(sizeof k_cases / sizeof k_cases[0])

/* The logits of every step: PROMPT tokens, then one at a time. */
static int run(const hr_model *m, const hr_kv_fmt *f, int resid, const int32_t *tok,
               int prompt, int steps, int threads, float *logits, hr_error *err) {
    hr_runner *r = NULL;
    hr_runner_opts o = {.n_threads = threads, .n_ctx = prompt + steps, .kv_fmt = f,
                        .kv_residual = resid};
    int V = m->hp.n_vocab, rc = hr_runner_new(&r, m, &o, err);
    if (!rc)
        rc = hr_runner_eval(r, tok, prompt, logits, err);
    for (int s = 1; s < steps && !rc; s++)
        rc = hr_runner_eval(r, tok + prompt + s - 1, 1, logits + (size_t)s * V, err);
    hr_runner_free(r);
    return rc;
}

/* the format's KV bytes per token over all layers */
static double bytes_per_token(const hr_model *m, const hr_kv_fmt *f, hr_error *err) {
    hr_kv kv;
    if (hr_kv_init_fmt(&kv, m->be, &m->hp, f, 1, err))
        return -1;
    double b = (double)hr_kv_pool_block_bytes(&kv) / HR_KV_BLOCK;
    hr_kv_deinit(&kv);
    return b;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_kvkl MODEL [PROMPT [STEPS [THREADS]]]\n");
        return 2;
    }
    int prompt = argc > 2 ? atoi(argv[2]) : 1024, steps = argc > 3 ? atoi(argv[3]) : 32;
    int threads = argc > 4 ? atoi(argv[4]) : 2;
    if (prompt < 1 || steps < 1 || threads < 1) {
        fprintf(stderr, "bench_kvkl: PROMPT, STEPS and THREADS must be positive\n");
        return 2;
    }
    hr_error err = {0};
    hr_model *m = NULL;
    if (hr_model_open(&m, argv[1], &err)) {
        fprintf(stderr, "bench_kvkl: %s\n", err.msg);
        return 1;
    }
    int V = m->hp.n_vocab, n = prompt + steps;
    int32_t *tok = malloc(sizeof *tok * (size_t)n);
    float *ref = malloc(sizeof *ref * (size_t)steps * V), *got = malloc(sizeof *got * (size_t)steps * V);
    double *work = malloc(2 * sizeof *work * (size_t)V);
    if (!tok || !ref || !got || !work) {
        fprintf(stderr, "bench_kvkl: out of memory\n");
        return 1;
    }
    hr_rng rng;
    hr_rng_seed(&rng, 7);
    for (int i = 0; i < n; i++)
        tok[i] = (int32_t)(hr_rng_next(&rng) % (uint64_t)V);
    hr_kv_fmt f32 = {.dtype = HR_DTYPE_F32};
    if (run(m, &f32, 0, tok, prompt, steps, threads, ref, &err)) {
        fprintf(stderr, "bench_kvkl: %s\n", err.msg);
        return 1;
    }
    printf("KL(f32 KV || format) per decode step after %d tokens, %d steps (%s, %d layers, "
           "head_dim %d)\n", prompt, steps, argv[1], m->hp.n_layers, m->hp.head_dim);
    printf("%-18s %12s %10s %10s %10s %8s\n", "format", "bytes/token", "KL mean", "KL max",
           "logit err", "top-1");
    printf("%-18s %12.0f %10s %10s %10s %8s\n", "f32", bytes_per_token(m, &f32, &err), "-", "-",
           "-", "-");
    int status = 0;
    for (int c = 0; c < N_CASES; c++) {
        const kv_case *k = &k_cases[c];
        double bpt = bytes_per_token(m, &k->f, &err);
        if (bpt < 0 || run(m, &k->f, k->resid, tok, prompt, steps, threads, got, &err)) {
            printf("%-18s %s\n", k->name, err.msg); /* a format this model cannot take */
            continue;
        }
        double mean = 0, mx = 0, d2 = 0, v2 = 0;
        int agree = 0;
        for (int s = 0; s < steps; s++) {
            const float *a = ref + (size_t)s * V, *b = got + (size_t)s * V;
            double kl = hr_kl_logits(a, b, V, work), mu = 0;
            for (int i = 0; i < V; i++)
                mu += a[i] / V;
            for (int i = 0; i < V; i++) {
                d2 += ((double)b[i] - a[i]) * ((double)b[i] - a[i]);
                v2 += (a[i] - mu) * (a[i] - mu);
            }
            kl = kl > 0 ? kl : 0; /* rounding below an exact 0 */
            mean += kl / steps;
            mx = kl > mx ? kl : mx;
            agree += hr_argmax(a, V) == hr_argmax(b, V);
        }
        if (!(mean >= 0))
            status = 1; /* NaN: a broken format */
        printf("%-18s %12.0f %10.2e %10.2e %10.2e %5d/%-3d\n", k->name, bpt, mean, mx,
               sqrt(d2 / v2), agree, steps);
    }
    free(tok);
    free(ref);
    free(got);
    free(work);
    hr_model_free(m);
    return status;
}
