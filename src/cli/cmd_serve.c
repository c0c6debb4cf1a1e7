/* hearth serve: the OpenAI-compatible server, with mlx_lm.server's flags. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "core/fault.h"
#include "core/log.h"
#include "io/hfcache.h"
#include "model/kv.h"
#include "server/server.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: hearth serve [--model PATH | --models A,B,C | --model-dir DIR] [--host H] [--port P] [--temp T] [--top-p P] "
    "[--top-k K] [--min-p P] [--max-tokens N] [--chat-template T] [--chat-template-args JSON] "
    "[--allowed-origins O] [--prefill-step-size N] [--batch N] [--kv-budget GB] [--no-ui] ...";

/* A size: 2GB, 500M, 64K, or bytes. */
static bool parse_size(const char *s, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0)
        return false;
    if (*end == 'G' || *end == 'g')
        v *= 1e9;
    else if (*end == 'M' || *end == 'm')
        v *= 1e6;
    else if (*end == 'K' || *end == 'k')
        v *= 1e3;
    else if (*end)
        return false;
    *out = v;
    return true;
}

/* --models and --served-model-name: comma lists; the models' paths. */
typedef struct pool_args {
    char **specs, **paths, **names;
    int n_models, n_names;
} pool_args;

static int split(const char *list, char ***out, int *n, hr_error *err) {
    int cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    char **v = calloc((size_t)cap, sizeof *v);
    if (!v)
        return hr_err(err, HR_ENOMEM, "out of memory");
    *out = v;
    *n = 0;
    for (const char *p = list;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (!len)
            return hr_err(err, HR_EINVAL, "an empty name in '%s'", list);
        if (!(v[(*n)++] = strndup(p, len)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        if (!c)
            return 0;
        p = c + 1;
    }
}

static int resolve_all(pool_args *pa, hr_error *err) {
    if (!(pa->paths = calloc((size_t)pa->n_models, sizeof *pa->paths)))
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int i = 0; i < pa->n_models; i++) {
        if (!(pa->paths[i] = malloc(HR_HF_PATH_MAX)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        int rc = hr_cli_model_resolve(pa->specs[i], pa->paths[i], HR_HF_PATH_MAX, err);
        if (rc)
            return hr_err_wrap(err, "--models");
    }
    return 0;
}

static void pool_args_free(pool_args *pa) {
    for (int i = 0; pa->specs && i < pa->n_models; i++)
        free(pa->specs[i]);
    for (int i = 0; pa->paths && i < pa->n_models; i++)
        free(pa->paths[i]);
    for (int i = 0; pa->names && i < pa->n_names; i++)
        free(pa->names[i]);
    free(pa->specs);
    free(pa->paths);
    free(pa->names);
}

int hr_cmd_serve(int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *tmpl = NULL, *tmpl_file = NULL,
               *tmpl_args = NULL,
               *origins = "*", *adapter = NULL, *adapters = NULL, *log_level = NULL, *draft = NULL,
               *kv_dtype = NULL, *device = "auto", *spec = NULL, *models = NULL,
               *model_dir = NULL, *served_names = NULL, *pool_size = NULL, *kvq = NULL, *ctk = NULL,
               *ctv = NULL;
    long port = 8080, top_k = -1, max_tokens = -1, prefill = 0, batch = 0, threads = 0,
         ctx = 0, max_body_mb = 16, pc_size = -1, pc_on = 1, kv_bits = 0, kv_group = 64,
         kv_start = 5000, n_draft = 3, kv_res = 0;
    int no_ui = 0, no_warmup = 0, isolate = 0, admin_remote = 0;
    long max_conns = 0, max_requests = 0, engine_fd = -1;
    double timeout = 0, req_timeout = -1, drain_timeout = -1, engine_timeout = 0;
    const char *admin_token = NULL;
    const char *pc_bytes = NULL, *ssd = NULL;
    double ssd_max_gb = 32, ssd_idle = 300;
    double temp = -1, top_p = -1, min_p = -1, kv_gb = 0;
    int allow_private_media = 0;
    const char *media_hosts = NULL;
    double media_mb = HR_MEDIA_DEFAULT_MAX_BYTES / 1048576.0, media_timeout = HR_MEDIA_DEFAULT_TIMEOUT_S;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory (default: the bundled demo model); or ORG/NAME[@REV]"},
        {"models", HR_OPT_STR, &models, "a pool: models A,B,C (paths or names), loaded on first use; requests pick one by \"model\""},
        {"model-dir", HR_OPT_STR, &model_dir, "a pool: every model directory and .gguf file in DIR"},
        {"served-model-name", HR_OPT_STR, &served_names, "names the API uses: N[,N...] for --model (the first is reported), one per model for --models"},
        {"pool-bytes", HR_OPT_STR, &pool_size, "a pool's memory budget (weights + KV + grammar mask cache) above which idle models are evicted, least recently used first (e.g. 8GB; default: no bound)"},
        {"device", HR_OPT_STR, &device, "where the model runs: auto (a GPU when there is one), cpu, cuda, cuda:N"},
        {"host", HR_OPT_STR, &host, "address to listen on (default 127.0.0.1; 0.0.0.0 = LAN; ::1, :: = IPv6, :: with IPv4 too)"},
        {"port", HR_OPT_INT, &port, "port (default 8080)"},
        {"temp", HR_OPT_FLOAT, &temp, "default temperature (default 0, or generation_config.json)"},
        {"top-p", HR_OPT_FLOAT, &top_p, "default top_p (default 1)"},
        {"top-k", HR_OPT_INT, &top_k, "default top_k (default 0 = off)"},
        {"min-p", HR_OPT_FLOAT, &min_p, "default min_p (default 0 = off)"},
        {"max-tokens", HR_OPT_INT, &max_tokens, "default max_tokens (default 512)"},
        {"chat-template", HR_OPT_STR, &tmpl, "chat template overriding the model's: its text, or a file holding it"},
        {"chat-template-file", HR_OPT_STR, &tmpl_file, "file holding the chat template (llama-server's flag)"},
        {"chat-template-args", HR_OPT_STR, &tmpl_args, "JSON object of template arguments"},
        {"allowed-origins", HR_OPT_STR, &origins, "CORS origins (default *)"},
        {"allow-private-media", HR_OPT_FLAG, &allow_private_media, "image_url fetches may reach private, loopback and link-local addresses (docs/images.md)"},
        {"media-allow-host", HR_OPT_STR, &media_hosts, "image_url fetches from these hosts (H[,H...]) skip the address check"},
        {"media-max-mb", HR_OPT_FLOAT, &media_mb, "largest image fetched or sent, in MiB (default 20)"},
        {"media-timeout", HR_OPT_FLOAT, &media_timeout, "seconds an image_url fetch may take, redirects included (default 10)"},
        {"prefill-step-size", HR_OPT_INT, &prefill, "prompt tokens per step (default 512, 2048 on a GPU)"},
        {"batch", HR_OPT_INT, &batch, "concurrent sequences (default 8)"},
        {"kv-budget", HR_OPT_FLOAT, &kv_gb, "KV cache budget in GB (default: automatic)"},
        {"kv-dtype", HR_OPT_STR, &kv_dtype, "KV cache: auto (f16 for GGUF, else f32), f32, f16, bf16"},
        {"cache-type-k", HR_OPT_STR, &ctk, "K cache type as llama.cpp: f32, f16, bf16, q8_0, q4_0 (default: --kv-dtype)"},
        {"cache-type-v", HR_OPT_STR, &ctv, "V cache type as llama.cpp: f32, f16, bf16, q8_0, q4_0 (default: --kv-dtype)"},
        {"kv-quant", HR_OPT_STR, &kvq, "TurboQuant KV cache: turbo, turbo:B or turbo:K_BITS,V_BITS (bits 2, 2.5, 3, 3.5, 4; default off)"},
        {"kv-residual", HR_OPT_INT, &kv_res, "with a quantized KV cache: a token reads the keys of its window of N positions (a multiple of 32) at full precision (default 0: off; docs/kv-quant.md)"},
        {"kv-bits", HR_OPT_INT, &kv_bits, "quantize the KV cache to 2, 3, 4, 6 or 8 bits (mlx-lm's affine KV; default off)"},
        {"kv-group-size", HR_OPT_INT, &kv_group, "group size of the quantized KV cache (default 64)"},
        {"quantized-kv-start", HR_OPT_INT, &kv_start, "with --kv-bits: a sequence's KV converts to it after the step that passes this many tokens (0: quantized from the first token; default 5000)"},
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
        {"no-warmup", HR_OPT_FLAG, &no_warmup, "do not run one token through a model when it loads (the first request pays its first touches)"},
        {"log-level", HR_OPT_STR, &log_level, "DEBUG, INFO, WARNING, ERROR or CRITICAL"},
        {"adapter-path", HR_OPT_STR, &adapter, "LoRA adapter (peft or mlx-lm) applied to requests that name none"},
        {"adapters", HR_OPT_STR, &adapters, "LoRA adapters requests may name: name=DIR,name=DIR (loaded on first use)"},
        {"draft-model", HR_OPT_STR, &draft, "draft model for speculative decoding (same tokenizer)"},
        {"num-draft-tokens", HR_OPT_INT, &n_draft, "tokens drafted per step (default 3; requests: num_draft_tokens)"},
        {"spec", HR_OPT_STR, &spec, "requests' default drafting: off, ngram (prompt lookup), draft (default with --draft-model)"},
        {"max-connections", HR_OPT_INT, &max_conns, "open connections at most (default 4096)"},
        {"timeout", HR_OPT_FLOAT, &timeout, "seconds for a whole request to arrive, and for an idle connection (default 30)"},
        {"max-requests", HR_OPT_INT, &max_requests, "generation requests running or queued at most; beyond, 429 (default 256)"},
        {"request-timeout", HR_OPT_FLOAT, &req_timeout, "seconds a generation may run, 0 = no limit (default 600)"},
        {"drain-timeout", HR_OPT_FLOAT, &drain_timeout, "seconds a drain (SIGTERM, POST /admin/drain) waits for running requests (default 30)"},
        {"admin-token", HR_OPT_STR, &admin_token, "Bearer token the admin routes (/admin/*) require"},
        {"admin-remote", HR_OPT_FLAG, &admin_remote, "admin routes answer clients off loopback too"},
        {"isolate", HR_OPT_FLAG, &isolate, "run the engine in a child process, restarted when it dies"},
        {"engine-timeout", HR_OPT_FLOAT, &engine_timeout, "--isolate: seconds the engine process may go silent before it is killed and restarted (default 10)"},
        {"engine-fd", HR_OPT_INT, &engine_fd, NULL},
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
    if (!(media_mb > 0 && media_mb <= 1024) || !(media_timeout > 0 && media_timeout <= 3600))
        return hr_cli_fail(&(hr_error){.msg = "--media-max-mb must be in (0, 1024], "
                                              "--media-timeout in (0, 3600]"});
    if (port < 0 || port > 65535 || prefill < 0 || batch < 0 || kv_gb < 0 || threads < 0 ||
        ctx < 0 || max_body_mb < 1 || (top_p > 1) || (min_p > 1) || ssd_max_gb <= 0 ||
        ssd_idle < 0 || max_conns < 0 || max_conns > 1000000 || timeout < 0 ||
        max_requests < 0 || max_requests > 100000 || engine_timeout < 0)
        return hr_cli_fail(&(hr_error){.msg = "a numeric flag is out of range (see --help)"});
    if ((rc = hr_kv_quant_check(kv_bits, kv_group, kv_start, &err)))
        return hr_cli_fail(&err);
    /* prompt cache bound, in KV blocks (resolved against the model by the server) */
    double pc_b = 0, pool_b = 0;
    if (pc_bytes && !parse_size(pc_bytes, &pc_b))
        return hr_cli_fail(&(hr_error){.msg = "--prompt-cache-bytes wants a size like 2GB or 500M"});
    if (pool_size && !parse_size(pool_size, &pool_b))
        return hr_cli_fail(&(hr_error){.msg = "--pool-bytes wants a size like 8GB or 500M"});
    /* the pool */
    pool_args pa = {0};
    if (!!model + !!models + !!model_dir > 1)
        return hr_cli_fail(&(hr_error){.msg = "give one of --model, --models, --model-dir"});
    if ((models || model_dir) && (draft || ssd || adapter || adapters)) {
        hr_err(&err, HR_EUNSUPPORTED, "not supported yet: %s with a pool of models (--models, "
               "--model-dir)", draft ? "--draft-model" : ssd ? "--ssd-cache" : "LoRA adapters");
        return hr_cli_fail(&err);
    }
    if (pool_size && !models && !model_dir)
        return hr_cli_fail(&(hr_error){.msg = "--pool-bytes bounds a pool: give --models or --model-dir"});
    if (served_names && model_dir)
        return hr_cli_fail(&(hr_error){.msg = "--served-model-name: a --model-dir's models are named by their files"});
    if ((models && (rc = split(models, &pa.specs, &pa.n_models, &err))) ||
        (served_names && (rc = split(served_names, &pa.names, &pa.n_names, &err))) ||
        (models && (rc = resolve_all(&pa, &err)))) {
        pool_args_free(&pa);
        return hr_cli_fail(&err);
    }
    /* --chat-template: mlx_lm.server's text, or (as llama-server's
     * --chat-template-file) a file that holds it */
    char *tmpl_text = NULL;
    if (tmpl && tmpl_file)
        return hr_cli_fail(&(hr_error){.msg = "give --chat-template or --chat-template-file, not both"});
    if (tmpl && hr_file_exists(tmpl))
        tmpl_file = tmpl;
    if (tmpl_file) {
        if ((rc = hr_file_read(tmpl_file, &tmpl_text, NULL, &err)))
            return hr_cli_fail(&err);
        tmpl = tmpl_text;
    }
    hr_server_opts o = {
        .model = model ? model : hr_cli_default_model(), .device = device,
        .models = (const char *const *)pa.paths, .model_specs = (const char *const *)pa.specs,
        .n_models = pa.n_models, .model_dir = model_dir,
        .served_names = (const char *const *)pa.names, .n_served_names = pa.n_names,
        .pool_bytes = (size_t)pool_b, .host = host, .port = (int)port,
        .temp = temp, .top_p = top_p, .min_p = min_p, .top_k = (int)top_k,
        .max_tokens = (int)max_tokens, .chat_template = tmpl, .chat_template_args = tmpl_args,
        .allowed_origins = origins, .max_body = (size_t)max_body_mb << 20,
        .prefill_step = (int)prefill, .batch = (int)batch,
        .kv_bytes = (size_t)(kv_gb * 1e9), .kv_dtype = kv_dtype, .cache_type_k = ctk,
        .cache_type_v = ctv, .kv_bits = (int)kv_bits, .kv_quant = kvq,
        .kv_start = (int)kv_start, .kv_residual = (int)kv_res,
        .kv_group = (int)kv_group, .n_threads = (int)threads,
        .n_ctx = (int)ctx,
        .cache_blocks = pc_on ? 0 : -1, .cache_size = pc_size > 0 ? (int)pc_size : 0,
        .cache_bytes = (size_t)pc_b, .ssd_cache = ssd,
        .ssd_cache_max = (size_t)(ssd_max_gb * 1e9), .ssd_demote_idle = ssd_idle,
        .no_ui = no_ui, .no_warmup = no_warmup, .draft_model = draft, .spec = spec, .num_draft_tokens = (int)n_draft,
        .max_connections = (int)max_conns, .timeout = timeout, .max_requests = (int)max_requests,
        .request_timeout = req_timeout, .drain_timeout = drain_timeout,
        .admin_token = admin_token, .admin_remote = admin_remote, .isolate = isolate,
        .engine_timeout = engine_timeout,
        .engine_fd = (int)engine_fd,
        .adapter_path = adapter, .adapters = adapters,
        .media = {.max_bytes = (size_t)(media_mb * 1048576.0), .timeout_s = media_timeout,
                  .allow_private = allow_private_media, .allow_hosts = media_hosts},
    };
#ifdef M_MMAP_THRESHOLD
    /* A server runs for months: blocks of 4 MiB and more (a costly grammar's
     * automaton, a long prompt's buffers) are mapped and go back to the
     * system when freed. glibc's default raises this threshold after each
     * such block is freed, up to 32 MiB, and then keeps them in its arenas:
     * RSS grew from 35 MB to a plateau near 195 MB in the soak
     * (docs/operations.md#soak). MALLOC_MMAP_THRESHOLD_ still overrides. */
    if (!getenv("MALLOC_MMAP_THRESHOLD_"))
        mallopt(M_MMAP_THRESHOLD, 4 << 20);
#endif
    if (engine_fd >= 0) { /* --isolate's engine child: the parent's requests on the fd */
        signal(SIGPIPE, SIG_IGN);
        hr_server *s = NULL;
        if ((rc = hr_server_new(&s, &o, &err))) {
            hr_server_child_fail((int)engine_fd, err.msg);
            return hr_cli_fail(&err);
        }
        rc = hr_server_serve_parent(s);
        hr_server_free(s);
        return rc;
    }
    /* --isolate: the child is this binary again, `serve` with these flags */
    char **child_argv = NULL;
    if (isolate) {
        if (!(child_argv = calloc((size_t)argc + 3, sizeof *child_argv)))
            return hr_cli_fail(&(hr_error){.msg = "out of memory"});
        child_argv[0] = "hearth";
        child_argv[1] = "serve";
        for (int i = 0; i < argc; i++)
            child_argv[i + 2] = argv[i];
        o.child_argv = child_argv;
    }
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
        free(tmpl_text);
        pool_args_free(&pa);
        free(child_argv);
        return hr_cli_fail(&err);
    }
    hr_fault_arm_env(); /* HEARTH_FAULT: counted from here, the load excepted */
    /* an IPv6 address in a URL goes in brackets */
    const char *lb = strchr(host, ':') && host[0] != '[' ? "[" : "";
    const char *rb = lb[0] ? "]" : "";
    hr_log(HR_LOG_INFO, "serving %s on http://%s%s%s:%d", o.model, lb, host, rb,
           hr_server_port(s));
    fprintf(stderr, "hearth: listening on http://%s%s%s:%d\n", lb, host, rb, hr_server_port(s));
    int sig = -1;
    const char *dead = NULL;
    struct timespec tick = {.tv_nsec = 100000000L};
    while (sig < 0 && !(dead = hr_server_dead(s)) && !hr_server_draining(s))
        sig = sigtimedwait(&set, NULL, &tick);
    if (dead) { /* a lost GPU serves nothing but errors: say so and exit */
        fprintf(stderr, "hearth: %s; exiting\n", dead);
        hr_server_stop(s);
        hr_server_free(s);
        free(tmpl_text);
        pool_args_free(&pa);
        free(child_argv);
        return 1;
    }
    if (sig == SIGTERM || sig < 0) { /* SIGTERM or POST /admin/drain: finish, then exit */
        hr_log(HR_LOG_INFO, "%s: draining", sig < 0 ? "POST /admin/drain" : "SIGTERM");
        hr_server_drain(s);
    } else {
        hr_log(HR_LOG_INFO, "signal %d: shutting down", sig);
    }
    hr_server_stop(s);
    hr_server_free(s);
    free(tmpl_text);
    pool_args_free(&pa);
    free(child_argv);
    return 0;
}
