/* hearth bench --draft-model PATH | --spec ngram: speculative decoding side
 * by side with plain decoding, in one run, on real prompts through the
 * engine (docs/speculative.md). Each repeat runs every prompt plainly and
 * then with speculation (interleaved, so both see the same machine), with
 * --clients concurrent requests at a time; figures are medians of the
 * repeats:
 *   decode tokens/s    generated tokens after the first / the time from
 *                      the first token to the last (one client), summed
 *                      over the prompts;
 *   aggregate tokens/s all completion tokens / the wall time of the groups
 *                      (prefill included; what concurrent clients see).
 * The prompt cache is off, so that neither side reuses the other's
 * prefill. Greedy unless --temp is given; every pair of runs must give the
 * same tokens (the run fails otherwise). */
#include "api/api.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "core/timer.h"
#include "kernels/cpu/cpu.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROMPTS 64
#define MAX_CLIENTS 32

typedef struct client {
    hr_session *s;
    const char *msgs;           /* chat messages JSON, or NULL */
    const char *text;           /* raw prompt, or NULL */
    const char *spec;
    int max_tokens, ignore_eos;
    double temp;
    int32_t *tokens;            /* [max_tokens] */
    int n;
    double t_first, t_last;
    int drafted, accepted;
    int rc;
    hr_error err;
} client;

static void *client_run(void *p) {
    client *c = p;
    hr_gen_params gp;
    hr_gen_params_default(&gp);
    gp.messages_json = c->msgs;
    gp.prompt_text = c->text;
    gp.max_tokens = c->max_tokens;
    gp.temperature = (float)c->temp;
    gp.has_seed = 1;
    gp.seed = 1;
    gp.ignore_eos = c->ignore_eos;
    gp.spec = c->spec;
    hr_gen *g = NULL;
    c->n = 0;
    if ((c->rc = hr_gen_submit(&g, c->s, &gp, &c->err)))
        return NULL;
    hr_gen_event ev;
    while ((c->rc = hr_gen_next(g, &ev, &c->err)) == 1) {
        if (ev.finish != HR_GEN_RUNNING) {
            c->drafted = ev.drafted_tokens;
            c->accepted = ev.accepted_tokens;
            continue;
        }
        double now = hr_now();
        if (c->n == 0)
            c->t_first = now;
        c->t_last = now;
        if (c->n < c->max_tokens)
            c->tokens[c->n++] = ev.token;
    }
    hr_gen_free(g);
    return NULL;
}

typedef struct figures {
    double decode_tps, aggregate_tps;
    long tokens, drafted, accepted;
} figures;

/* One round: every prompt, --clients of them at a time, each group run
 * plainly (cl) and then with speculation (sp), so that both sides see the
 * same moments of a shared machine. */
static int round_run(client *cl, client *sp, int n_prompts, int clients, figures f[2],
                     hr_error *err) {
    double dec_tok[2] = {0}, dec_s[2] = {0}, wall[2] = {0};
    f[0] = f[1] = (figures){0};
    for (int i = 0; i < n_prompts; i += clients) {
        int k = n_prompts - i < clients ? n_prompts - i : clients;
        for (int side = 0; side < 2; side++) {
            client *c0 = (side ? sp : cl) + i;
            pthread_t th[MAX_CLIENTS];
            double t0 = hr_now();
            for (int j = 0; j < k; j++)
                pthread_create(&th[j], NULL, client_run, &c0[j]);
            for (int j = 0; j < k; j++)
                pthread_join(th[j], NULL);
            wall[side] += hr_now() - t0;
            for (int j = 0; j < k; j++) {
                client *c = &c0[j];
                if (c->rc < 0) {
                    *err = c->err;
                    return c->rc;
                }
                f[side].tokens += c->n;
                f[side].drafted += c->drafted;
                f[side].accepted += c->accepted;
                if (c->n > 1) {
                    dec_tok[side] += c->n - 1;
                    dec_s[side] += c->t_last - c->t_first;
                }
            }
        }
    }
    for (int side = 0; side < 2; side++) {
        f[side].aggregate_tps = f[side].tokens / wall[side];
        f[side].decode_tps = dec_s[side] > 0 ? dec_tok[side] / dec_s[side] : 0;
    }
    return 0;
}

/* The prompts: one chat message (--chat), each line of --chat-file (a
 * user message, "\n" for a newline), or the whole --prompt-file as one
 * raw prompt. */
static int load_prompts(const char *chat, const char *chat_file, const char *prompt_file,
                        char **buf, char **msgs, int *n, hr_error *err) {
    *n = 0;
    if (prompt_file) {
        size_t len;
        return hr_file_read(prompt_file, buf, &len, err) ? hr_err_wrap(err, "--prompt-file")
                                                          : (*n = 1, 0);
    }
    json_t *lines = json_array();
    if (chat) {
        json_array_append_new(lines, json_string(chat));
    } else if (chat_file) {
        size_t len;
        char *text;
        if (hr_file_read(chat_file, &text, &len, err)) {
            json_decref(lines);
            return hr_err_wrap(err, "--chat-file");
        }
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            char *o = line; /* "\n" escapes become newlines */
            for (char *p = line; *p; p++)
                *o++ = p[0] == '\\' && p[1] == 'n' ? (p++, '\n') : *p;
            *o = 0;
            if (*line)
                json_array_append_new(lines, json_string(line));
        }
        free(text);
    }
    size_t i;
    json_t *v;
    json_array_foreach(lines, i, v) {
        if (*n >= MAX_PROMPTS)
            break;
        json_t *m = json_pack("[{s:s,s:O}]", "role", "user", "content", v);
        msgs[(*n)++] = json_dumps(m, JSON_COMPACT);
        json_decref(m);
    }
    json_decref(lines);
    return *n ? 0 : hr_err(err, HR_EINVAL, "give --chat, --chat-file or --prompt-file");
}

static const char usage[] =
    "usage: hearth bench (--draft-model PATH | --spec ngram) [--model PATH] "
    "[--num-draft-tokens N] (--chat TEXT | --chat-file F | --prompt-file F) [--max-tokens N] "
    "[--clients C] [--repeats R] [--threads T] [--temp T] [--ignore-eos] [--json]";

int hr_cmd_bench_spec(int argc, char **argv) {
    const char *model = NULL, *draft = NULL, *spec = NULL, *chat = NULL, *chat_file = NULL,
               *prompt_file = NULL, *device = "auto";
    long n_draft = 3, max_tokens = 128, clients = 1, repeats = 3, threads = 0;
    double temp = 0;
    int json = 0, ignore_eos = 0;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory (default: the demo model)"},
        {"device", HR_OPT_STR, &device, "where the model runs: auto, cpu, cuda, cuda:N"},
        {"draft-model", HR_OPT_STR, &draft, "draft model (same tokenizer)"},
        {"spec", HR_OPT_STR, &spec, "drafting: ngram (prompt lookup) or draft (default with --draft-model)"},
        {"num-draft-tokens", HR_OPT_INT, &n_draft, "tokens drafted per step (default 3)"},
        {"chat", HR_OPT_STR, &chat, "one user message through the chat template"},
        {"chat-file", HR_OPT_STR, &chat_file, "user messages, one a line (\\n for a newline)"},
        {"prompt-file", HR_OPT_STR, &prompt_file, "one raw prompt, the whole file"},
        {"max-tokens", HR_OPT_INT, &max_tokens, "tokens per request (default 128)"},
        {"clients", HR_OPT_INT, &clients, "concurrent requests (default 1)"},
        {"repeats", HR_OPT_INT, &repeats, "rounds of each side; figures are medians (default 3)"},
        {"threads", HR_OPT_INT, &threads, "compute threads (default: all cores)"},
        {"temp", HR_OPT_FLOAT, &temp, "temperature (default 0: greedy)"},
        {"ignore-eos", HR_OPT_FLAG, &ignore_eos, "generate max-tokens every time"},
        {"json", HR_OPT_FLAG, &json, "print one JSON object"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (max_tokens < 1 || repeats < 1 || clients < 1 || clients > MAX_CLIENTS || threads < 0 ||
        n_draft < 1 || n_draft > HR_SPEC_MAX_K || temp < 0)
        return hr_cli_fail(&(hr_error){.msg = "a numeric flag is out of range (see --help)"});
    hr_llm *llm = NULL;
    hr_session *s = NULL;
    char *msgs[MAX_PROMPTS] = {0}, *raw = NULL;
    client *cl = NULL;
    int n_prompts = 0, n_req = 0, status = 1;
    double *v[4] = {0};
    figures fig[2] = {{0}}, sum[2] = {{0}};
    if ((rc = load_prompts(chat, chat_file, prompt_file, &raw, msgs, &n_prompts, &err)) ||
        (rc = hr_llm_load(&llm, model ? model : hr_cli_default_model(),
                          &(hr_llm_opts){.device = device, .n_threads = (int)threads}, &err)))
        goto done;
    hr_session_opts so = {.n_threads = (int)threads, .max_batch = (int)clients,
                          .prompt_cache = -1, .draft_model = draft, .spec = spec,
                          .num_draft_tokens = (int)n_draft};
    if ((rc = hr_session_new(&s, llm, &so, &err)))
        goto done;
    if (!spec && !draft) {
        rc = hr_err(&err, HR_EINVAL, "give --draft-model PATH or --spec ngram");
        goto done;
    }
    n_req = raw ? (int)clients : n_prompts; /* a raw prompt: one per client */
    if (!raw && n_req < clients)
        n_req = (int)clients;
    cl = calloc((size_t)n_req * 2, sizeof *cl);
    for (int i = 0; i < 4; i++)
        v[i] = calloc((size_t)repeats, sizeof *v[i]);
    if (!cl || !v[0] || !v[1] || !v[2] || !v[3]) {
        rc = hr_err(&err, HR_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < 2 * n_req; i++) {
        cl[i] = (client){.s = s, .msgs = raw ? NULL : msgs[(i % n_req) % n_prompts],
                         .text = raw, .spec = i < n_req ? "off" : NULL,
                         .max_tokens = (int)max_tokens, .ignore_eos = ignore_eos, .temp = temp};
        if (!(cl[i].tokens = malloc((size_t)max_tokens * sizeof *cl[i].tokens))) {
            rc = hr_err(&err, HR_ENOMEM, "out of memory");
            goto done;
        }
    }
    /* warm-up: the weights paged in, one request each way */
    if ((rc = round_run(cl, cl + n_req, 1, 1, fig, &err)))
        goto done;
    for (long r = 0; r < repeats; r++) {
        if ((rc = round_run(cl, cl + n_req, n_req, (int)clients, fig, &err)))
            goto done;
        for (int side = 0; side < 2; side++) {
            v[side * 2][r] = fig[side].decode_tps;
            v[side * 2 + 1][r] = fig[side].aggregate_tps;
            sum[side].drafted += fig[side].drafted;
            sum[side].accepted += fig[side].accepted;
        }
        for (int i = 0; i < n_req; i++)
            if (cl[i].n != cl[n_req + i].n ||
                memcmp(cl[i].tokens, cl[n_req + i].tokens, (size_t)cl[i].n * sizeof(int32_t))) {
                rc = hr_err(&err, HR_EINVAL, "request %d: speculative output differs from "
                            "plain (a bug: please report it)", i);
                goto done;
            }
    }
    double pd = hr_cli_median(v[0], (int)repeats), pa = hr_cli_median(v[1], (int)repeats);
    double sd = hr_cli_median(v[2], (int)repeats), sa = hr_cli_median(v[3], (int)repeats);
    double acc = sum[1].drafted ? (double)sum[1].accepted / sum[1].drafted : 0;
    const char *mode = spec ? spec : "draft";
    hr_session_stats st;
    hr_session_stats_get(s, &st);
    if (json) {
        json_t *o = json_pack("{s:s,s:s?,s:s,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:f}",
                              "model", llm->path, "draft_model", draft, "spec", mode,
                              "num_draft_tokens", (int)n_draft, "threads",
                              st.n_threads, "clients", (int)clients, "requests", n_req,
                              "repeats", (int)repeats,
                              "plain_decode_tokens_per_s", pd, "spec_decode_tokens_per_s", sd,
                              "decode_speedup", pd > 0 ? sd / pd : 0,
                              "plain_aggregate_tokens_per_s", pa,
                              "spec_aggregate_tokens_per_s", sa,
                              "aggregate_speedup", pa > 0 ? sa / pa : 0,
                              "drafted_tokens", (json_int_t)sum[1].drafted, "accepted_tokens",
                              (json_int_t)sum[1].accepted, "acceptance", acc);
        char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        printf("%s\n", t ? t : "{}");
        free(t);
    } else {
        printf("model      %s (%d threads, isa %s)\n", llm->path, st.n_threads,
               hr_cpu()->name);
        printf("spec       %s%s%s, %ld draft tokens; %d requests, %ld at a time, median of %ld\n",
               mode, draft ? " " : "", draft ? draft : "", n_draft, n_req, clients, repeats);
        printf("decode     %8.1f tokens/s plain  %8.1f speculative  (%.2fx)\n", pd, sd,
               pd > 0 ? sd / pd : 0);
        printf("aggregate  %8.1f tokens/s plain  %8.1f speculative  (%.2fx)\n", pa, sa,
               pa > 0 ? sa / pa : 0);
        printf("accepted   %ld of %ld drafted tokens (%.0f%%); output identical\n",
               sum[1].accepted, sum[1].drafted, 100 * acc);
    }
    status = 0;
done:
    if (rc)
        hr_cli_fail(&err);
    for (int i = 0; cl && i < 2 * n_req; i++)
        free(cl[i].tokens);
    free(cl);
    for (int i = 0; i < 4; i++)
        free(v[i]);
    for (int i = 0; i < n_prompts; i++)
        free(msgs[i]);
    free(raw);
    hr_session_free(s);
    hr_llm_free(llm);
    return status;
}
