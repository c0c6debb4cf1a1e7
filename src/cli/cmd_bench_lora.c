/* hearth bench --adapter-rank R: LoRA adapters' cost on decode, side by
 * side in one process (docs/adapters.md):
 *   1 client:  decode tokens/s of the base model, then of the same request
 *              with one rank-R adapter on all seven projections;
 *   C clients: C concurrent requests on the base, then C concurrent
 *              requests with C different adapters (one forward pass per
 *              step, rows grouped by adapter): aggregate decode tokens/s.
 * The adapters are random (peft layout, written to a temporary directory
 * and loaded through the session like any other). Each figure is the
 * median of --repeats; the two of a pair alternate, so a busy moment of a
 * shared machine falls on both. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/timer.h"
#include "api/api.h"
#include "io/safetensors.h"
#include "kernels/cpu/cpu.h"
#include "model/adapter.h"
#include "sample/rng.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: hearth bench --adapter-rank R --model PATH [--clients C] [--prompt-len N] "
    "[--gen-len N] [--threads T] [--repeats R] [--json]";

/* A random peft adapter of rank r on every dense projection of m, in dir. */
static int write_adapter(const hr_model *m, const char *dir, int r, uint64_t seed,
                         hr_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return hr_err(err, HR_EIO, "cannot write %s", path);
    fprintf(f, "{\"peft_type\": \"LORA\", \"r\": %d, \"lora_alpha\": %d, \"target_modules\": "
            "[\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\", \"gate_proj\", \"up_proj\", "
            "\"down_proj\"]}\n", r, 2 * r);
    fclose(f);
    static const char *const PATHS[HR_LORA_SLOTS] = {
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    int L = m->hp.n_layers, n = 0;
    hr_tensor *t = calloc((size_t)L * HR_LORA_SLOTS * 2, sizeof *t);
    char (*names)[96] = calloc((size_t)L * HR_LORA_SLOTS * 2, sizeof *names);
    size_t floats = 0;
    for (int il = 0; il < L; il++)
        for (int s = 0; s < HR_LORA_SLOTS; s++) {
            const hr_tensor *w = hr_adapter_base(m, il, s);
            if (w)
                floats += (size_t)r * (size_t)(w->shape[0] + w->shape[1]);
        }
    float *mem = malloc((floats ? floats : 1) * sizeof *mem), *p = mem;
    int rc = 0;
    if (!t || !names || !mem) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    hr_rng rng;
    hr_rng_seed(&rng, seed);
    for (int il = 0; il < L; il++)
        for (int s = 0; s < HR_LORA_SLOTS; s++) {
            const hr_tensor *w = hr_adapter_base(m, il, s);
            if (!w || (s <= HR_LORA_O && m->hp.layer_linear[il]) ||
                (s > HR_LORA_O && m->hp.layer_moe[il]))
                continue;
            int64_t shp[2][2] = {{r, w->shape[1]}, {w->shape[0], r}};
            for (int ab = 0; ab < 2; ab++) {
                size_t cnt = (size_t)(shp[ab][0] * shp[ab][1]);
                for (size_t i = 0; i < cnt; i++)
                    p[i] = 0.02f * ((float)(hr_rng_next(&rng) % 2001) / 1000.0f - 1.0f);
                snprintf(names[n], sizeof names[n], "base_model.model.model.layers.%d.%s.lora_%c.weight",
                         il, PATHS[s], ab ? 'B' : 'A');
                t[n] = (hr_tensor){.name = names[n], .dtype = HR_DTYPE_F32, .ndim = 2,
                                   .shape = {shp[ab][0], shp[ab][1]}, .data = p,
                                   .nbytes = cnt * sizeof(float)};
                n++;
                p += cnt;
            }
        }
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    rc = hr_st_write(path, t, (size_t)n, NULL, 0, err);
done:
    free(t);
    free(names);
    free(mem);
    return rc;
}

typedef struct client {
    hr_session *s;
    const int32_t *prompt;
    int prompt_len, gen_len;
    const char *adapter;
    double t_first, t_end;
    int n, rc;
    hr_error err;
} client;

static void *client_run(void *arg) {
    client *c = arg;
    hr_gen_params p;
    hr_gen_params_default(&p);
    p.prompt_tokens = c->prompt;
    p.n_prompt_tokens = c->prompt_len;
    p.max_tokens = c->gen_len;
    p.temperature = 0;
    p.ignore_eos = 1;
    p.adapter = c->adapter;
    hr_gen *g = NULL;
    hr_gen_event ev;
    c->n = 0;
    int rc = hr_gen_submit(&g, c->s, &p, &c->err);
    while (!rc && (rc = hr_gen_next(g, &ev, &c->err)) == 1 && ev.finish == HR_GEN_RUNNING) {
        rc = 0;
        c->t_end = hr_now();
        if (c->n++ == 0)
            c->t_first = c->t_end;
    }
    c->rc = rc < 0 ? rc : 0;
    hr_gen_free(g);
    return NULL;
}

/* C concurrent requests (adapters[i] or NULL each): aggregate decode
 * tokens/s from the last first token to the last token. */
static int run_clients(hr_session *s, const int32_t *prompt, int plen, int glen, int C,
                       const char *const *adapters, double *tps, hr_error *err) {
    client cs[16];
    pthread_t th[16];
    for (int i = 0; i < C; i++) {
        cs[i] = (client){.s = s, .prompt = prompt + i, .prompt_len = plen, .gen_len = glen,
                         .adapter = adapters ? adapters[i] : "base"};
        pthread_create(&th[i], NULL, client_run, &cs[i]);
    }
    double first = 0, end = 0;
    int rc = 0;
    for (int i = 0; i < C; i++) {
        pthread_join(th[i], NULL);
        if (cs[i].rc && !rc) {
            rc = cs[i].rc;
            *err = cs[i].err;
        }
        if (!rc && cs[i].n != glen)
            rc = hr_err(err, HR_EIO, "a request ended after %d of %d tokens", cs[i].n, glen);
        first = cs[i].t_first > first ? cs[i].t_first : first;
        end = cs[i].t_end > end ? cs[i].t_end : end;
    }
    *tps = rc ? 0 : C * (glen - 1) / (end - first);
    return rc;
}

int hr_cmd_bench_lora(int argc, char **argv) {
    const char *model = NULL;
    long rank = 16, clients = 4, prompt_len = 32, gen_len = 64, threads = 0, repeats = 3;
    int json = 0;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "base model directory or GGUF; or ORG/NAME[@REV]"},
        {"adapter-rank", HR_OPT_INT, &rank, "rank of the random adapters (default 16)"},
        {"clients", HR_OPT_INT, &clients, "concurrent requests, each its own adapter (default 4)"},
        {"prompt-len", HR_OPT_INT, &prompt_len, "prompt tokens (default 32)"},
        {"gen-len", HR_OPT_INT, &gen_len, "generated tokens per request (default 64)"},
        {"threads", HR_OPT_INT, &threads, "compute threads (default: all cores)"},
        {"repeats", HR_OPT_INT, &repeats, "runs; figures are medians (default 3)"},
        {"json", HR_OPT_FLAG, &json, "print one JSON object"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!model)
        return hr_cli_fail(&(hr_error){.msg = "--model is required (see --help)"});
    if (rank < 1 || rank > HR_LORA_MAX_RANK || clients < 1 || clients > 16 || prompt_len < 1 ||
        gen_len < 2 || repeats < 1 || repeats > 64)
        return hr_cli_fail(&(hr_error){.msg = "--adapter-rank 1..256, --clients 1..16, "
                                              "--gen-len >= 2, --repeats 1..64"});
    char tmp[] = "/tmp/hearth-bench-lora-XXXXXX";
    if (!mkdtemp(tmp))
        return hr_cli_fail(&(hr_error){.msg = "cannot create a temporary directory"});
    hr_llm *llm = NULL;
    hr_session *s = NULL;
    int32_t *prompt = NULL;
    int status = 1, C = (int)clients, R = (int)repeats;
    char names[16][16];
    const char *an[16];
    double r1[2][64], rc_[2][64];
    hr_llm_opts lo = {.n_threads = (int)threads, .device = "cpu"};
    if ((rc = hr_llm_load(&llm, model, &lo, &err)))
        goto done;
    hr_session_opts so = {.n_threads = (int)threads, .max_batch = C,
                          .n_ctx = (int)(prompt_len + gen_len), .prompt_cache = -1};
    if ((rc = hr_session_new(&s, llm, &so, &err)))
        goto done;
    for (int i = 0; i < C; i++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/a%d", tmp, i);
        snprintf(names[i], sizeof names[i], "a%d", i);
        an[i] = names[i];
        if (mkdir(dir, 0755) || (rc = write_adapter(llm->model, dir, (int)rank, 7 + (uint64_t)i, &err)) ||
            (rc = hr_session_adapter_add(s, names[i], dir, 1, &err))) {
            if (!rc)
                rc = hr_err(&err, HR_EIO, "cannot create %s", dir);
            goto done;
        }
    }
    int V = llm->model->hp.n_vocab;
    prompt = malloc((size_t)(prompt_len + C) * sizeof *prompt);
    if (!prompt) {
        rc = hr_err(&err, HR_ENOMEM, "out of memory");
        goto done;
    }
    hr_rng rng;
    hr_rng_seed(&rng, 1);
    for (long i = 0; i < prompt_len + C; i++)
        prompt[i] = (int32_t)(hr_rng_next(&rng) % (uint64_t)V);
    double w;
    if ((rc = run_clients(s, prompt, 8, 2, 1, NULL, &w, &err)) || /* warm-up */
        (rc = run_clients(s, prompt, 8, 2, 1, an, &w, &err)))
        goto done;
    for (int rep = 0; rep < R; rep++)
        if ((rc = run_clients(s, prompt, (int)prompt_len, (int)gen_len, 1, NULL, &r1[0][rep], &err)) ||
            (rc = run_clients(s, prompt, (int)prompt_len, (int)gen_len, 1, an, &r1[1][rep], &err)) ||
            (rc = run_clients(s, prompt, (int)prompt_len, (int)gen_len, C, NULL, &rc_[0][rep], &err)) ||
            (rc = run_clients(s, prompt, (int)prompt_len, (int)gen_len, C, an, &rc_[1][rep], &err)))
            goto done;
    double b1 = hr_cli_median(r1[0], R), a1 = hr_cli_median(r1[1], R);
    double bc = hr_cli_median(rc_[0], R), ac = hr_cli_median(rc_[1], R);
    int n_threads = hr_engine_threads(s->engine);
    if (json) {
        printf("{\"model\":\"%s\",\"threads\":%d,\"isa\":\"%s\",\"rank\":%ld,\"clients\":%d,"
               "\"repeats\":%d,\"decode_base_tps\":%.3f,\"decode_adapter_tps\":%.3f,"
               "\"ratio_1\":%.4f,\"clients_base_tps\":%.3f,\"clients_adapters_tps\":%.3f,"
               "\"ratio_clients\":%.4f}\n", model, n_threads, hr_cpu()->name, rank, C, R, b1,
               a1, a1 / b1, bc, ac, ac / bc);
    } else {
        printf("model      %s (%s, %d threads, isa %s)\n", model,
               llm->model->hp.arch->model_type, n_threads, hr_cpu()->name);
        printf("1 client   base %8.2f tok/s, rank-%ld adapter %8.2f tok/s: %.3fx (median of %d)\n",
               b1, rank, a1, a1 / b1, R);
        printf("%d clients  base %8.2f tok/s, %d adapters    %8.2f tok/s: %.3fx (median of %d)\n",
               C, bc, C, ac, ac / bc, R);
    }
    status = 0;
done:
    if (rc)
        hr_cli_fail(&err);
    free(prompt);
    hr_session_free(s);
    hr_llm_free(llm);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        status = 1;
    return status;
}
