/* A llama-bench stand-in over llama.cpp's C API, for when building
 * llama-bench from source is out of reach (it compiles every model of
 * libllama: hours on a loaded 2-core machine) but node-llama-cpp's prebuilt
 * libllama / libggml of the same release (v0.4.0, the git bundle
 * llamacpp-build.sh builds from) are there. It measures what llama-bench's
 * pp and tg tests measure: pp = one llama_decode of P tokens from an empty
 * cache (n_batch 2048, n_ubatch 512, as llama-bench's defaults), tg = G
 * single-token decodes from an empty cache; a warm-up run of each first,
 * then R runs; prints one JSON line per test with every run's tokens/s
 * (median of them: the figure), as llama-bench -o jsonl's samples_ts.
 * Built and run by bench/peers/llamacpp-prebuilt.sh.
 *   llamacpp_pp_tg [-d D] [-dg D] [-ctk T] [-ctv T] MODEL.gguf THREADS P G R [BACKEND_DIR]
 * -d D: llama-bench's -d (--n-depth): each run of either test starts from a
 * cache holding D random tokens (untimed; filled once and cut back to D
 * before each run, as llama-bench restores its saved state of that depth);
 * -dg D: the tg test's depth alone (the pp test's stays -d's): after a pp
 * run of P tokens at depth 0 the cache already holds tg's P-token context,
 * so `-dg P` times the decode after the prompt without a second prefill.
 * -ctk / -ctv T (f16 (default), bf16, f32, q8_0, q4_0): llama-bench's cache
 * types; flash attention is llama-bench's default (auto: on for the CPU).
 * The prompt goes in batches of n_batch tokens, as llama-bench's; the pp
 * warm-up is one batch of min(P, n_ubatch) tokens (llama-bench's warms up
 * with a whole pp run: at P = 16384 on 2 cores, minutes).
 * And, to check a GGUF hearth wrote against llama.cpp's reading of it:
 *   llamacpp_pp_tg --greedy MODEL.gguf N BACKEND_DIR 1,2,3
 * prints {"tokens": [N greedy tokens after the prompt 1,2,3], "top": [the
 * first step's 5 best as [id, logprob]]}. */
#define _POSIX_C_SOURCE 200809L
#include "ggml-backend.h"
#include "llama.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level >= GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

/* n tokens in batches of at most nb (nb 1: one at a time) */
static void feed(struct llama_context *ctx, const llama_token *tok, int n, int nb) {
    for (int i = 0; i < n; i += nb)
        if (llama_decode(ctx, llama_batch_get_one((llama_token *)&tok[i], n - i < nb ? n - i : nb))) {
            fprintf(stderr, "llama_decode failed\n");
            exit(1);
        }
}

/* Tokens of sequence 0 in the cache, a prefix of tok (-1: unknown) */
static int cached;

/* One run: n tokens in batches of nb (pp) or one at a time (tg, nb 1)
 * after a cache of depth tokens (untimed); tokens/s. */
static double run(struct llama_context *ctx, const llama_token *tok, int n, int nb, int depth) {
    llama_memory_t mem = llama_get_memory(ctx);
    if (depth > 0 && cached >= depth && llama_memory_seq_rm(mem, 0, depth, -1)) {
        cached = depth;
    } else {
        llama_memory_clear(mem, true);
        cached = 0;
        feed(ctx, tok, depth, 2048);
        cached = depth;
    }
    llama_synchronize(ctx);
    double t0 = now();
    feed(ctx, tok + depth, n, nb);
    llama_synchronize(ctx);
    double dt = now() - t0;
    cached = depth + n;
    return n / dt;
}

static enum ggml_type cache_type(const char *s) {
    static const struct { const char *name; enum ggml_type t; } types[] = {
        {"f16", GGML_TYPE_F16}, {"bf16", GGML_TYPE_BF16}, {"f32", GGML_TYPE_F32},
        {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(s, types[i].name))
            return types[i].t;
    fprintf(stderr, "unknown cache type '%s' (f16, bf16, f32, q8_0, q4_0)\n", s);
    exit(2);
}

/* --greedy: N greedy tokens after the prompt, the first step's top 5 */
static int greedy(int argc, char **argv) {
    if (argc < 6)
        return 2;
    int N = atoi(argv[3]);
    llama_log_set(quiet, NULL);
    ggml_backend_load_all_from_path(argv[4]);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[2], mp);
    if (!model)
        return 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_threads = cp.n_threads_batch = 2;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    int V = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_token p[256];
    int np = 0;
    for (char *s = argv[5]; *s && np < 256;) {
        p[np++] = (llama_token)strtol(s, &s, 10);
        if (*s == ',')
            s++;
    }
    if (!ctx || llama_decode(ctx, llama_batch_get_one(p, np)))
        return 1;
    printf("{\"tokens\": [");
    for (int i = 0; i < N; i++) {
        const float *l = llama_get_logits_ith(ctx, -1);
        llama_token best = 0;
        for (int v = 1; v < V; v++)
            if (l[v] > l[best])
                best = v;
        if (i == 0) { /* logprobs of the top 5, printed after the tokens */
            double mx = l[best], z = 0;
            for (int v = 0; v < V; v++)
                z += exp((double)l[v] - mx);
            static char top[512];
            int used[5], at = 0;
            for (int k = 0; k < 5 && k < V; k++) {
                int b = -1;
                for (int v = 0; v < V; v++) {
                    int taken = 0;
                    for (int j = 0; j < k; j++)
                        taken |= used[j] == v;
                    if (!taken && (b < 0 || l[v] > l[b]))
                        b = v;
                }
                used[k] = b;
                at += snprintf(top + at, sizeof top - (size_t)at, "%s[%d, %.6f]", k ? ", " : "", b,
                               (double)l[b] - mx - log(z));
            }
            fprintf(stderr, "%s\n", top);
        }
        printf("%s%d", i ? ", " : "", best);
        if (llama_decode(ctx, llama_batch_get_one(&best, 1)))
            return 1;
    }
    printf("]}\n");
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--greedy"))
        return greedy(argc, argv);
    int depth = 0, tg_depth = -1;
    enum ggml_type tk = GGML_TYPE_F16, tv = GGML_TYPE_F16;
    const char *prog = argv[0];
    while (argc > 2 && argv[1][0] == '-') {
        if (!strcmp(argv[1], "-d"))
            depth = atoi(argv[2]);
        else if (!strcmp(argv[1], "-dg"))
            tg_depth = atoi(argv[2]);
        else if (!strcmp(argv[1], "-ctk"))
            tk = cache_type(argv[2]);
        else if (!strcmp(argv[1], "-ctv"))
            tv = cache_type(argv[2]);
        else
            break;
        argc -= 2;
        argv += 2;
    }
    if (argc < 6 || depth < 0) {
        fprintf(stderr, "usage: %s [-d D] [-dg D] [-ctk T] [-ctv T] MODEL THREADS P G R [BACKEND_DIR]\n",
                prog);
        return 2;
    }
    if (tg_depth < 0)
        tg_depth = depth;
    const char *path = argv[1];
    int threads = atoi(argv[2]), P = atoi(argv[3]), G = atoi(argv[4]), R = atoi(argv[5]);
    llama_log_set(quiet, NULL);
    if (argc > 6)
        ggml_backend_load_all_from_path(argv[6]);
    else
        ggml_backend_load_all();
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) {
        fprintf(stderr, "%s: cannot load\n", path);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    int dmax = depth > tg_depth ? depth : tg_depth;
    int n = dmax + (P > G ? P : G);
    cp.n_ctx = (uint32_t)n + 16;
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.type_k = tk;
    cp.type_v = tv;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "%s: cannot make a context\n", path);
        return 1;
    }
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    llama_token *tok = malloc((size_t)n * sizeof *tok);
    unsigned s = 1;
    for (int i = 0; i < n; i++) { /* random tokens, as llama-bench */
        s = s * 1103515245u + 12345u;
        tok[i] = (llama_token)((s >> 8) % (unsigned)n_vocab);
    }
    /* warm-ups (llama-bench's), first, from an empty cache: one ubatch of
     * the prompt, one token */
    if (P > 0)
        run(ctx, tok, P < 512 ? P : 512, 2048, 0);
    if (G > 0)
        run(ctx, tok, 1, 1, 0);
    for (int test = 0; test < 2; test++) {
        int len = test ? G : P, d = test ? tg_depth : depth, nb = test ? 1 : 2048;
        if (len <= 0)
            continue;
        printf("{\"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"n_threads\": %d, "
               "\"samples_ts\": [",
               test ? 0 : P, test ? G : 0, d, threads);
        for (int r = 0; r < R; r++)
            printf("%s%.3f", r ? ", " : "", run(ctx, tok, len, nb, d));
        printf("]}\n");
        fflush(stdout);
    }
    free(tok);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
