/* hearth bench: prefill and decode tokens/s (median of repeats), and decode
 * as a % of the memory roofline:
 *   roofline tok/s = read bandwidth / (weight bytes + KV bytes per token),
 * with the bandwidth read right before and right after each repeat's
 * decode and the % the median of the repeats' own: on a shared machine the
 * bandwidth moves from second to second, and a decode is held against the
 * ceiling of its time, the higher of the two readings (one reading, after,
 * sometimes caught a slow moment and put a decode above 100%).
 *   Each repeat is one greedy request of the engine (hr_gen: random prompt
 *   tokens, ignore_eos, the prompt cache off): prefill is the time to its
 *   first token, decode the rate of the tokens after it; the bandwidth is
 *   read before the request and after it, on the engine's own threads. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/timer.h"
#include "api/api.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/membw.h"
#include "model/kv.h"
#include "sample/rng.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double hr_cli_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static const char usage[] =
    "usage: hearth bench --model PATH [--prompt-len N] [--gen-len N] [--threads T] "
    "[--repeats R] [--kv-dtype D] [--cache-type-k T] [--cache-type-v T] [--kv-bits B] "
    "[--kv-group-size G] [--quantized-kv-start N] [--kv-quant turbo[:K,V]] [--kv-budget GB] "
    "[--json]\n"
    "       hearth bench (--draft-model PATH | --spec ngram) ...: speculative decoding "
    "side by side (hearth bench --spec ngram --help)\n"
    "       hearth bench --adapter-rank R ...: LoRA adapters' decode cost, 1 and C clients "
    "(hearth bench --adapter-rank 16 --help)";

/* One request: *pre prefill tokens/s, *dec decode tokens/s. */
static int run_once(hr_session *s, const int32_t *prompt, long prompt_len, long gen_len,
                    double *pre, double *dec, hr_error *err) {
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_tokens = prompt;
    p.n_prompt_tokens = (int)prompt_len;
    p.max_tokens = (int)gen_len;
    p.temperature = 0;
    p.ignore_eos = 1;
    hr_gen *g = NULL;
    hr_gen_event ev;
    double t0 = hr_now(), t1 = t0, t2 = t0;
    int rc = hr_gen_submit(&g, s, &p, err);
    long n = 0;
    if (!rc) {
        while ((rc = hr_gen_next(g, &ev, err)) == 1 && ev.finish == HR_GEN_RUNNING) {
            t2 = hr_now();
            if (n++ == 0)
                t1 = t2;
        }
        if (rc >= 0 && n != gen_len)
            rc = hr_err(err, HR_EIO, "the request ended after %ld of %ld tokens", n, gen_len);
    }
    hr_gen_free(g);
    if (rc < 0)
        return rc;
    *pre = prompt_len / (t1 - t0);
    *dec = gen_len > 1 ? (gen_len - 1) / (t2 - t1) : 0;
    return 0;
}

int hr_cmd_bench(int argc, char **argv) {
    for (int i = 0; i < argc; i++) /* speculative decoding: its own bench (cmd_bench_spec.c) */
        if (!strncmp(argv[i], "--draft-model", 13) || !strncmp(argv[i], "--spec", 6))
            return hr_cmd_bench_spec(argc, argv);
    for (int i = 0; i < argc; i++) /* LoRA adapters: cmd_bench_lora.c */
        if (!strncmp(argv[i], "--adapter-rank", 14))
            return hr_cmd_bench_lora(argc, argv);
    const char *model = NULL, *kv_dtype = NULL, *device = "auto", *ctk = NULL, *ctv = NULL,
               *kvq = NULL;
    long prompt_len = 512, gen_len = 128, threads = 0, repeats = 5, kv_bits = 0, kv_group = 64,
         kv_start = 5000, kv_res = 0;
    double kv_gb = 8;
    int json = 0;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory; or ORG/NAME[@REV]"},
        {"device", HR_OPT_STR, &device, "where the model runs: auto (a GPU when there is one), cpu, cuda, cuda:N"},
        {"prompt-len", HR_OPT_INT, &prompt_len, "prompt tokens (default 512)"},
        {"gen-len", HR_OPT_INT, &gen_len, "generated tokens (default 128)"},
        {"threads", HR_OPT_INT, &threads, "compute threads (default: all cores)"},
        {"repeats", HR_OPT_INT, &repeats, "runs; figures are medians (default 5)"},
        {"kv-dtype", HR_OPT_STR, &kv_dtype, "KV cache: auto (f16 for GGUF, else f32), f32, f16, bf16"},
        {"cache-type-k", HR_OPT_STR, &ctk, "K cache type as llama.cpp: f32, f16, bf16, q8_0, q4_0 (default: --kv-dtype)"},
        {"cache-type-v", HR_OPT_STR, &ctv, "V cache type as llama.cpp: f32, f16, bf16, q8_0, q4_0 (default: --kv-dtype)"},
        {"kv-quant", HR_OPT_STR, &kvq, "TurboQuant KV cache: turbo, turbo:B or turbo:K_BITS,V_BITS (bits 2, 2.5, 3, 3.5, 4; default off)"},
        {"kv-residual", HR_OPT_INT, &kv_res, "with a quantized KV cache: a token reads the keys of its window of N positions (a multiple of 32) at full precision (default 0: off; docs/kv-quant.md)"},
        {"kv-bits", HR_OPT_INT, &kv_bits, "quantize the KV cache to 2, 3, 4, 6 or 8 bits (mlx-lm's affine KV; default off)"},
        {"kv-group-size", HR_OPT_INT, &kv_group, "group size of the quantized KV cache (default 64)"},
        {"quantized-kv-start", HR_OPT_INT, &kv_start, "with --kv-bits: the run's KV converts to it after the step that passes this many tokens (0: quantized from the first token; default 5000)"},
        {"kv-budget", HR_OPT_FLOAT, &kv_gb, "print how many 16384-token sequences' KV fit this many GB (default 8)"},
        {"json", HR_OPT_FLAG, &json, "print one JSON object"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!model)
        return hr_cli_fail(&(hr_error){.msg = "--model is required (see --help)"});
    if (!(kv_gb > 0))
        return hr_cli_fail(&(hr_error){.msg = "--kv-budget must be > 0 (GB)"});
    if (prompt_len < 1 || gen_len < 2 || repeats < 1 || threads < 0)
        return hr_cli_fail(&(hr_error){.msg = "--prompt-len and --repeats must be >= 1, "
                                              "--gen-len >= 2"});
    if ((rc = hr_kv_quant_check(kv_bits, kv_group, kv_start, &err)))
        return hr_cli_fail(&err);

    hr_llm *llm = NULL;
    hr_session *s = NULL;
    json_t *runs = NULL; /* each repeat's figures, for --json */
    int32_t *prompt = NULL;
    hr_membw_buf *bwbuf = NULL; /* read for the roofline, allocated once */
    double *pre = calloc((size_t)repeats, sizeof *pre), *dec = calloc((size_t)repeats, sizeof *dec);
    double *bws = calloc((size_t)repeats, sizeof *bws), *pct = calloc((size_t)repeats, sizeof *pct);
    int status = 1, kvt = HR_KV_AUTO, kvv = 0;
    hr_llm_opts lo = {.n_threads = (int)threads, .device = device};
    if ((rc = hr__kv_types_from_names(kv_dtype, ctk, ctv, &kvt, &kvv, &err)) ||
        (rc = hr_llm_load(&llm, model, &lo, &err)))
        goto done;
    hr_session_opts so = {.n_threads = (int)threads, .max_batch = 1,
                          .n_ctx = (int)(prompt_len + gen_len), .kv_dtype = kvt,
                          .kv_dtype_v = kvv,
                          .prompt_cache = -1, .kv_bits = (int)kv_bits,
                          .kv_group = (int)kv_group, .kv_quant = kvq,
                          .quantized_kv_start = (int)kv_start, .kv_residual = (int)kv_res};
    if ((rc = hr_session_new(&s, llm, &so, &err)))
        goto done;
    const hr_model *m = llm->model;
    int V = m->hp.n_vocab;
    prompt = malloc((size_t)prompt_len * sizeof *prompt);
    if (!prompt || !pre || !dec || !bws || !pct) {
        rc = hr_err(&err, HR_ENOMEM, "out of memory");
        goto done;
    }
    bool gpu = m->be->device_mem; /* the roofline of the device's memory */
    if (!gpu && !(bwbuf = hr_membw_buf_new((size_t)1 << 30))) {
        rc = hr_err(&err, HR_ENOMEM, "out of memory for the bandwidth read");
        goto done;
    }
    hr_pool *pool = hr_engine_pool(s->engine);
    hr_rng rng;
    hr_rng_seed(&rng, 1);
    for (long i = 0; i < prompt_len; i++)
        prompt[i] = (int32_t)(hr_rng_next(&rng) % (uint64_t)V);

    /* warm-up: page in the weights; on a GPU, the measured shapes twice, so
     * that every measured run replays their CUDA graphs (a shape's first
     * step launches its ops, its second is captured: docs/gpu.md) */
    double w0, w1;
    for (int i = 0; i < (gpu ? 2 : 1); i++)
        if ((rc = run_once(s, prompt, gpu ? prompt_len : prompt_len < 32 ? prompt_len : 32,
                           gpu ? 3 : 2, &w0, &w1, &err)))
            goto done;
    /* bytes per decoded token: weights + the average KV read */
    const hr_hparams *hp = &m->hp;
    /* the format the decode reads: the quantized pool's once the sequence
     * converted (the decode step at position c reads c + 1 rows, converted
     * when c >= --quantized-kv-start), else the one it starts in */
    const hr_kv *kv0 = hr_engine_kv(s->engine), *kvc = hr_engine_kvq(s->engine);
    const hr_kv *kvp = kvc ? kvc : kv0;
    double kv_tok = (double)hr_kv_pool_block_bytes(kvp) / HR_KV_BLOCK;
    double kv0_tok = (double)hr_kv_pool_block_bytes(kv0) / HR_KV_BLOCK;
    long seqs16k = (long)(kv_gb * 1e9 / (kv_tok * 16384)); /* whole sequences */
    /* --kv-residual: the step at c reads its window's c + 1 - w0 rows from kvr
     * (once converted: an unconverted sequence reads all of its own pool) */
    int resid = 0;
    const hr_kv *kvr = hr_engine_kvr(s->engine, &resid);
    double kvr_tok = kvr ? (double)hr_kv_pool_block_bytes(kvr) / HR_KV_BLOCK : 0;
    double kv_bytes = 0;
    for (long c = prompt_len; c < prompt_len + gen_len; c++) {
        long w0 = kvr && !(kvc && c < kv_start) ? c / resid * resid : c + 1;
        kv_bytes += ((double)w0 * (kvc && c >= kv_start ? kv_tok : kv0_tok) +
                     (double)(c + 1 - w0) * kvr_tok) / gen_len;
    }
    double bytes = (double)hr_model_decode_bytes(m) + kv_bytes;
    if (!(runs = json_array())) {
        rc = hr_err(&err, HR_ENOMEM, "out of memory");
        goto done;
    }
    for (long rep = 0; rep < repeats; rep++) {
        double bw0 = gpu ? m->be->ops->membw(m->be, (size_t)1 << 30)
                         : hr_membw_read(bwbuf, pool, 7);
        if ((rc = run_once(s, prompt, prompt_len, gen_len, &pre[rep], &dec[rep], &err)))
            goto done;
        double bw1 = gpu ? m->be->ops->membw(m->be, (size_t)1 << 30)
                         : hr_membw_read(bwbuf, pool, 7);
        bws[rep] = bw0 > bw1 ? bw0 : bw1;
        pct[rep] = 100.0 * dec[rep] * bytes / bws[rep];
        json_array_append_new(runs, json_pack("{s:f,s:f,s:f,s:f}", "prefill_tokens_per_s",
                                              pre[rep], "decode_tokens_per_s", dec[rep],
                                              "mem_bandwidth_gb_s", bws[rep] / 1e9,
                                              "decode_pct_of_roofline", pct[rep]));
    }
    int n_threads = hr_engine_threads(s->engine);
    int R = (int)repeats;
    double pre_tps = hr_cli_median(pre, R), dec_tps = hr_cli_median(dec, R);
    double bw = hr_cli_median(bws, R), roof = bw / bytes, dec_pct = hr_cli_median(pct, R);
    if (json) {
        json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:i,"
                              "s:O}",
                              "model", model, "isa", gpu ? m->be->name : hr_cpu()->name,
                              "threads", n_threads, "prompt_len", (int)prompt_len,
                              "gen_len", (int)gen_len, "repeats", (int)repeats,
                              "prefill_tokens_per_s", pre_tps, "decode_tokens_per_s", dec_tps,
                              "mem_bandwidth_gb_s", bw / 1e9, "bytes_per_token", bytes,
                              "roofline_tokens_per_s", roof, "decode_pct_of_roofline", dec_pct,
                              "kv_bytes_per_token", kv_tok, "kv_budget_gb", kv_gb,
                              "seqs_16k_in_kv_budget", (json_int_t)seqs16k,
                              "kv_residual", resid, "runs", runs);
        char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!js) {
            rc = hr_err(&err, HR_ENOMEM, "out of memory");
            goto done;
        }
        printf("%s\n", js);
        free(js);
    } else {
        if (gpu)
            printf("model      %s (%s, device %s)\n", model, hp->arch->model_type, m->be->name);
        else
            printf("model      %s (%s, %d threads, isa %s)\n", model, hp->arch->model_type,
                   n_threads, hr_cpu()->name);
        printf("prefill    %8.1f tokens/s  (%ld tokens, median of %ld)\n", pre_tps,
               prompt_len, repeats);
        printf("decode     %8.2f tokens/s  (%ld tokens, median of %ld)\n", dec_tps, gen_len,
               repeats);
        printf("roofline   %8.2f tokens/s  (%.1f GB/s read, %.1f MB/token)\n", roof, bw / 1e9,
               bytes / 1e6);
        printf("decode     %8.1f %% of roofline (median of the repeats' own)\n", dec_pct);
        if (kvc)
            printf("kv cache   %8.0f bytes/token (%d-bit, group %d; %s, %.0f bytes/token, "
                   "until the step that passes %ld tokens)\n", kv_tok, kvp->bits, kvp->group,
                   hr_dtype_name(kv0->dtype), kv0_tok, kv_start);
        else if (kvp->dtype == HR_DTYPE_AFFINE)
            printf("kv cache   %8.0f bytes/token (%d-bit, group %d)\n", kv_tok, kvp->bits,
                   kvp->group);
        else if (kvp->dtype == HR_DTYPE_TURBO)
            printf("kv cache   %8.0f bytes/token (TurboQuant K %g bits, V %g bits)\n", kv_tok,
                   kvp->bits / 2.0, kvp->vbits / 2.0);
        else if (kvp->vdtype != kvp->dtype)
            printf("kv cache   %8.0f bytes/token (K %s, V %s)\n", kv_tok,
                   hr_dtype_name(kvp->dtype), hr_dtype_name(kvp->vdtype));
        else
            printf("kv cache   %8.0f bytes/token (%s)\n", kv_tok, hr_dtype_name(kvp->dtype));
        if (kvr)
            printf("kv window  %8d tokens a sequence at %s (%.0f bytes/token: --kv-residual)\n",
                   resid, hr_dtype_name(kvr->dtype), kvr_tok);
        printf("kv budget  %8ld sequences of 16384 tokens in %.1f GB\n", seqs16k, kv_gb);
    }
    status = 0;
done:
    if (rc)
        hr_cli_fail(&err);
    free(pre);
    free(dec);
    free(bws);
    free(pct);
    hr_membw_buf_free(bwbuf);
    json_decref(runs);
    free(prompt);
    hr_session_free(s);
    hr_llm_free(llm);
    return status;
}
