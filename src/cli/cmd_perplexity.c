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
 *   --kv-bits B: a window's cache moves into a B-bit quantized pool after
 *   the forward (CHUNK tokens) that brings it to --quantized-kv-start
 *   tokens, as mlx-lm's generate does after each step (docs/kv-quant.md). */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "core/timer.h"
#include "model/batch.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 64 /* tokens per forward (logits for every one of them) */

static const char usage[] =
    "usage: hearth perplexity --model PATH --file TEXT [--context N] [--stride N] "
    "[--threads T] [--max-windows N] [--kv-dtype D] [--kv-bits B] [--kv-group-size G] "
    "[--quantized-kv-start N]";

typedef struct acc {
    double sum, sumsq;
    long n;
} acc;

/* The window's cache: pool kv until it converts into kvq (NULL: never)
 * after the forward that brings it to q_start tokens. */
typedef struct win_kv {
    hr_kv *kv, *kvq;
    int q_start;
} win_kv;

/* Move the window's nb blocks (len tokens) into w->kvq. */
static int convert(win_kv *w, int32_t *blocks, int nb, int len, hr_error *err) {
    int rows[4096];
    for (int i = 0; i < nb; i++) {
        int left = len - i * HR_KV_BLOCK;
        rows[i] = left < 0 ? 0 : left < HR_KV_BLOCK ? left : HR_KV_BLOCK;
    }
    return hr_kv_convert(w->kvq, w->kv, blocks, rows, nb, blocks, err);
}

/* One window: tokens[0..L) from an empty cache; score predictions whose
 * target index is >= first_scored. */
static int eval_window(hr_fwd *f, const win_kv *wk, const hr_model *m, const int32_t *tok,
                       int L, int first_scored, float *logits, acc *a, hr_error *err) {
    win_kv w = *wk;
    hr_kv *kv = w.kv;
    int nb = (L + HR_KV_BLOCK - 1) / HR_KV_BLOCK, V = m->hp.n_vocab;
    int32_t blocks[4096], pos[CHUNK], seq[CHUNK] = {0};
    uint8_t want[CHUNK];
    if (nb > 4096)
        return hr_err(err, HR_ERANGE, "--context too large");
    for (int i = 0; i < nb; i++)
        blocks[i] = hr_kv_alloc(kv);
    hr_seq_blocks sb = {blocks, nb, L};
    int rc = 0;
    for (int done = 0; done < L - 1 && !rc;) { /* the last token predicts nothing */
        int c = L - 1 - done < CHUNK ? L - 1 - done : CHUNK;
        for (int i = 0; i < c; i++) {
            pos[i] = done + i;
            want[i] = done + i + 1 >= first_scored;
        }
        hr_batch b = {.n_tokens = c, .token = tok + done, .pos = pos, .seq = seq,
                      .logits = want, .n_seqs = 1, .seqs = &sb};
        if ((rc = hr_forward(f, kv, &b, logits, err)))
            break;
        if (w.kvq && kv != w.kvq && done + c >= w.q_start) {
            if ((rc = convert(&w, blocks, nb, done + c, err)))
                break;
            kv = w.kvq;
        }
        int row = 0;
        for (int i = 0; i < c; i++) {
            if (!want[i])
                continue;
            const float *l = logits + (size_t)row++ * V;
            double mx = -INFINITY, s = 0;
            for (int v = 0; v < V; v++)
                mx = l[v] > mx ? l[v] : mx;
            for (int v = 0; v < V; v++)
                s += exp(l[v] - mx);
            double loss = mx + log(s) - l[tok[done + i + 1]];
            a->sum += loss;
            a->sumsq += loss * loss;
            a->n++;
        }
        done += c;
    }
    for (int i = 0; i < nb; i++)
        hr_kv_unref(kv, blocks[i]);
    return rc;
}

int hr_cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *kv_dtype = NULL, *device = "auto";
    long ctx = 512, stride = 0, threads = 0, max_windows = 0, kv_bits = 0, kv_group = 64,
         kv_start = 5000;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory or .gguf file; or ORG/NAME[@REV]"},
        {"device", HR_OPT_STR, &device, "where the model runs: auto (a GPU when there is one), cpu, cuda, cuda:N"},
        {"file", HR_OPT_STR, &file, "text file to score"},
        {"context", HR_OPT_INT, &ctx, "tokens per window (default 512)"},
        {"stride", HR_OPT_INT, &stride, "window start step (default: --context)"},
        {"threads", HR_OPT_INT, &threads, "compute threads (default: all cores)"},
        {"max-windows", HR_OPT_INT, &max_windows, "stop after N windows (default: all)"},
        {"kv-dtype", HR_OPT_STR, &kv_dtype, "KV cache: auto (f16 for GGUF, else f32), f32, f16, bf16"},
        {"kv-bits", HR_OPT_INT, &kv_bits, "quantize the KV cache to 2, 3, 4, 6 or 8 bits (mlx-lm's affine KV; default off)"},
        {"kv-group-size", HR_OPT_INT, &kv_group, "group size of the quantized KV cache (default 64)"},
        {"quantized-kv-start", HR_OPT_INT, &kv_start, "tokens before a window's KV is quantized (default 5000)"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!model || !file)
        return hr_cli_fail(&(hr_error){.msg = "--model and --file are required (see --help)"});
    if (stride == 0)
        stride = ctx;
    if (ctx < 2 || stride < 1 || stride > ctx || max_windows < 0)
        return hr_cli_fail(&(hr_error){.msg = "need --context >= 2 and 1 <= --stride <= --context"});
    if ((rc = hr_kv_quant_check(kv_bits, kv_group, kv_start, &err)))
        return hr_cli_fail(&err);
    hr_model *m = NULL;
    hr_tokenizer *tk = NULL;
    hr_fwd *f = NULL;
    hr_kv kv = {0}, kvq = {0};
    bool kv_ok = false, kvq_ok = false;
    char *text = NULL;
    float *logits = NULL;
    hr_tokens toks = {0};
    int status = 1;
    size_t len;
    if ((rc = hr_model_open_on(&m, model, device, &err)) || (rc = hr_tokenizer_load(&tk, model, &err)) ||
        (rc = hr_file_read(file, &text, &len, &err)) ||
        (rc = hr_tokenizer_encode(tk, text, len, HR_TOK_ADD_SPECIAL, &toks, &err)))
        goto done;
    if (ctx > m->hp.ctx_max) {
        rc = hr_err(&err, HR_ERANGE, "--context %ld is past the model's context of %d", ctx,
                    m->hp.ctx_max);
        goto done;
    }
    if ((long)toks.n < ctx) {
        rc = hr_err(&err, HR_EINVAL, "%s: %zu tokens, fewer than one window of %ld", file,
                    toks.n, ctx);
        goto done;
    }
    hr_dtype kvt;
    int nb = (int)((ctx + HR_KV_BLOCK - 1) / HR_KV_BLOCK);
    if ((rc = hr_kv_dtype_pick(kv_dtype, m->gguf, &kvt, &err)) ||
        (rc = hr_kv_init_on(&kv, m->be, &m->hp, kvt, nb, &err)))
        goto done;
    kv_ok = true;
    if (kv_bits) {
        hr_kv_fmt qf = {HR_DTYPE_AFFINE, (int)kv_bits, (int)kv_group};
        if ((rc = hr_kv_init_fmt(&kvq, m->be, &m->hp, &qf, nb, &err)))
            goto done;
        kvq_ok = true;
    }
    win_kv wk = {&kv, kv_bits ? &kvq : NULL, (int)kv_start};
    if ((rc = hr_fwd_new(&f, m, CHUNK, 1, (int)ctx, (int)threads, &err)))
        goto done;
    logits = malloc((size_t)CHUNK * m->hp.n_vocab * sizeof *logits);
    if (!logits) {
        rc = hr_err(&err, HR_ENOMEM, "out of memory");
        goto done;
    }
    acc a = {0};
    long windows = 0;
    double t0 = hr_now();
    for (long start = 0; start + ctx <= (long)toks.n; start += stride) {
        if (max_windows && windows == max_windows)
            break;
        int first = start == 0 ? 1 : (int)(ctx - stride);
        if ((rc = eval_window(f, &wk, m, toks.ids + start, (int)ctx, first, logits, &a, &err)))
            goto done;
        windows++;
    }
    double dt = hr_now() - t0, mean = a.sum / (double)a.n;
    double var = a.n > 1 ? (a.sumsq - a.sum * mean) / (double)(a.n - 1) : 0;
    double ppl = exp(mean), se = ppl * sqrt(var > 0 ? var : 0) / sqrt((double)a.n);
    printf("perplexity %.4f +/- %.4f\n", ppl, se);
    printf("scored %ld tokens in %ld windows of %ld (stride %ld) from %zu; %.1f tokens/s "
           "(%.2f s)\n", a.n, windows, ctx, stride, toks.n,
           (double)windows * (double)(ctx - 1) / dt, dt);
    status = 0;
done:
    if (rc)
        hr_cli_fail(&err);
    free(logits);
    free(text);
    hr_tokens_free(&toks);
    hr_fwd_free(f);
    if (kv_ok)
        hr_kv_deinit(&kv);
    if (kvq_ok)
        hr_kv_deinit(&kvq);
    hr_tokenizer_free(tk);
    hr_model_free(m);
    return status;
}
