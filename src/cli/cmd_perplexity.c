/* hearth perplexity: mlx_lm.perplexity's method over a text file.
 *   The file is tokenized (the tokenizer's post-processor adds BOS as
 *   mlx-lm's dataset does) and cut into windows of --context tokens; each
 *   window is evaluated from an empty cache and every next-token prediction
 *   in it is scored: loss = -log softmax(logits)[next]. The remainder that
 *   does not fill a window is dropped (as mlx-lm does).
 *   --stride S < context: windows start every S tokens and, after the
 *   first, score only their last S predictions (the sliding-window variant
 *   of llama.cpp / transformers).
 *   perplexity = exp(mean loss); ± = perplexity * std(loss, ddof 1) / sqrt(n)
 *   (mlx-lm's delta-method standard error).
 *   Each window is one request of the engine (hr_gen with score_from and
 *   max_tokens 0, the prompt cache off), several in flight at once; the
 *   losses are summed in window order, so the figure does not depend on
 *   the batching (the forward pass is batch-invariant).
 *   --kv-bits B: a window's cache converts to B bits after the step that
 *   takes it to --quantized-kv-start tokens or more (0: quantized from the
 *   first token; docs/kv-quant.md). */
#include "api/api.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "core/timer.h"
#include "model/kv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IN_FLIGHT 4 /* windows submitted at once */

static const char usage[] =
    "usage: hearth perplexity --model PATH --file TEXT [--context N] [--stride N] "
    "[--threads T] [--max-windows N] [--kv-dtype D] [--cache-type-k T] [--cache-type-v T] "
    "[--kv-bits B] [--kv-group-size G] [--quantized-kv-start N] [--kv-quant turbo[:K,V]]";

typedef struct acc {
    double sum, sumsq;
    long n;
} acc;

/* Queue window w: tokens [start, start + ctx), scored from index first. */
static int submit(hr_gen **g, hr_session *s, const int32_t *tok, long ctx, int first,
                  hr_error *err) {
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_tokens = tok;
    p.n_prompt_tokens = (int)ctx;
    p.max_tokens = 0;
    p.temperature = 0;
    p.score_from = first;
    return hr_gen_submit(g, s, &p, err);
}

/* Wait for g to finish and add its scored tokens to a. */
static int collect(hr_gen *g, acc *a, hr_error *err) {
    hr_gen_event ev;
    int rc;
    while ((rc = hr_gen_next(g, &ev, err)) == 1 && ev.finish == HR_GEN_RUNNING)
        ;
    if (rc < 0)
        return rc;
    if (ev.finish != HR_GEN_LENGTH)
        return hr_err(err, HR_ECANCELLED, "a window did not complete");
    int n;
    const float *lp = hr_gen_prompt_logprobs(g, &n);
    for (int i = 0; i < n; i++) {
        if (isnan(lp[i]))
            continue;
        double loss = -(double)lp[i];
        a->sum += loss;
        a->sumsq += loss * loss;
        a->n++;
    }
    return 0;
}

int hr_cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *kv_dtype = NULL, *device = "auto", *ctk = NULL,
               *ctv = NULL, *kvq = NULL;
    long ctx = 512, stride = 0, threads = 0, max_windows = 0, kv_bits = 0, kv_group = 64,
         kv_start = 5000, kv_res = 0;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory or .gguf file; or ORG/NAME[@REV]"},
        {"device", HR_OPT_STR, &device, "where the model runs: auto (a GPU when there is one), cpu, cuda, cuda:N"},
        {"file", HR_OPT_STR, &file, "text file to score"},
        {"context", HR_OPT_INT, &ctx, "tokens per window (default 512)"},
        {"stride", HR_OPT_INT, &stride, "window start step (default: --context)"},
        {"threads", HR_OPT_INT, &threads, "compute threads (default: all cores)"},
        {"max-windows", HR_OPT_INT, &max_windows, "stop after N windows (default: all)"},
        {"kv-dtype", HR_OPT_STR, &kv_dtype, "KV cache: auto (f16 for GGUF, else f32), f32, f16, bf16"},
        {"cache-type-k", HR_OPT_STR, &ctk, "K cache type as llama.cpp: f32, f16, bf16, q8_0, q4_0 (default: --kv-dtype)"},
        {"cache-type-v", HR_OPT_STR, &ctv, "V cache type as llama.cpp: f32, f16, bf16, q8_0, q4_0 (default: --kv-dtype)"},
        {"kv-quant", HR_OPT_STR, &kvq, "TurboQuant KV cache: turbo, turbo:B or turbo:K_BITS,V_BITS (bits 2, 2.5, 3, 3.5, 4; default off)"},
        {"kv-residual", HR_OPT_INT, &kv_res, "with a quantized KV cache: a token reads the keys of its window of N positions (a multiple of 32) at full precision (default 0: off; docs/kv-quant.md)"},
        {"kv-bits", HR_OPT_INT, &kv_bits, "quantize the KV cache to 2, 3, 4, 6 or 8 bits (mlx-lm's affine KV; default off)"},
        {"kv-group-size", HR_OPT_INT, &kv_group, "group size of the quantized KV cache (default 64)"},
        {"quantized-kv-start", HR_OPT_INT, &kv_start, "with --kv-bits: a window's KV converts to it after the step that passes this many tokens (0: quantized from the first token; default 5000)"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!model || !file)
        return hr_cli_fail(&(hr_error){.msg = "--model and --file are required (see --help)"});
    if (stride == 0)
        stride = ctx;
    if (ctx < 2 || stride < 1 || stride > ctx || max_windows < 0 || threads < 0)
        return hr_cli_fail(&(hr_error){.msg = "need --context >= 2 and 1 <= --stride <= --context"});
    if ((rc = hr_kv_quant_check(kv_bits, kv_group, kv_start, &err)))
        return hr_cli_fail(&err);
    hr_llm *m = NULL;
    hr_session *s = NULL;
    hr_gen *q[IN_FLIGHT] = {0};
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len, n_ids = 0;
    int status = 1, kvt = HR_KV_AUTO, kvv = 0;
    hr_llm_opts lo = {.n_threads = (int)threads, .device = device};
    if ((rc = hr__kv_types_from_names(kv_dtype, ctk, ctv, &kvt, &kvv, &err)) ||
        (rc = hr_llm_load(&m, model, &lo, &err)) ||
        (rc = hr_file_read(file, &text, &len, &err)) ||
        (rc = hr_llm_tokenize(m, text, len, HR_TOKENIZE_ADD_SPECIAL, &ids, &n_ids, &err)))
        goto done;
    if (ctx > hr_llm_n_ctx_max(m)) {
        rc = hr_err(&err, HR_ERANGE, "--context %ld is past the model's context of %d", ctx,
                    hr_llm_n_ctx_max(m));
        goto done;
    }
    if ((long)n_ids < ctx) {
        rc = hr_err(&err, HR_EINVAL, "%s: %zu tokens, fewer than one window of %ld", file,
                    n_ids, ctx);
        goto done;
    }
    long windows = ((long)n_ids - ctx) / stride + 1;
    if (max_windows && windows > max_windows)
        windows = max_windows;
    hr_session_opts so = {.n_threads = (int)threads, .max_batch = IN_FLIGHT, .n_ctx = (int)ctx,
                          .kv_dtype = kvt, .kv_dtype_v = kvv, .prompt_cache = -1,
                          .kv_bits = (int)kv_bits, .kv_group = (int)kv_group,
                          .kv_quant = kvq, .quantized_kv_start = (int)kv_start,
                          .kv_residual = (int)kv_res};
    if ((rc = hr_session_new(&s, m, &so, &err)))
        goto done;
    acc a = {0};
    double t0 = hr_now();
    for (long w = 0; w < windows + IN_FLIGHT; w++) {
        if (w >= IN_FLIGHT) { /* the oldest in flight, in window order */
            hr_gen **g = &q[(w - IN_FLIGHT) % IN_FLIGHT];
            if ((rc = collect(*g, &a, &err)))
                goto done;
            hr_gen_free(*g);
            *g = NULL;
        }
        if (w < windows && (rc = submit(&q[w % IN_FLIGHT], s, ids + w * stride, ctx,
                                        w == 0 || stride == ctx ? 1 : (int)(ctx - stride),
                                        &err)))
            goto done;
    }
    double dt = hr_now() - t0, mean = a.sum / (double)a.n;
    double var = a.n > 1 ? (a.sumsq - a.sum * mean) / (double)(a.n - 1) : 0;
    double ppl = exp(mean), se = ppl * sqrt(var > 0 ? var : 0) / sqrt((double)a.n);
    printf("perplexity %.4f +/- %.4f\n", ppl, se);
    printf("scored %ld tokens in %ld windows of %ld (stride %ld) from %zu; %.1f tokens/s "
           "(%.2f s)\n", a.n, windows, ctx, stride, n_ids,
           (double)windows * (double)(ctx - 1) / dt, dt);
    status = 0;
done:
    if (rc)
        hr_cli_fail(&err);
    for (int i = 0; i < IN_FLIGHT; i++)
        hr_gen_free(q[i]);
    hr_session_free(s);
    hr_free(ids);
    free(text);
    hr_llm_free(m);
    return status;
}
