/* hearth generate: one prompt in, tokens out (greedy at --temp 0). */
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/tokens.h"
#include "core/error.h"
#include "core/timer.h"
#include "engine/runner.h"
#include "model/kv.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: hearth generate --model PATH (--prompt TEXT | --prompt-tokens 1,2,3) "
    "[--max-tokens N] [--temp T] [--top-p P] [--top-k K] [--seed S] "
    "[--top-logprobs K] [--kv-dtype D] [--json]";

int hr_cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *prompt_tokens = NULL, *kv_dtype = NULL,
               *device = "auto";
    long max_tokens = 100, top_k = 0, seed = 0, top_lp = 0, threads = 0, ctx = 0;
    double temp = 0.0, top_p = 1.0, min_p = 0.0;
    int json = 0, ignore_eos = 0;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory; or ORG/NAME[@REV]"},
        {"device", HR_OPT_STR, &device, "where the model runs: auto (a GPU when there is one), cpu, cuda, cuda:N"},
        {"prompt", HR_OPT_STR, &prompt, "prompt text (needs a tokenizer)"},
        {"prompt-tokens", HR_OPT_STR, &prompt_tokens, "prompt as token ids, e.g. 1,2,3"},
        {"max-tokens", HR_OPT_INT, &max_tokens, "tokens to generate (default 100)"},
        {"temp", HR_OPT_FLOAT, &temp, "temperature; 0 = greedy (default 0)"},
        {"top-p", HR_OPT_FLOAT, &top_p, "nucleus sampling mass (default 1 = off)"},
        {"top-k", HR_OPT_INT, &top_k, "keep the K most likely tokens (default 0 = off)"},
        {"min-p", HR_OPT_FLOAT, &min_p, "min-p filter (default 0 = off)"},
        {"seed", HR_OPT_INT, &seed, "sampling seed (default 0)"},
        {"top-logprobs", HR_OPT_INT, &top_lp, "report the K best logprobs per step"},
        {"threads", HR_OPT_INT, &threads, "compute threads (default: all cores)"},
        {"ctx", HR_OPT_INT, &ctx, "context size in tokens (default: model max, capped at 8192)"},
        {"kv-dtype", HR_OPT_STR, &kv_dtype, "KV cache: auto (f16 for GGUF, else f32), f32, f16, bf16"},
        {"ignore-eos", HR_OPT_FLAG, &ignore_eos, "do not stop at end-of-sequence tokens"},
        {"json", HR_OPT_FLAG, &json, "print one JSON object"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!model)
        return hr_cli_fail(&(hr_error){.msg = "--model is required (see --help)"});
    if (!prompt == !prompt_tokens)
        return hr_cli_fail(&(hr_error){.msg = "give exactly one of --prompt, --prompt-tokens"});
    if (max_tokens < 0 || top_k < 0 || top_lp < 0 || top_lp > 100 || temp < 0 ||
        top_p <= 0 || top_p > 1 || min_p < 0 || min_p > 1 || threads < 0 || ctx < 0)
        return hr_cli_fail(&(hr_error){.msg = "a numeric flag is out of range (see --help)"});

    int32_t *ptoks = NULL;
    int n_prompt = 0;
    hr_tokenizer *tok = NULL;
    if (prompt_tokens && (rc = hr_parse_token_list(prompt_tokens, &ptoks, &n_prompt, &err)))
        return hr_cli_fail(&err);
    /* the tokenizer, when the model directory (or GGUF file) has one: --prompt
     * and "text" need it */
    char tpath[4096];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", model);
    size_t ml = strlen(model);
    int gguf = ml > 5 && !strcmp(model + ml - 5, ".gguf");
    FILE *tf = gguf ? NULL : fopen(tpath, "r");
    if (tf)
        fclose(tf);
    if (tf || gguf) {
        if (hr_tokenizer_load(&tok, model, &err) && (tf || prompt))
            return hr_cli_fail(&err); /* a GGUF without a vocabulary still runs token ids */
    } else if (prompt) {
        return hr_cli_fail(&(hr_error){.msg = "--prompt needs a tokenizer.json in the model "
                                              "directory; use --prompt-tokens"});
    }
    if (prompt) {
        hr_tokens t = {0};
        if ((rc = hr_tokenizer_encode(tok, prompt, strlen(prompt), HR_TOK_ADD_SPECIAL, &t, &err))) {
            hr_tokenizer_free(tok);
            return hr_cli_fail(&err);
        }
        ptoks = t.ids;
        n_prompt = (int)t.n;
        if (n_prompt == 0) {
            hr_tokenizer_free(tok);
            free(ptoks);
            return hr_cli_fail(&(hr_error){.msg = "the prompt encodes to no tokens"});
        }
    }

    hr_model *m = NULL;
    hr_runner *r = NULL;
    hr_sampler *smp = NULL;
    float *logits = NULL, *lps = NULL;
    int32_t *out = NULL, *ids = NULL;
    json_t *top = json_array();
    int status = 1, n_out = 0;
    if ((rc = hr_model_open_on(&m, model, device, &err)))
        goto done;
    hr_runner_opts ro = {.n_threads = (int)threads, .n_ctx = (int)ctx};
    if ((rc = hr_kv_dtype_pick(kv_dtype, m->gguf, &ro.kv_dtype, &err)) ||
        (rc = hr_runner_new(&r, m, &ro, &err)))
        goto done;
    int V = m->hp.n_vocab;
    hr_sampler_params sp;
    hr_sampler_params_default(&sp);
    sp.temp = (float)temp;
    sp.top_p = (float)top_p;
    sp.top_k = (int)top_k;
    sp.min_p = (float)min_p;
    sp.seed = (uint64_t)seed;
    if ((rc = hr_sampler_new(&smp, &sp, V, &err)))
        goto done;
    hr_sampler_accept(smp, ptoks, n_prompt);
    logits = malloc((size_t)V * sizeof *logits);
    out = malloc(((size_t)max_tokens + 1) * sizeof *out);
    ids = malloc(((size_t)top_lp + 1) * sizeof *ids);
    lps = malloc(((size_t)top_lp + 1) * sizeof *lps);
    if (!logits || !out || !ids || !lps) {
        rc = hr_err(&err, HR_ENOMEM, "out of memory");
        goto done;
    }
    double t0 = hr_now();
    if ((rc = hr_runner_eval(r, ptoks, n_prompt, logits, &err)))
        goto done;
    double t1 = hr_now(), t2 = t1;
    for (n_out = 0; n_out < max_tokens;) {
        int32_t tok = hr_sampler_sample(smp, logits); /* logits -> logprobs */
        hr_sampler_accept(smp, &tok, 1);
        out[n_out++] = tok;
        if (top_lp) {
            int k = hr_top_logprobs(logits, V, (int)top_lp, ids, lps);
            json_t *step = json_array();
            for (int i = 0; i < k; i++)
                json_array_append_new(step, json_pack("{s:i,s:f}", "id", ids[i],
                                                      "logprob", (double)lps[i]));
            json_array_append_new(top, step);
        }
        bool eos = false;
        for (int i = 0; i < m->hp.n_eos; i++)
            eos |= tok == m->hp.eos_ids[i];
        if ((eos && !ignore_eos) || n_out == max_tokens)
            break;
        if ((rc = hr_runner_eval(r, &tok, 1, logits, &err)))
            goto done;
        t2 = hr_now();
    }
    double prefill_tps = n_prompt / (t1 - t0);
    double decode_tps = n_out > 1 ? (n_out - 1) / (t2 - t1) : 0.0;
    if (json) {
        json_t *o = json_object(), *pt = json_array(), *gt = json_array();
        for (int i = 0; i < n_prompt; i++)
            json_array_append_new(pt, json_integer(ptoks[i]));
        for (int i = 0; i < n_out; i++)
            json_array_append_new(gt, json_integer(out[i]));
        json_object_set_new(o, "prompt_tokens", pt);
        json_object_set_new(o, "tokens", gt);
        char *text = NULL;
        if (tok && hr_tokenizer_decode(tok, out, (size_t)n_out, HR_DETOK_SKIP_SPECIAL, &text,
                                       NULL, NULL) == 0)
            json_object_set_new(o, "text", json_string(text));
        free(text);
        if (top_lp)
            json_object_set(o, "top_logprobs", top);
        json_object_set_new(o, "prefill_tokens_per_s", json_real(prefill_tps));
        json_object_set_new(o, "decode_tokens_per_s", json_real(decode_tps));
        char *s = json_dumps(o, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(o);
    } else {
        char *text = NULL;
        if (tok && hr_tokenizer_decode(tok, out, (size_t)n_out, HR_DETOK_SKIP_SPECIAL, &text,
                                       NULL, NULL) == 0) {
            printf("%s\n", text);
        } else {
            for (int i = 0; i < n_out; i++)
                printf("%s%d", i ? "," : "", out[i]);
            printf("\n");
        }
        free(text);
        fprintf(stderr, "prompt: %d tokens, %.1f tokens/s; generated %d tokens, %.1f tokens/s\n",
                n_prompt, prefill_tps, n_out, decode_tps);
    }
    status = 0;
done:
    if (rc)
        hr_cli_fail(&err);
    json_decref(top);
    free(logits);
    free(out);
    free(ids);
    free(lps);
    free(ptoks);
    hr_sampler_free(smp);
    hr_tokenizer_free(tok);
    hr_runner_free(r);
    hr_model_free(m);
    return status;
}
