/* The training pass (train/backprop.h) on the tiny fixture models
 * (tests/fixtures/models: llama with GQA, qwen3 with q/k norms, qwen2 with
 * q/k/v biases, llama-tied):
 *   - every LoRA parameter's analytic gradient against central finite
 *     differences of the loss (f32 forward, loss summed in double);
 *   - the training forward's loss against the serving forward
 *     (model/forward.c, itself held to transformers by test_parity) with
 *     the parameters saved as an mlx-lm adapter and loaded by
 *     model/adapter.c: the same per-token log-probabilities;
 *   - determinism: the same gradient bits on 1 and 3 threads, and with
 *     gradient checkpointing;
 *   - the Adam / AdamW update against a hand computation;
 *   - resume-file errors.
 * tests/fixtures/train/<case>/ (tools/refgen/train_torch.py: torch
 * autograd, float64, over a plain-torch forward checked there against
 * transformers' log-probs; tools/refgen/train.py writes the same files
 * through transformers + peft): the loss within 1e-5 relative (the torch
 * model is the same function), every LoRA gradient within 1e-4 of the
 * largest, the parameters after 3 AdamW steps within 3e-4 of the largest
 * (Adam's first steps move a parameter by ~lr sign(g) whatever |g|, so
 * the gradients' f32 rounding on the smallest ones, ~1e-6, shows there
 * magnified). */
#include "core/error.h"
#include "model/adapter.h"
#include "model/model.h"
#include "sample/rng.h"
#include "support/runner.h"
#include "support/tree.h"
#include "train/backprop.h"
#include "train/loss.h"
#include "train/lora_params.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_root[4096]; /* tests/fixtures */
static char g_tmp[4096];

static hr_model *open_model(const char *name) {
    char d[8300];
    snprintf(d, sizeof d, "%s/models/%s", g_root, name);
    hr_error err = {0};
    hr_model *m = NULL;
    hr_model_opts o = {.quant_act = "f32"};
    if (hr_model_open_with(&m, d, &o, &err))
        fail_msg("%s: %s", d, err.msg);
    return m;
}

static hr_lora_set *new_set(const hr_model *m, int rank, int num_layers, float bt_scale) {
    hr_lora_cfg cfg = {.rank = rank, .scale = 2.0f, .num_layers = num_layers};
    for (int s = 0; s < HR_LORA_SLOTS; s++)
        cfg.keys[s] = true;
    hr_lora_set *ls;
    hr_error err = {0};
    if (hr_lora_set_new(&ls, m, &cfg, 7, &err))
        fail_msg("%s", err.msg);
    /* bt is zero at init (no gradient reaches a then): make it random */
    hr_rng rng;
    hr_rng_seed(&rng, 11);
    for (size_t i = 0; i < (size_t)m->hp.n_layers * HR_LORA_SLOTS; i++) {
        hr_lora_param *p = &ls->p[i];
        for (int k = 0; k < p->r * p->out; k++)
            p->bt[k] = (float)((2 * hr_rng_uniform(&rng) - 1) * bt_scale);
    }
    return ls;
}

/* two sequences (7 and 5 tokens), the second with a prompt of 3 (masked) */
static int32_t g_tok[12];
static const int g_start[3] = {0, 7, 12};
static const int g_off[2] = {0, 3};

static hr_bp_batch batch(int V) {
    hr_rng rng;
    hr_rng_seed(&rng, 3);
    for (int i = 0; i < 12; i++)
        g_tok[i] = (int32_t)(hr_rng_next(&rng) % (uint64_t)V);
    return (hr_bp_batch){.n_seqs = 2, .tok = g_tok, .start = g_start, .offset = g_off};
}

static double loss_of(hr_bp *b, const hr_bp_batch *bt, bool grad) {
    double loss;
    int n;
    hr_error err = {0};
    if (hr_bp_step(b, bt, grad, &loss, &n, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(n, 6 + 2); /* 6 targets, then tokens 3 and 4 (offset 3) */
    return loss;
}

/* ---- finite differences ------------------------------------------------------------ */

static void gradcheck(const char *model, int num_layers) {
    hr_model *m = open_model(model);
    hr_lora_set *ls = new_set(m, 2, num_layers, 0.3f);
    hr_bp *b;
    hr_error err = {0};
    if (hr_bp_new(&b, ls, 16, 8, 1, false, &err)) /* one thread: many tiny passes */
        fail_msg("%s", err.msg);
    hr_bp_batch bt = batch(m->hp.n_vocab);
    hr_lora_set_zero_grad(ls);
    loss_of(b, &bt, true);
    double worst = 0, gmax = 0;
    size_t bad = 0;
    for (size_t i = 0; i < ls->n; i++) {
        /* central differences at h and 2h, Richardson-extrapolated (the
         * h^2 term cancels): f32 rounding of the loss stays below ~1e-6 */
        float w = ls->w[i];
        double dh[2];
        for (int k = 0; k < 2; k++) {
            float h = k ? 2e-2f : 1e-2f;
            ls->w[i] = w + h;
            double lp = loss_of(b, &bt, false);
            ls->w[i] = w - h;
            double lm = loss_of(b, &bt, false);
            dh[k] = (lp - lm) / ((double)(w + h) - (double)(w - h));
        }
        ls->w[i] = w;
        double fd = (4 * dh[0] - dh[1]) / 3;
        double d = fabs(fd - ls->g[i]);
        gmax = fabs(fd) > gmax ? fabs(fd) : gmax;
        /* the loss (near 8) is a float: one rounding of lp - lm, 9.5e-7,
         * over 2h is 4.8e-5 at h and 2.4e-5 at 2h, so (4 * 4.8 + 2.4) / 3
         * = 7.2e-5 after the extrapolation, and the forward's own roundings
         * move with w: worst differences seen 6.3e-5 (AVX2), 6.6e-5
         * (AVX-512), 1.05e-4 (scalar), all on gradients below 1e-2 */
        if (d > 1.2e-4 + 1e-3 * fabs(fd)) {
            if (bad++ < 5)
                print_error("%s param %zu: analytic %.7g, finite difference %.7g\n", model, i,
                            ls->g[i], fd);
        }
        worst = d > worst ? d : worst;
    }
    printf("%s (num_layers %d): %zu LoRA parameters, largest |gradient| %.4g, worst "
           "|analytic - finite difference| %.3g\n", model, num_layers, ls->n, gmax, worst);
    assert_int_equal(bad, 0);
    assert_true(gmax > 1e-2); /* the check saw real gradients */
    hr_bp_free(b);
    hr_lora_set_free(ls);
    hr_model_free(m);
}

/* the same for DPO and ORPO on two pairs (prompts of 3 and 2 tokens,
 * completions of 4/2 and 3/5), DPO's reference from the base */
static int32_t g_ptok[26];
static const int g_pstart[5] = {0, 7, 12, 17, 24};
static const int g_poff[4] = {3, 3, 2, 2};

static hr_bp_batch pair_batch(int V) {
    hr_rng rng;
    hr_rng_seed(&rng, 5);
    for (int i = 0; i < 24; i++)
        g_ptok[i] = (int32_t)(hr_rng_next(&rng) % (uint64_t)V);
    for (int i = 0; i < 3; i++) /* each pair's sequences share the prompt */
        g_ptok[7 + i] = g_ptok[i];
    for (int i = 0; i < 2; i++)
        g_ptok[17 + i] = g_ptok[12 + i];
    return (hr_bp_batch){.n_seqs = 4, .tok = g_ptok, .start = g_pstart, .offset = g_poff};
}

static double pref_loss(hr_bp *b, const hr_bp_batch *bt, hr_loss_kind k, double param,
                        const double *ref, bool grad) {
    double loss;
    int n;
    hr_error err = {0};
    if (hr_loss_step(b, bt, k, param, ref, grad, &loss, &n, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(n, 4 + 2 + 3 + 5);
    return loss;
}

/* tol: the absolute part of the tolerance (the f32 loss's rounding over
 * 2h: ORPO's loss carries the NLL, about 8.6 here, DPO's is near 1) */
static void gradcheck_pref(const char *model, hr_loss_kind k, double param, double tol) {
    hr_model *m = open_model(model);
    hr_lora_set *ls = new_set(m, 2, 1, 0.3f);
    hr_bp *b;
    hr_error err = {0};
    if (hr_bp_new(&b, ls, 24, 8, 1, false, &err))
        fail_msg("%s", err.msg);
    hr_bp_batch bt = pair_batch(m->hp.n_vocab);
    double ref[4];
    int cnt[4];
    assert_int_equal(hr_bp_forward(b, &bt, false, ref, cnt, &err), 0);
    hr_lora_set_zero_grad(ls);
    double l0 = pref_loss(b, &bt, k, param, ref, true);
    double worst = 0, gmax = 0;
    size_t bad = 0;
    /* every third parameter (the torch fixtures check them all): seconds */
    for (size_t i = 0; i < ls->n; i += 3) {
        float w = ls->w[i];
        double dh[2];
        for (int j = 0; j < 2; j++) {
            float h = j ? 2e-2f : 1e-2f;
            ls->w[i] = w + h;
            double lp = pref_loss(b, &bt, k, param, ref, false);
            ls->w[i] = w - h;
            double lm = pref_loss(b, &bt, k, param, ref, false);
            dh[j] = (lp - lm) / ((double)(w + h) - (double)(w - h));
        }
        ls->w[i] = w;
        double fd = (4 * dh[0] - dh[1]) / 3, d = fabs(fd - ls->g[i]);
        gmax = fabs(fd) > gmax ? fabs(fd) : gmax;
        if (d > tol + 1e-3 * fabs(fd) && bad++ < 5)
            print_error("%s %s param %zu: analytic %.7g, finite difference %.7g\n", model,
                        hr_loss_name(k), i, ls->g[i], fd);
        worst = d > worst ? d : worst;
    }
    printf("%s %s (loss %.6f): %zu of %zu LoRA parameters, largest |gradient| %.4g, worst "
           "|analytic - finite difference| %.3g\n", model, hr_loss_name(k), l0,
           (ls->n + 2) / 3, ls->n, gmax, worst);
    assert_int_equal(bad, 0);
    assert_true(gmax > 1e-2);
    hr_bp_free(b);
    hr_lora_set_free(ls);
    hr_model_free(m);
}

static void test_grad_dpo(void **st) { (void)st; gradcheck_pref("llama", HR_LOSS_DPO, 0.5, 5e-5); }
static void test_grad_orpo(void **st) { (void)st; gradcheck_pref("qwen3", HR_LOSS_ORPO, 0.5, 1e-4); }

/* the loss functions' weights against differences of the scalar losses */
static void test_loss_weights(void **st) {
    (void)st;
    const double lp[4] = {-9.5, -14.25, -4.0, -11.0}, ref[4] = {-10.0, -13.0, -5.5, -10.0};
    const int cnt[4] = {4, 6, 2, 5};
    for (int k = 0; k < 3; k++) {
        double w[4], x[4];
        double l0 = hr_loss_eval(k, 0.3, 4, lp, cnt, ref, w);
        assert_true(isfinite(l0) && l0 > 0);
        for (int s = 0; s < 4; s++) {
            memcpy(x, lp, sizeof x);
            x[s] = lp[s] + 1e-5;
            double a = hr_loss_eval(k, 0.3, 4, x, cnt, ref, NULL);
            x[s] = lp[s] - 1e-5;
            double c = hr_loss_eval(k, 0.3, 4, x, cnt, ref, NULL);
            double fd = (a - c) / 2e-5;
            if (fabs(fd - w[s]) > 1e-7 + 1e-6 * fabs(fd))
                fail_msg("%s: d loss / d lp[%d] %.9g, difference %.9g", hr_loss_name(k), s,
                         w[s], fd);
        }
    }
    /* DPO at the reference: log 2 whatever beta; SFT: the mean NLL */
    assert_true(fabs(hr_loss_eval(HR_LOSS_DPO, 0.1, 4, ref, cnt, ref, NULL) - log(2)) < 1e-12);
    assert_true(fabs(hr_loss_eval(HR_LOSS_SFT, 0, 4, lp, cnt, NULL, NULL) - 38.75 / 17) < 1e-12);
    assert_int_equal(hr_loss_parse("orpo"), HR_LOSS_ORPO);
    assert_int_equal(hr_loss_parse("ppo"), -1);
}

static void test_grad_llama(void **st) { (void)st; gradcheck("llama", -1); }
static void test_grad_qwen3(void **st) { (void)st; gradcheck("qwen3", 1); }
static void test_grad_qwen2(void **st) { (void)st; gradcheck("qwen2", 1); }
static void test_grad_tied(void **st) { (void)st; gradcheck("llama-tied", 1); }

/* ---- determinism ---------------------------------------------------------------------- */

static float *grads(hr_model *m, int threads, bool ckpt, double *loss) {
    hr_lora_set *ls = new_set(m, 4, -1, 0.2f);
    hr_bp *b;
    hr_error err = {0};
    if (hr_bp_new(&b, ls, 16, 8, threads, ckpt, &err))
        fail_msg("%s", err.msg);
    hr_bp_batch bt = batch(m->hp.n_vocab);
    hr_lora_set_zero_grad(ls);
    *loss = loss_of(b, &bt, true);
    float *g = malloc(ls->n * sizeof *g);
    memcpy(g, ls->g, ls->n * sizeof *g);
    hr_bp_free(b);
    hr_lora_set_free(ls);
    return g;
}

static void test_deterministic(void **st) {
    (void)st;
    hr_model *m = open_model("qwen3");
    hr_lora_set *ls = new_set(m, 4, -1, 0.2f);
    size_t n = ls->n;
    hr_lora_set_free(ls);
    double l1, l3, lc;
    float *g1 = grads(m, 1, false, &l1), *g3 = grads(m, 3, false, &l3);
    float *gc = grads(m, 2, true, &lc);
    assert_true(l1 == l3 && l1 == lc);
    assert_memory_equal(g1, g3, n * sizeof *g1);
    assert_memory_equal(g1, gc, n * sizeof *g1);
    free(g1);
    free(g3);
    free(gc);
    hr_model_free(m);
}

/* ---- the serving forward -------------------------------------------------------------------- */

static void test_serving_forward(void **st) {
    (void)st;
    hr_model *m = open_model("llama");
    hr_lora_set *ls = new_set(m, 4, 2, 0.3f);
    hr_error err = {0};
    char dir[8300], p[8400];
    snprintf(dir, sizeof dir, "%s/ad", g_tmp);
    assert_int_equal(hr_test_put(dir, "x", ""), 0);
    snprintf(p, sizeof p, "%s/adapters.safetensors", dir);
    assert_int_equal(hr_lora_set_save(ls, p, &err), 0);
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    assert_int_equal(hr_lora_set_write_config(ls, p, NULL, &err), 0);
    hr_adapter *ad;
    if (hr_adapter_open(&ad, m, dir, "t", &err))
        fail_msg("%s", err.msg);
    assert_int_equal(ad->n_mats, 2 * HR_LORA_SLOTS);

    int V = m->hp.n_vocab;
    hr_bp_batch bt = batch(V);
    hr_runner *r;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 64};
    assert_int_equal(hr_runner_new(&r, m, &ro, &err), 0);
    hr_runner_set_adapter(r, ad);
    float *logits = malloc((size_t)V * sizeof *logits);
    double sum = 0;
    int n = 0;
    for (int s = 0; s < 2; s++) {
        hr_runner_reset(r);
        for (int j = g_start[s]; j < g_start[s + 1] - 1; j++) {
            assert_int_equal(hr_runner_eval(r, &g_tok[j], 1, logits, &err), 0);
            if (j + 1 - g_start[s] < g_off[s])
                continue;
            double mx = -INFINITY, z = 0;
            for (int v = 0; v < V; v++)
                mx = logits[v] > mx ? logits[v] : mx;
            for (int v = 0; v < V; v++)
                z += exp(logits[v] - mx);
            sum += mx + log(z) - logits[g_tok[j + 1]];
            n++;
        }
    }
    hr_bp *b;
    assert_int_equal(hr_bp_new(&b, ls, 16, 8, 2, false, &err), 0);
    double loss = loss_of(b, &bt, false);
    printf("loss: training forward %.7f, serving forward with the saved adapter %.7f\n", loss,
           sum / n);
    assert_true(fabs(loss - sum / n) < 1e-5);
    /* and the base alone differs (the adapter is not a no-op) */
    hr_runner_set_adapter(r, NULL);
    hr_runner_reset(r);
    float *l0 = malloc((size_t)V * sizeof *l0);
    assert_int_equal(hr_runner_eval(r, g_tok, 3, l0, &err), 0);
    hr_runner_set_adapter(r, ad);
    hr_runner_reset(r);
    assert_int_equal(hr_runner_eval(r, g_tok, 3, logits, &err), 0);
    double diff = 0;
    for (int v = 0; v < V; v++)
        diff = fmax(diff, fabs(l0[v] - logits[v]));
    assert_true(diff > 1e-3);
    free(l0);
    free(logits);
    hr_bp_free(b);
    b = NULL;
    hr_runner_free(r);
    hr_adapter_unref(ad);

    /* resume: the file loads back into an equal set; another rank refuses */
    hr_lora_set *ls2 = new_set(m, 4, 2, 0.0f);
    snprintf(p, sizeof p, "%s/adapters.safetensors", dir);
    assert_int_equal(hr_lora_set_load(ls2, p, &err), 0);
    assert_memory_equal(ls2->w, ls->w, ls->n * sizeof *ls->w);
    hr_lora_set *ls3 = new_set(m, 2, 2, 0.0f);
    assert_int_equal(hr_lora_set_load(ls3, p, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "wrong shape"));
    hr_lora_set *ls4 = new_set(m, 4, 1, 0.0f);
    assert_int_equal(hr_lora_set_load(ls4, p, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "not a LoRA matrix of this run"));
    /* the same file on the base's GGUF F32 conversion (q/k rows permuted,
     * model/gguf_model.h): the same loss, and saved back the same bytes */
    char gguf[8400], cmd[20000];
    snprintf(gguf, sizeof gguf, "%s/llama-f32.gguf", g_tmp);
    const char *bin = getenv("HEARTH_BIN");
    snprintf(cmd, sizeof cmd, "'%s' convert --model '%s/models/llama' --gguf F32 --out '%s' "
             ">/dev/null", bin ? bin : "build/hearth", g_root, gguf);
    assert_int_equal(system(cmd), 0);
    hr_model *mg;
    hr_model_opts o = {.quant_act = "f32"};
    assert_int_equal(hr_model_open_with(&mg, gguf, &o, &err), 0);
    assert_true(mg->qk_permuted);
    hr_lora_set *lg = new_set(mg, 4, 2, 0.0f);
    assert_int_equal(hr_lora_set_load(lg, p, &err), 0);
    assert_int_equal(hr_bp_new(&b, lg, 16, 8, 2, false, &err), 0);
    double lgg = loss_of(b, &bt, false);
    printf("loss on the GGUF F32 base %.7f\n", lgg);
    assert_true(fabs(lgg - loss) < 1e-5);
    snprintf(p, sizeof p, "%s/again.safetensors", dir);
    assert_int_equal(hr_lora_set_save(lg, p, &err), 0);
    hr_lora_set *l5 = new_set(m, 4, 2, 0.0f);
    assert_int_equal(hr_lora_set_load(l5, p, &err), 0);
    assert_memory_equal(l5->w, ls->w, ls->n * sizeof *ls->w);
    hr_bp_free(b);
    hr_lora_set_free(l5);
    hr_lora_set_free(lg);
    hr_model_free(mg);
    hr_lora_set_free(ls2);
    hr_lora_set_free(ls3);
    hr_lora_set_free(ls4);
    hr_lora_set_free(ls);
    hr_model_free(m);
}

/* ---- optimizer -------------------------------------------------------------------------------- */

static void test_adam(void **st) {
    (void)st;
    hr_model *m = open_model("llama");
    hr_lora_set *ls = new_set(m, 1, 1, 0.5f);
    float w0 = ls->w[0], w1 = ls->w[1];
    ls->g[0] = 0.5f;
    ls->g[1] = -2.0f;
    hr_adam o = {.lr = 0.1f, .b1 = 0.9f, .b2 = 0.999f, .eps = 1e-8f, .wd = 0.01f};
    hr_lora_set_adam(ls, &o);
    /* m = 0.1 g, v = 0.001 g^2: step = lr * 0.1 g / (sqrt(0.001) |g| + eps) */
    double want0 = w0 * (1 - 0.1 * 0.01) - 0.1 * 0.05 / (sqrt(0.001) * 0.5 + 1e-8);
    double want1 = w1 * (1 - 0.1 * 0.01) + 0.1 * 0.2 / (sqrt(0.001) * 2.0 + 1e-8);
    assert_true(fabs(ls->w[0] - want0) < 1e-5 && fabs(ls->w[1] - want1) < 1e-5);
    hr_lora_set_adam(ls, &o); /* the second step reads the moments */
    double m0 = 0.9 * 0.05 + 0.1 * 0.5, v0 = 0.999 * 0.00025 + 0.001 * 0.25;
    double want0b = want0 * (1 - 0.001) - 0.1 * m0 / (sqrt(v0) + 1e-8);
    assert_true(fabs(ls->w[0] - want0b) < 1e-5);
    hr_lora_set_free(ls);
    hr_model_free(m);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_errors(void **st) {
    (void)st;
    hr_model *m = open_model("mixtral");
    hr_lora_cfg cfg = {.rank = 4, .scale = 1, .num_layers = 1, .keys = {true}};
    hr_lora_set *ls;
    hr_error err = {0};
    assert_int_equal(hr_lora_set_new(&ls, m, &cfg, 0, &err), HR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "mixtures of experts"));
    hr_model_free(m);
    m = open_model("llama");
    cfg.num_layers = 9;
    assert_int_equal(hr_lora_set_new(&ls, m, &cfg, 0, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "model has 3"));
    cfg.num_layers = 1;
    cfg.rank = 0;
    assert_int_equal(hr_lora_set_new(&ls, m, &cfg, 0, &err), HR_EINVAL);
    cfg.rank = 2;
    assert_int_equal(hr_lora_set_new(&ls, m, &cfg, 0, &err), 0);
    hr_bp *b;
    assert_int_equal(hr_bp_new(&b, ls, 8, 8, 1, false, &err), 0);
    hr_bp_batch bt = batch(m->hp.n_vocab);
    double loss;
    int n;
    assert_int_equal(hr_bp_step(b, &bt, true, &loss, &n, &err), HR_EINVAL); /* 10 tokens > 8 */
    int32_t badtok[3] = {1, 2, 9999};
    int st2[2] = {0, 3};
    hr_bp_batch bb = {.n_seqs = 1, .tok = badtok, .start = st2};
    assert_int_equal(hr_bp_step(b, &bb, true, &loss, &n, &err), HR_ERANGE);
    hr_bp_free(b);
    hr_lora_set_free(ls);
    hr_model_free(m);
}

/* ---- the torch oracle ----------------------------------------------------------------------- */

/* |a - b| <= tol * max |b| over each set's flat arrays; the worst ratio */
static double rel_diff(const float *a, const float *b, size_t n) {
    double mx = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs(b[i]));
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]) / (mx > 0 ? mx : 1));
    return worst;
}

static void torch_case(const char *dir, const char *name) {
    char p[8400];
    snprintf(p, sizeof p, "%s/ref.json", dir);
    json_error_t je;
    json_t *ref = json_load_file(p, 0, &je);
    if (!ref)
        fail_msg("%s: %s", p, je.text);
    hr_model *m = open_model(json_string_value(json_object_get(ref, "base")));
    hr_lora_cfg cfg = {.rank = (int)json_integer_value(json_object_get(ref, "rank")),
                       .scale = (float)json_number_value(json_object_get(ref, "scale")),
                       .num_layers = (int)json_integer_value(json_object_get(ref, "num_layers"))};
    for (int s = 0; s < HR_LORA_SLOTS; s++)
        cfg.keys[s] = true;
    hr_lora_set *ls, *want;
    hr_error err = {0};
    assert_int_equal(hr_lora_set_new(&ls, m, &cfg, 0, &err), 0);
    assert_int_equal(hr_lora_set_new(&want, m, &cfg, 0, &err), 0);
    snprintf(p, sizeof p, "%s/adapters.safetensors", dir);
    if (hr_lora_set_load(ls, p, &err))
        fail_msg("%s", err.msg);
    json_t *toks = json_object_get(ref, "tokens"), *offs = json_object_get(ref, "offsets");
    int32_t tok[256];
    int start[9] = {0}, off[8], ns = (int)json_array_size(toks), n = 0;
    for (int s = 0; s < ns; s++) {
        json_t *t = json_array_get(toks, (size_t)s);
        for (size_t i = 0; i < json_array_size(t); i++)
            tok[n++] = (int32_t)json_integer_value(json_array_get(t, i));
        start[s + 1] = n;
        off[s] = (int)json_integer_value(json_array_get(offs, (size_t)s));
    }
    hr_bp_batch bt = {.n_seqs = ns, .tok = tok, .start = start, .offset = off};
    json_t *jk = json_object_get(ref, "loss_kind");
    int kind = jk ? hr_loss_parse(json_string_value(jk)) : HR_LOSS_SFT;
    assert_true(kind >= 0);
    double param = json_number_value(json_object_get(ref, kind == HR_LOSS_DPO ? "beta"
                                                                              : "lambda"));
    hr_bp *b;
    assert_int_equal(hr_bp_new(&b, ls, n, 64, 2, false, &err), 0);
    double loss;
    int nt;
    hr_lora_set_zero_grad(ls);
    assert_int_equal(hr_loss_step(b, &bt, kind, param, NULL, true, &loss, &nt, &err), 0);
    double want_loss = json_number_value(json_object_get(ref, "loss"));
    snprintf(p, sizeof p, "%s/grads.safetensors", dir);
    if (hr_lora_set_load(want, p, &err))
        fail_msg("%s", err.msg);
    double gd = rel_diff(ls->g, want->w, ls->n);
    printf("%s (%s): loss %.7f (torch %.7f), gradients within %.2e of the largest\n", name,
           hr_loss_name(kind), loss, want_loss, gd);
    assert_true(fabs(loss - want_loss) <= 1e-5 * fabs(want_loss));
    assert_true(gd <= 1e-4);
    /* AdamW steps on the same batch */
    json_t *ad = json_object_get(ref, "adamw"), *losses = json_object_get(ref, "losses");
    hr_adam o = {.lr = (float)json_number_value(json_object_get(ad, "lr")),
                 .b1 = (float)json_number_value(json_object_get(ad, "b1")),
                 .b2 = (float)json_number_value(json_object_get(ad, "b2")),
                 .eps = (float)json_number_value(json_object_get(ad, "eps")),
                 .wd = (float)json_number_value(json_object_get(ad, "wd"))};
    for (size_t k = 0; k < json_array_size(losses); k++) {
        hr_lora_set_zero_grad(ls);
        assert_int_equal(hr_loss_step(b, &bt, kind, param, NULL, true, &loss, &nt, &err), 0);
        double wl = json_number_value(json_array_get(losses, k));
        if (fabs(loss - wl) > 1e-4 * fabs(wl))
            fail_msg("%s: step %zu loss %.7f, torch %.7f", name, k, loss, wl);
        hr_lora_set_adam(ls, &o);
    }
    snprintf(p, sizeof p, "%s/steps.safetensors", dir);
    if (hr_lora_set_load(want, p, &err))
        fail_msg("%s", err.msg);
    double wd = rel_diff(ls->w, want->w, ls->n);
    printf("%s: after %zu AdamW steps the parameters are within %.2e of the largest\n", name,
           json_array_size(losses), wd);
    assert_true(wd <= 3e-4);
    hr_bp_free(b);
    hr_lora_set_free(ls);
    hr_lora_set_free(want);
    hr_model_free(m);
    json_decref(ref);
}

static void test_torch_fixture(void **st) {
    (void)st;
    char d[8300];
    snprintf(d, sizeof d, "%s/train", g_root);
    DIR *dh = opendir(d);
    int n = 0;
    struct dirent *e;
    while (dh && (e = readdir(dh))) {
        char c[8700];
        snprintf(c, sizeof c, "%s/%s", d, e->d_name);
        char r[8800];
        snprintf(r, sizeof r, "%s/ref.json", c);
        if (e->d_name[0] == '.' || access(r, F_OK) != 0)
            continue;
        torch_case(c, e->d_name);
        n++;
    }
    if (dh)
        closedir(dh);
    if (n == 0) /* committed: their absence is a broken checkout */
        fail_msg("no torch fixtures in %s (tools/refgen/train_torch.py makes them)", d);
}

int main(void) {
    const char *root = getenv("HEARTH_ROOT");
    snprintf(g_root, sizeof g_root, "%s/tests/fixtures", root ? root : ".");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hearth_test_backprop_%d", (int)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_llama),      cmocka_unit_test(test_grad_qwen3),
        cmocka_unit_test(test_grad_qwen2),      cmocka_unit_test(test_grad_tied),
        cmocka_unit_test(test_grad_dpo),        cmocka_unit_test(test_grad_orpo),
        cmocka_unit_test(test_loss_weights),
        cmocka_unit_test(test_deterministic),   cmocka_unit_test(test_serving_forward),
        cmocka_unit_test(test_adam),            cmocka_unit_test(test_errors),
        cmocka_unit_test(test_torch_fixture),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd)) {
    }
    return rc;
}
