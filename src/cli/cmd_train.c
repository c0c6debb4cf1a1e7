/* hearth train: LoRA fine-tuning with mlx_lm.lora's data, flags and
 * adapter files (docs/training.md). The loop is mlx-lm's `train`: batches
 * from iterate_batches' order (train/data.h), one optimizer step per
 * batch on its loss (train/loss.h: SFT's mean cross-entropy, DPO, ORPO
 * on preference pairs), validation at the first
 * step, every --steps-per-eval and the last, checkpoints every
 * --save-every, the adapter written at the end. */
#include "api/api.h"
#include "chat/messages.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "core/timer.h"
#include "sample/rng.h"
#include "train/backprop.h"
#include "train/config.h"
#include "train/data.h"
#include "train/lora_params.h"
#include "train/loss.h"
#include "train/state.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

static const char usage[] =
    "usage: hearth train --model BASE --data DIR --out ADAPTER_DIR [-c CONFIG] [--iters N] "
    "[--batch-size N] [--learning-rate LR] [--num-layers N] [--lora-rank R] [--lora-scale S] "
    "[--max-seq-length N] [--mask-prompt] [--val-batches N] [--steps-per-report N] "
    "[--steps-per-eval N] [--save-every N] [--resume-adapter-file FILE] [--seed N] "
    "[--optimizer adam|adamw] [--loss sft|dpo|orpo] [--beta B] [--grad-accumulation-steps N] "
    "[--grad-checkpoint] [--threads T]";

/* ---- text through the model's template and tokenizer ------------------------------- */

static int render(void *ctx, const json_t *msgs, const json_t *tools, bool add_gen,
                  char **out, hr_error *err) {
    return hr__llm_render(ctx, msgs, tools, NULL, add_gen, out, err);
}

static int encode(void *ctx, const char *text, size_t len, bool add_special, hr_tokens *out,
                  hr_error *err) {
    const hr_llm *m = ctx;
    return hr_tokenizer_encode(m->tok, text, len, add_special ? HR_TOK_ADD_SPECIAL : 0, out,
                               err);
}

/* ---- batches -------------------------------------------------------------------------- */

typedef struct run {
    hr_train_cfg c;
    hr_llm *llm;
    hr_train_data train, valid;
    int *t_order, *v_order, t_batches, v_batches;
    hr_lora_set *ls;
    hr_bp *bp;
    int32_t *btok;  /* a batch's tokens, end to end */
    int *bstart, *boff;
    double *t_ref, *v_ref; /* DPO: each example's log-prob under the base (NAN: not yet) */
    double *bref;
    hr_train_state st; /* iterations, updates, the batch order (train/state.h) */
} run;

/* sequences a batch: batch_size examples or pairs */
static int width(const run *r) { return (int)r->c.batch_size * (r->train.pairs ? 2 : 1); }

/* batch k of order (examples order[k*w ..]), each cut to max_seq_length */
static hr_bp_batch make_batch(run *r, const hr_train_data *d, const int *order, int k) {
    int bs = width(r), n = 0;
    for (int i = 0; i < bs; i++) {
        int e = order[(size_t)k * bs + i];
        size_t len = d->start[e + 1] - d->start[e];
        if (len > (size_t)r->c.max_seq_length)
            len = (size_t)r->c.max_seq_length;
        r->bstart[i] = n;
        r->boff[i] = d->offset[e];
        memcpy(r->btok + n, d->tok + d->start[e], len * sizeof *r->btok);
        n += (int)len;
    }
    r->bstart[bs] = n;
    return (hr_bp_batch){.n_seqs = bs, .tok = r->btok, .start = r->bstart, .offset = r->boff};
}

/* the most input tokens of any batch */
static int max_batch_tokens(const run *r, const hr_train_data *d, const int *order, int nb) {
    int best = 0, bs = width(r);
    for (int k = 0; k < nb; k++) {
        int n = 0;
        for (int i = 0; i < bs; i++) {
            int e = order[(size_t)k * bs + i];
            size_t len = d->start[e + 1] - d->start[e];
            n += (int)(len < (size_t)r->c.max_seq_length ? len : (size_t)r->c.max_seq_length);
        }
        best = n > best ? n : best;
    }
    return best;
}

/* one step of the run's loss on batch k of d (grad: into the set's g);
 * DPO's reference log-probs computed once per example and kept in ref */
static int loss_step(run *r, const hr_train_data *d, const int *order, double *ref, int k,
                     bool grad, double *loss, int *nt, hr_error *err) {
    hr_bp_batch b = make_batch(r, d, order, k);
    const double *rp = NULL;
    if (hr_loss_needs_ref(r->c.loss)) {
        const int *e = order + (size_t)k * b.n_seqs;
        bool known = true;
        for (int i = 0; i < b.n_seqs; i++)
            known &= !isnan(ref[e[i]]);
        if (!known) {
            int *cnt = (int *)r->boff + b.n_seqs; /* boff has room for 2 widths */
            int rc = hr_bp_forward(r->bp, &b, false, r->bref, cnt, err);
            if (rc)
                return rc;
            for (int i = 0; i < b.n_seqs; i++)
                ref[e[i]] = r->bref[i];
        }
        for (int i = 0; i < b.n_seqs; i++)
            r->bref[i] = ref[e[i]];
        rp = r->bref;
    }
    return hr_loss_step(r->bp, &b, r->c.loss, r->c.beta, rp, grad, loss, nt, err);
}

static void shuffle(int *v, int n, hr_rng *rng) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(hr_rng_next(rng) % (uint64_t)(i + 1));
        int t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/* the mean loss over the first val_batches batches (-1: all) of the
 * validation set, in one fixed shuffled order */
static int evaluate(run *r, double *out, hr_error *err) {
    int nb = r->v_batches;
    if (r->c.val_batches >= 0 && r->c.val_batches < nb)
        nb = (int)r->c.val_batches;
    int *perm = malloc((size_t)(r->v_batches ? r->v_batches : 1) * sizeof *perm);
    if (!perm)
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int i = 0; i < r->v_batches; i++)
        perm[i] = i;
    hr_rng rng;
    hr_rng_seed(&rng, (uint64_t)r->c.seed + 1);
    shuffle(perm, r->v_batches, &rng);
    double sum = 0;
    long n = 0;
    int rc = 0;
    for (int k = 0; k < nb && !rc; k++) {
        double loss;
        int nt;
        if (!(rc = loss_step(r, &r->valid, r->v_order, r->v_ref, perm[k], false, &loss, &nt,
                             err))) {
            /* SFT: the mean over every target; pairs: over the batches */
            int wgt = r->c.loss == HR_LOSS_SFT ? nt : 1;
            sum += loss * wgt;
            n += wgt;
        }
    }
    free(perm);
    *out = n ? sum / n : NAN;
    return rc;
}

static double peak_gb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1048576.0; /* KiB -> GB (GiB) */
}

/* the adapter as out/name, and the training state beside it */
static int save(run *r, const char *name, hr_error *err) {
    char p[4096], sp[4200];
    if (hr_path_join(p, sizeof p, r->c.out, name))
        return hr_err(err, HR_EINVAL, "--out path too long");
    int rc = hr_lora_set_save(r->ls, p, err);
    if (!rc && !hr_train_state_path(sp, sizeof sp, p))
        rc = hr_train_state_save(sp, r->ls, &r->st, err);
    return rc;
}

/* Ctrl-C (SIGINT) or SIGTERM: the step in progress finishes, the adapter
 * is saved, the run stops with status 1 and one line saying so */
static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

/* ---- the loop ---------------------------------------------------------------------------- */

static int train(run *r, hr_error *err) {
    const hr_train_cfg *c = &r->c;
    hr_train_state *S = &r->st;
    hr_adam opt = {.b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f,
                   .wd = c->adamw ? (float)c->weight_decay : 0.0f};
    opt.lr = hr_sched_lr(&c->sched, S->updates > 0 ? S->updates - 1 : 0);
    double losses = 0, t0 = hr_now(), train_time = 0;
    long tokens = 0, trained = 0, first = S->iter + 1;
    int steps = 0, rc = 0;
    long it;
    for (it = first; it <= c->iters && !rc && !g_stop; it++) {
        if (r->v_batches &&
            (it == first || it % c->steps_per_eval == 0 || it == c->iters)) {
            double vt = hr_now(), vl = NAN;
            if ((rc = evaluate(r, &vl, err)))
                break;
            printf("Iter %ld: Val loss %.3f, Val took %.3fs\n", it, vl, hr_now() - vt);
            fflush(stdout);
        }
        if (S->pos == r->t_batches) { /* a new pass over the batches */
            for (int i = 0; i < r->t_batches; i++)
                S->perm[i] = i;
            shuffle(S->perm, r->t_batches, &S->rng);
            S->pos = 0;
        }
        double st = hr_now();
        double loss;
        int nt;
        /* gradients add up over grad_accum iterations (mlx-lm's trainer:
         * their sum / grad_accum, then one update) */
        if ((rc = loss_step(r, &r->train, r->t_order, r->t_ref, S->perm[S->pos++], true,
                            &loss, &nt, err)))
            break;
        S->iter = it;
        if (it % c->grad_accum == 0) {
            if (c->grad_accum > 1)
                hr_lora_set_div_grad(r->ls, (float)c->grad_accum);
            opt.lr = hr_sched_lr(&c->sched, S->updates);
            hr_lora_set_adam(r->ls, &opt);
            S->updates++;
            hr_lora_set_zero_grad(r->ls);
        }
        train_time += hr_now() - st;
        losses += loss;
        tokens += nt;
        steps++;
        if (it % c->steps_per_report == 0 || it == c->iters) {
            trained += tokens;
            printf("Iter %ld: Train loss %.3f, Learning Rate %.3e, It/sec %.3f, Tokens/sec "
                   "%.3f, Trained Tokens %ld, Peak mem %.3f GB\n", it, losses / steps,
                   opt.lr, steps / train_time, tokens / train_time, trained, peak_gb());
            fflush(stdout);
            losses = 0;
            tokens = 0;
            steps = 0;
            train_time = 0;
        }
        if (it % c->save_every == 0) {
            char name[64];
            snprintf(name, sizeof name, "%07ld_adapters.safetensors", it);
            if ((rc = save(r, "adapters.safetensors", err)) || (rc = save(r, name, err)))
                break;
            printf("Iter %ld: Saved adapter weights to %s/adapters.safetensors and %s/%s.\n",
                   it, c->out, c->out, name);
        }
    }
    if (!rc && !(rc = save(r, "adapters.safetensors", err)))
        printf("Saved %s weights to %s/adapters.safetensors (%.1f s).\n",
               g_stop ? "the interrupted run's" : "final", c->out, hr_now() - t0);
    if (!rc && g_stop)
        rc = hr_err(err, HR_ECANCELLED, "interrupted after step %ld; the adapter is saved "
                    "(--resume-adapter-file %s/adapters.safetensors continues from it)",
                    S->iter, c->out);
    return rc;
}

/* ---- options: defaults < -c file < flags ------------------------------------------------ */

#define UNSET_L (-0x7fffffffL)

static int cfg_args(hr_train_cfg *c, int argc, char **argv, hr_error *err) {
    const char *model = NULL, *data = NULL, *out = NULL, *resume = NULL, *config = NULL,
               *optimizer = NULL, *loss = NULL;
    long iters = UNSET_L, bs = UNSET_L, nl = UNSET_L, rank = UNSET_L, msl = UNSET_L,
         vb = UNSET_L, spr = UNSET_L, spe = UNSET_L, se = UNSET_L, seed = UNSET_L, threads = 0,
         ga = UNSET_L;
    double lr = NAN, scale = NAN, beta = NAN;
    int mask = 0, ckpt = 0;
    const hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "base model directory or .gguf file; or ORG/NAME[@REV]"},
        {"data", HR_OPT_STR, &data, "directory with train.jsonl and valid.jsonl"},
        {"out", HR_OPT_STR, &out, "adapter directory to write (default: adapters)"},
        {"adapter-path", HR_OPT_STR, &out, "the same as --out (mlx_lm.lora's name)"},
        {"config", HR_OPT_STR, &config, "a YAML (mlx-lm's subset) or JSON file of options; flags win"},
        {"iters", HR_OPT_INT, &iters, "optimizer steps (default 1000)"},
        {"batch-size", HR_OPT_INT, &bs, "sequences per step (default 4)"},
        {"learning-rate", HR_OPT_FLOAT, &lr, "Adam learning rate (default 1e-5)"},
        {"num-layers", HR_OPT_INT, &nl, "adapt the last N layers, -1 all (default 16)"},
        {"lora-rank", HR_OPT_INT, &rank, "LoRA rank (default 8)"},
        {"lora-scale", HR_OPT_FLOAT, &scale, "LoRA scale (default 20)"},
        {"max-seq-length", HR_OPT_INT, &msl, "cut longer sequences (default 2048)"},
        {"mask-prompt", HR_OPT_FLAG, &mask, "no loss on the prompt (chat and completion data)"},
        {"val-batches", HR_OPT_INT, &vb, "validation batches, -1 all (default 25)"},
        {"steps-per-report", HR_OPT_INT, &spr, "steps between loss reports (default 10)"},
        {"steps-per-eval", HR_OPT_INT, &spe, "steps between validations (default 200)"},
        {"save-every", HR_OPT_INT, &se, "steps between checkpoints (default 100)"},
        {"resume-adapter-file", HR_OPT_STR, &resume, "start from these adapters.safetensors weights"},
        {"seed", HR_OPT_INT, &seed, "the seed of the LoRA init and the batch order (default 0)"},
        {"optimizer", HR_OPT_STR, &optimizer, "adam (default, mlx-lm's) or adamw (weight decay 0.01)"},
        {"grad-accumulation-steps", HR_OPT_INT, &ga, "batches per optimizer update (default 1)"},
        {"loss", HR_OPT_STR, &loss, "sft (default), dpo or orpo (preference data)"},
        {"beta", HR_OPT_FLOAT, &beta, "DPO's beta, ORPO's lambda (default 0.1)"},
        {"grad-checkpoint", HR_OPT_FLAG, &ckpt, "keep only each layer's input; recompute in the backward"},
        {"threads", HR_OPT_INT, &threads, "compute threads (default: all cores)"},
    };
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, err);
    if (rc)
        return rc;
    if (config) {
        char *text;
        size_t len;
        if ((rc = hr_file_read(config, &text, &len, err)))
            return rc;
        rc = hr_train_cfg_parse(c, config, text, len, err);
        free(text);
        if (rc)
            return rc;
    }
    c->model = model ? model : c->model;
    c->data = data ? data : c->data;
    c->out = out ? out : c->out ? c->out : "adapters";
    c->resume = resume ? resume : c->resume;
    long *dst[] = {&c->iters, &c->batch_size, &c->num_layers, &c->rank, &c->max_seq_length,
                   &c->val_batches, &c->steps_per_report, &c->steps_per_eval, &c->save_every,
                   &c->seed, &c->grad_accum};
    long src[] = {iters, bs, nl, rank, msl, vb, spr, spe, se, seed, ga};
    for (size_t i = 0; i < sizeof src / sizeof *src; i++)
        if (src[i] != UNSET_L)
            *dst[i] = src[i];
    if (!isnan(lr))
        c->learning_rate = lr;
    if (!isnan(scale))
        c->scale = scale;
    c->mask_prompt |= mask;
    c->grad_checkpoint |= ckpt;
    c->threads = threads;
    if (optimizer && strcmp(optimizer, "adam") && strcmp(optimizer, "adamw"))
        return hr_err(err, HR_EINVAL, "--optimizer %s: adam or adamw", optimizer);
    if (optimizer)
        c->adamw = !strcmp(optimizer, "adamw");
    if (loss && hr_loss_parse(loss) < 0)
        return hr_err(err, HR_EINVAL, "--loss %s: sft, dpo or orpo", loss);
    if (loss)
        c->loss = hr_loss_parse(loss);
    if (!isnan(beta))
        c->beta = beta;
    if (!(c->beta > 0) || !isfinite(c->beta))
        return hr_err(err, HR_EINVAL, "--beta %g: a positive number", c->beta);
    if (!c->model || !c->data)
        return hr_err(err, HR_EINVAL, "--model and --data are required (see --help)");
    if (c->iters < 1 || c->batch_size < 1 || c->max_seq_length < 2 || c->steps_per_report < 1 ||
        c->steps_per_eval < 1 || c->save_every < 1 || c->val_batches < -1 || threads < 0 ||
        !(c->learning_rate >= 0) || c->grad_accum < 1)
        return hr_err(err, HR_EINVAL, "need --iters, --batch-size, --steps-per-report, "
                      "--steps-per-eval, --save-every, --grad-accumulation-steps >= 1, "
                      "--max-seq-length >= 2, --val-batches >= -1, --learning-rate >= 0");
    if (!c->has_sched) /* mlx-lm: lr_schedule, when given, replaces learning_rate */
        hr_sched_constant(&c->sched, c->learning_rate);
    return 0;
}

/* ---- setup ------------------------------------------------------------------------------- */

static int load_set(run *r, const char *name, hr_train_data *d, bool required, hr_error *err) {
    char p[4096];
    if (hr_path_join(p, sizeof p, r->c.data, name))
        return hr_err(err, HR_EINVAL, "--data path too long");
    if (!hr_file_exists(p))
        return required ? hr_err(err, HR_ENOTFOUND, "%s: not found (--data is a directory "
                                 "with train.jsonl and valid.jsonl)", p) : 0;
    hr_text_fns f = {.ctx = r->llm, .render = render, .encode = encode,
                     .eos = hr_tokenizer_eos(r->llm->tok)};
    return hr_train_data_load(d, p, &f, r->c.mask_prompt, err);
}

static int setup(run *r, hr_error *err) {
    hr_train_cfg *c = &r->c;
    hr_llm_opts lo = {.n_threads = (int)c->threads, .device = "cpu", .quant_act = "f32"};
    int rc;
    if ((rc = hr_llm_load(&r->llm, c->model, &lo, err)))
        return rc;
    if (!r->llm->tok)
        return hr_err(err, HR_EUNSUPPORTED, "%s: the model has no tokenizer (%s)", c->model,
                      r->llm->tok_err);
    if ((rc = load_set(r, "train.jsonl", &r->train, true, err)) ||
        (rc = load_set(r, "valid.jsonl", &r->valid, true, err)) ||
        (rc = hr_train_batches(&r->train, (int)c->batch_size, &r->t_order, &r->t_batches,
                               err)))
        return rc;
    if (c->val_batches != 0 &&
        (rc = hr_train_batches(&r->valid, (int)c->batch_size, &r->v_order, &r->v_batches,
                               err)))
        return hr_err_wrap(err, "valid.jsonl");
    bool pairs = hr_loss_pairs(c->loss);
    if (r->train.pairs != pairs || r->valid.pairs != pairs)
        return hr_err(err, HR_EINVAL, pairs ? "--loss %s needs preference data: lines of "
                      "{\"prompt\", \"chosen\", \"rejected\"} in train.jsonl and valid.jsonl"
                      : "preference data ({\"prompt\", \"chosen\", \"rejected\"}) needs "
                      "--loss dpo or orpo (--loss %s)", hr_loss_name(c->loss));
    hr_lora_cfg lc = {.rank = (int)c->rank, .scale = (float)c->scale,
                      .num_layers = (int)c->num_layers};
    memcpy(lc.keys, c->keys, sizeof lc.keys);
    if ((rc = hr_lora_set_new(&r->ls, r->llm->model, &lc, (uint64_t)c->seed, err)))
        return rc;
    if (c->resume && (rc = hr_lora_set_load(r->ls, c->resume, err)))
        return rc;
    r->st = (hr_train_state){.n_batches = r->t_batches, .pos = r->t_batches,
                             .perm = malloc((size_t)r->t_batches * sizeof(int))};
    if (!r->st.perm)
        return hr_err(err, HR_ENOMEM, "out of memory");
    hr_rng_seed(&r->st.rng, (uint64_t)c->seed);
    char sp[4200];
    if (c->resume && !hr_train_state_path(sp, sizeof sp, c->resume) && hr_file_exists(sp)) {
        if ((rc = hr_train_state_load(sp, r->ls, &r->st, err)))
            return rc;
        printf("Resuming after iteration %ld (%ld optimizer updates) from %s\n", r->st.iter,
               r->st.updates, sp);
    }
    int mt = max_batch_tokens(r, &r->train, r->t_order, r->t_batches);
    int mv = max_batch_tokens(r, &r->valid, r->v_order, r->v_batches);
    mt = mv > mt ? mv : mt;
    size_t w = (size_t)width(r);
    r->btok = malloc((size_t)mt * sizeof *r->btok);
    r->bstart = malloc((w + 1) * sizeof *r->bstart);
    r->boff = malloc(2 * w * sizeof *r->boff);
    r->bref = malloc(w * sizeof *r->bref);
    r->t_ref = malloc((r->train.n + 1) * sizeof *r->t_ref);
    r->v_ref = malloc((r->valid.n + 1) * sizeof *r->v_ref);
    if (!r->btok || !r->bstart || !r->boff || !r->bref || !r->t_ref || !r->v_ref)
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (size_t i = 0; i < r->train.n; i++)
        r->t_ref[i] = NAN;
    for (size_t i = 0; i < r->valid.n; i++)
        r->v_ref[i] = NAN;
    if ((rc = hr_bp_new(&r->bp, r->ls, mt, (int)c->max_seq_length, (int)c->threads,
                        c->grad_checkpoint, err)))
        return rc;
    if (mkdir(c->out, 0755) && !hr_dir_exists(c->out))
        return hr_err(err, HR_EIO, "%s: cannot create the adapter directory", c->out);
    char p[4096];
    if (hr_path_join(p, sizeof p, c->out, "adapter_config.json"))
        return hr_err(err, HR_EINVAL, "--out path too long");
    json_t *args = hr_train_cfg_json(c);
    rc = args ? hr_lora_set_write_config(r->ls, p, args, err)
              : hr_err(err, HR_ENOMEM, "out of memory");
    json_decref(args);
    if (rc)
        return rc;
    printf("Trainable parameters: %.3fM; %zu training and %zu validation examples; "
           "activations %.1f MiB\n", r->ls->n / 1e6, r->train.n / (r->train.pairs ? 2 : 1),
           r->valid.n / (r->valid.pairs ? 2 : 1),
           hr_bp_bytes(r->bp) / 1048576.0);
    return 0;
}

int hr_cmd_train(int argc, char **argv) {
    run r = {0};
    hr_error err = {0};
    hr_train_cfg_default(&r.c);
    for (int i = 0; i < argc; i++) /* mlx_lm.lora's -c */
        if (!strcmp(argv[i], "-c"))
            argv[i] = "--config";
    int rc = cfg_args(&r.c, argc, argv, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    /* before anything is written: a signal during setup stops the run
     * before its first step (a background job's SIGINT starts ignored) */
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    if (!(rc = setup(&r, &err)))
        rc = train(&r, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    hr_bp_free(r.bp);
    hr_lora_set_free(r.ls);
    hr_train_data_free(&r.train);
    hr_train_data_free(&r.valid);
    free(r.t_order);
    free(r.v_order);
    free(r.btok);
    free(r.bstart);
    free(r.boff);
    free(r.bref);
    free(r.t_ref);
    free(r.v_ref);
    free(r.st.perm);
    hr_llm_free(r.llm);
    hr_train_cfg_deinit(&r.c);
    return rc ? hr_cli_fail(&err) : 0;
}
