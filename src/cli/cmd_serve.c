/* hearth serve: the OpenAI-compatible server, with mlx_lm.server's flags. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/log.h"
#include "model/kv.h"
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: hearth serve [--model PATH] [--host H] [--port P] [--temp T] [--top-p P] "
    "[--top-k K] [--min-p P] [--max-tokens N] [--chat-template T] [--chat-template-args JSON] "
    "[--allowed-origins O] [--prefill-step-size N] [--batch N] [--kv-budget GB] [--no-ui] ...";

int hr_cmd_serve(int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *tmpl = NULL, *tmpl_args = NULL,
               *origins = "*", *adapter = NULL, *adapters = NULL, *log_level = NULL, *draft = NULL,
               *kv_dtype = NULL, *device = "auto", *spec = NULL;
    long port = 8080, top_k = -1, max_tokens = -1, prefill = 0, batch = 0, threads = 0,
         ctx = 0, max_body_mb = 16, pc_size = -1, pc_on = 1, kv_bits = 0, kv_group = 64,
         kv_start = 5000, n_draft = 3;
    int no_ui = 0;
    const char *pc_bytes = NULL, *ssd = NULL;
    double ssd_max_gb = 32, ssd_idle = 300;
    double temp = -1, top_p = -1, min_p = -1, kv_gb = 0;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory (default: the bundled demo model); or ORG/NAME[@REV]"},
        {"device", HR_OPT_STR, &device, "where the model runs: auto (a GPU when there is one), cpu, cuda, cuda:N"},
        {"host", HR_OPT_STR, &host, "address to listen on (default 127.0.0.1; 0.0.0.0 = LAN)"},
        {"port", HR_OPT_INT, &port, "port (default 8080)"},
        {"temp", HR_OPT_FLOAT, &temp, "default temperature (default 0, or generation_config.json)"},
        {"top-p", HR_OPT_FLOAT, &top_p, "default top_p (default 1)"},
        {"top-k", HR_OPT_INT, &top_k, "default top_k (default 0 = off)"},
        {"min-p", HR_OPT_FLOAT, &min_p, "default min_p (default 0 = off)"},
        {"max-tokens", HR_OPT_INT, &max_tokens, "default max_tokens (default 512)"},
        {"chat-template", HR_OPT_STR, &tmpl, "chat template text overriding the model's"},
        {"chat-template-args", HR_OPT_STR, &tmpl_args, "JSON object of template arguments"},
        {"allowed-origins", HR_OPT_STR, &origins, "CORS origins (default *)"},
        {"prefill-step-size", HR_OPT_INT, &prefill, "prompt tokens per step (default 512)"},
        {"batch", HR_OPT_INT, &batch, "concurrent sequences (default 8)"},
        {"kv-budget", HR_OPT_FLOAT, &kv_gb, "KV cache budget in GB (default: automatic)"},
        {"kv-dtype", HR_OPT_STR, &kv_dtype, "KV cache: auto (f16 for GGUF, else f32), f32, f16, bf16"},
        {"kv-bits", HR_OPT_INT, &kv_bits, "quantize the KV cache to 2, 3, 4, 6 or 8 bits (mlx-lm's affine KV; default off)"},
        {"kv-group-size", HR_OPT_INT, &kv_group, "group size of the quantized KV cache (default 64)"},
        {"quantized-kv-start", HR_OPT_INT, &kv_start, "tokens before a sequence's KV is quantized (default 5000; serve takes 0 only)"},
        {"threads", HR_OPT_INT, &threads, "compute threads (default: all cores)"},
        {"ctx", HR_OPT_INT, &ctx, "longest sequence in tokens (default: model's, capped at 8192)"},
        {"max-body-mb", HR_OPT_INT, &max_body_mb, "largest request body in MiB (default 16)"},
        {"prompt-cache", HR_OPT_INT, &pc_on, "0 turns the prompt cache off (default 1)"},
        {"prompt-cache-size", HR_OPT_INT, &pc_size, "bound the prompt cache to N full contexts"},
        {"prompt-cache-bytes", HR_OPT_STR, &pc_bytes, "bound the prompt cache in bytes (e.g. 2GB, 500M)"},
        {"ssd-cache", HR_OPT_STR, &ssd, "directory of the prompt cache's SSD tier (survives restarts)"},
        {"ssd-cache-max", HR_OPT_FLOAT, &ssd_max_gb, "SSD tier size in GB (default 32)"},
        {"ssd-demote-idle", HR_OPT_FLOAT, &ssd_idle, "seconds before an idle cached prefix leaves RAM (default 300)"},
        {"no-ui", HR_OPT_FLAG, &no_ui, "do not serve the web chat UI at /"},
        {"log-level", HR_OPT_STR, &log_level, "DEBUG, INFO, WARNING, ERROR or CRITICAL"},
        {"adapter-path", HR_OPT_STR, &adapter, "LoRA adapter (peft or mlx-lm) applied to requests that name none"},
        {"adapters", HR_OPT_STR, &adapters, "LoRA adapters requests may name: name=DIR,name=DIR (loaded on first use)"},
        {"draft-model", HR_OPT_STR, &draft, "draft model for speculative decoding (same tokenizer)"},
        {"num-draft-tokens", HR_OPT_INT, &n_draft, "tokens drafted per step (default 3; requests: num_draft_tokens)"},
        {"spec", HR_OPT_STR, &spec, "requests' default drafting: off, ngram (prompt lookup), draft (default with --draft-model)"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (n_draft < 1 || n_draft > 16) /* HR_SPEC_MAX_K: the session checks it too */
        return hr_cli_fail(&(hr_error){.msg = "--num-draft-tokens must be in [1, 16]"});
    if (log_level) {
        int lv = hr_log_parse_level(log_level);
        if (lv < 0)
            return hr_cli_fail(&(hr_error){.msg = "--log-level must be DEBUG, INFO, WARNING, ERROR or CRITICAL"});
        hr_log_set_level((hr_log_level)lv);
    } else {
        hr_log_set_level(HR_LOG_INFO);
    }
    if (port < 0 || port > 65535 || prefill < 0 || batch < 0 || kv_gb < 0 || threads < 0 ||
        ctx < 0 || max_body_mb < 1 || (top_p > 1) || (min_p > 1) || ssd_max_gb <= 0 ||
        ssd_idle < 0)
        return hr_cli_fail(&(hr_error){.msg = "a numeric flag is out of range (see --help)"});
    if ((rc = hr_kv_quant_check(kv_bits, kv_group, kv_start, &err)))
        return hr_cli_fail(&err);
    if (kv_bits && kv_start != 0) /* docs/kv-quant.md: one pool, one format */
        return hr_cli_fail(&(hr_error){.msg = "--quantized-kv-start: serve quantizes its KV "
                                              "pool from the first token; pass "
                                              "--quantized-kv-start 0 with --kv-bits"});
    /* prompt cache bound, in KV blocks (resolved against the model by the server) */
    double pc_b = 0;
    if (pc_bytes) {
        char *end;
        pc_b = strtod(pc_bytes, &end);
        if (end == pc_bytes || pc_b < 0)
            return hr_cli_fail(&(hr_error){.msg = "--prompt-cache-bytes wants a size like 2GB or 500M"});
        if (*end == 'G' || *end == 'g')
            pc_b *= 1e9;
        else if (*end == 'M' || *end == 'm')
            pc_b *= 1e6;
        else if (*end == 'K' || *end == 'k')
            pc_b *= 1e3;
        else if (*end)
            return hr_cli_fail(&(hr_error){.msg = "--prompt-cache-bytes wants a size like 2GB or 500M"});
    }
    hr_server_opts o = {
        .model = model ? model : hr_cli_default_model(), .device = device, .host = host, .port = (int)port,
        .temp = temp, .top_p = top_p, .min_p = min_p, .top_k = (int)top_k,
        .max_tokens = (int)max_tokens, .chat_template = tmpl, .chat_template_args = tmpl_args,
        .allowed_origins = origins, .max_body = (size_t)max_body_mb << 20,
        .prefill_step = (int)prefill, .batch = (int)batch,
        .kv_bytes = (size_t)(kv_gb * 1e9), .kv_dtype = kv_dtype, .kv_bits = (int)kv_bits,
        .kv_group = (int)kv_group, .n_threads = (int)threads,
        .n_ctx = (int)ctx,
        .cache_blocks = pc_on ? 0 : -1, .cache_size = pc_size > 0 ? (int)pc_size : 0,
        .cache_bytes = (size_t)pc_b, .ssd_cache = ssd,
        .ssd_cache_max = (size_t)(ssd_max_gb * 1e9), .ssd_demote_idle = ssd_idle,
        .no_ui = no_ui, .draft_model = draft, .spec = spec, .num_draft_tokens = (int)n_draft,
        .adapter_path = adapter, .adapters = adapters,
    };
    /* block the signals in every thread; this one waits for them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    hr_server *s = NULL;
    if ((rc = hr_server_new(&s, &o, &err)) || (rc = hr_server_start(s, &err))) {
        hr_server_free(s);
        return hr_cli_fail(&err);
    }
    hr_log(HR_LOG_INFO, "serving %s on http://%s:%d", o.model, host, hr_server_port(s));
    fprintf(stderr, "hearth: listening on http://%s:%d\n", host, hr_server_port(s));
    int sig = -1;
    const char *dead = NULL;
    struct timespec tick = {.tv_sec = 1};
    while (sig < 0 && !(dead = hr_server_dead(s)))
        sig = sigtimedwait(&set, NULL, &tick);
    if (dead) { /* a lost GPU serves nothing but errors: say so and exit */
        fprintf(stderr, "hearth: %s; exiting\n", dead);
        hr_server_stop(s);
        hr_server_free(s);
        return 1;
    }
    hr_log(HR_LOG_INFO, "signal %d: shutting down", sig);
    hr_server_stop(s);
    hr_server_free(s);
    return 0;
}
