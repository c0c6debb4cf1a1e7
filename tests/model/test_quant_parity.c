/* Quantized models against references built from the same bits.
 *
 * MLX affine: every fixture model (tests/fixtures/models/<case>) is
 * converted by hr_convert (-q) at 8 and 4 bits (group 64, and a mixed
 * --target-bpw run); hearth's logits on the quantized model must equal, to
 * 1e-4 in log-probability, those of the same model whose every matrix was
 * dequantized (hr_dequant_range, the format's scalar definition) to f32 and
 * run through the f32 path. Greedy argmax must match except near-ties.
 *
 * GGUF: llama/qwen2/qwen3/gemma and the MoE (qwen3_moe, qwen2_moe, mixtral,
 * olmoe, gpt_oss: experts stacked) fixtures exported with hr_convert --gguf:
 *   F32 and F16 files give the same greedy tokens as the safetensors
 *   original (free-running, 16 steps per prompt);
 *   quantized types are compared by the KL divergence of the next-token
 *   distribution against the original (teacher-forced on the oracle's
 *   tokens), with a bound per type (KL_BOUND below). */
#include "core/error.h"
#include "support/kl.h"
#include "support/runner.h"
#include "io/safetensors.h"
#include "sample/rng.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/quant.h"
#include "model/convert.h"
#include "model/model.h"
#include "sample/sampler.h"

#include "../device_arg.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOL 1e-4
#define NEAR_TIE 1e-3

static char g_root[4096], g_tmp[4096];
static const char *g_device; /* --device NAME: the backend under test */

/* ---- helpers --------------------------------------------------------------- */

typedef struct prompts {
    int n;
    int32_t *tok[8];
    int len[8];
    int32_t *gold[8]; /* oracle greedy tokens */
    int glen[8];
} prompts;

static prompts load_prompts(const char *dir) {
    char p[8192];
    snprintf(p, sizeof p, "%s/ref.json", dir);
    json_t *ref = json_load_file(p, 0, NULL);
    assert_non_null(ref);
    prompts pr = {0};
    json_t *cases = json_object_get(ref, "cases");
    for (size_t c = 0; c < json_array_size(cases) && c < 8; c++) {
        json_t *pt = json_object_get(json_array_get(cases, c), "prompt_tokens");
        json_t *gt = json_object_get(json_array_get(cases, c), "greedy_tokens");
        pr.len[c] = (int)json_array_size(pt);
        pr.glen[c] = (int)json_array_size(gt);
        pr.tok[c] = malloc((size_t)pr.len[c] * sizeof(int32_t));
        pr.gold[c] = malloc((size_t)pr.glen[c] * sizeof(int32_t));
        for (int i = 0; i < pr.len[c]; i++)
            pr.tok[c][i] = (int32_t)json_integer_value(json_array_get(pt, (size_t)i));
        for (int i = 0; i < pr.glen[c]; i++)
            pr.gold[c][i] = (int32_t)json_integer_value(json_array_get(gt, (size_t)i));
        pr.n++;
    }
    json_decref(ref);
    return pr;
}

static void prompts_free(prompts *p) {
    for (int i = 0; i < p->n; i++) {
        free(p->tok[i]);
        free(p->gold[i]);
    }
}

/* Replace a view by an f32 copy of its dequantized values (owned list). */
typedef struct owned {
    void *p[4096];
    int n;
} owned;

static void to_f32(hr_tensor *t, owned *o) {
    if (!t->data || t->dtype == HR_DTYPE_F32)
        return;
    int64_t rows = t->shape[0], cols = t->shape[1];
    float *f = malloc((size_t)(rows * cols) * sizeof *f);
    assert_non_null(f);
    for (int64_t r = 0; r < rows; r++)
        hr_dequant_range(t, r, 0, cols, f + r * cols);
    assert_true(o->n < 4096);
    o->p[o->n++] = f;
    hr_tensor v = {.name = t->name, .dtype = HR_DTYPE_F32, .ndim = 2, .shape = {rows, cols},
                   .data = f, .nbytes = (size_t)(rows * cols) * sizeof(float)};
    *t = v;
}

static void dequantize_model(hr_model *m, owned *o) {
    for (int i = 0; i < m->hp.n_layers; i++) {
        hr_layer *L = &m->layers[i];
        hr_tensor *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                             &L->router, &L->sh_gate, &L->sh_up, &L->sh_down, &L->sh_inp,
                             &L->w_qgate, &L->ln_qkvz, &L->ln_ba, &L->ln_out, &L->mb_in,
                             &L->mb_out};
        for (size_t k = 0; k < sizeof mats / sizeof mats[0]; k++)
            to_f32(mats[k], o);
        for (int e = 0; m->hp.layer_moe[i] && e < 3 * m->hp.n_experts; e++)
            to_f32(&L->e_gate[e], o); /* e_gate, e_up, e_down: one array */
    }
    bool tied = m->lm_head == m->embed;
    to_f32(&m->embed_t, o);
    if (!tied)
        to_f32(&m->head_t, o);
}

/* KL(ref || m) of the next-token distribution per step (nats), both
 * teacher-forced on the oracle's tokens, and how often their argmax agree;
 * ref's KV cache is f32, m's of dtype kvt. */
typedef struct kl_stats {
    double mean, max;
    int agree, steps;
} kl_stats;

static kl_stats kl_against(hr_model *ref, hr_model *m, const prompts *ps, hr_dtype kvt) {
    hr_error err = {0};
    hr_runner *rr = NULL, *rm = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 256};
    assert_int_equal(hr_runner_new(&rr, ref, &ro, &err), 0);
    ro.kv_dtype = kvt;
    assert_int_equal(hr_runner_new(&rm, m, &ro, &err), 0);
    int V = ref->hp.n_vocab;
    float *lr = malloc((size_t)V * sizeof *lr), *lm = malloc((size_t)V * sizeof *lm);
    double *work = malloc(2 * (size_t)V * sizeof *work);
    kl_stats k = {0};
    for (int c = 0; c < ps->n; c++) {
        hr_runner_reset(rr);
        hr_runner_reset(rm);
        assert_int_equal(hr_runner_eval(rr, ps->tok[c], ps->len[c], lr, &err), 0);
        assert_int_equal(hr_runner_eval(rm, ps->tok[c], ps->len[c], lm, &err), 0);
        for (int s = 0; s < ps->glen[c]; s++) {
            double kl = hr_kl_logits(lr, lm, V, work);
            k.mean += kl;
            k.max = kl > k.max ? kl : k.max;
            k.agree += hr_argmax(lr, V) == hr_argmax(lm, V);
            k.steps++;
            int32_t t = ps->gold[c][s];
            assert_int_equal(hr_runner_eval(rr, &t, 1, lr, &err), 0);
            assert_int_equal(hr_runner_eval(rm, &t, 1, lm, &err), 0);
        }
    }
    k.mean /= k.steps;
    free(lr);
    free(lm);
    free(work);
    hr_runner_free(rr);
    hr_runner_free(rm);
    return k;
}

static void rm_rf(const char *p) {
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    assert_int_equal(system(cmd), 0);
}

/* ---- MLX affine ------------------------------------------------------------- */

static void src_of(const char *name, char *buf, size_t n);

/* dtype BF16: the model and its scales in bf16, as mlx-community models
 * are; their matrices run on the x16 kernels (24-bit activations) where
 * the CPU has them. Otherwise the source's dtype: f32 scales, which have
 * no exact f16, keep the f32 kernels. */
typedef struct mlx_case {
    int bits;
    double bpw;
    hr_dtype dtype;
} mlx_case;

/* hr_model_open_on, skipping (and saying why) a family that only the CPU
 * runs yet ("not supported yet on cuda:0: ...": experts, sinks, DeltaNet),
 * as test_parity does */
static int open_on(hr_model **m, const char *path, const char *name, hr_error *err) {
    int rc = hr_model_open_on(m, path, g_device, err);
    if (rc == HR_EUNSUPPORTED && *m == NULL && g_device && strcmp(g_device, "cpu") &&
        strstr(err->msg, "not supported yet on ")) {
        printf("quant parity %-5s %-20s skipped: %s\n", g_device, name, err->msg);
        skip();
    }
    return rc;
}

static void run_mlx(const char *name, const mlx_case *mc, int *steps, double *worst) {
    char src[8192], dst[8192];
    int bits = mc->bits;
    src_of(name, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/%s-q%d%s%s", g_tmp, name, bits, mc->bpw > 0 ? "mix" : "",
             mc->dtype == HR_DTYPE_BF16 ? "-bf16" : "");
    hr_error err = {0};
    hr_convert_opts co = {.src = src, .out = dst, .quantize = true, .bits = bits, .group = 64,
                          .dtype = mc->dtype, .target_bpw = mc->bpw, .gguf = HR_DTYPE_COUNT};
    if (hr_convert(&co, &err))
        fail_msg("%s: convert: %s", name, err.msg);
    hr_model *mq = NULL, *mr = NULL;
    if (open_on(&mq, dst, name, &err) || hr_model_open(&mr, dst, &err))
        fail_msg("%s: %s", name, err.msg);
    /* the quantized model really is quantized, on the kernels meant */
    const hr_layer *L0 = &mq->layers[0]; /* experts of 32 columns stay f32 (group 64) */
    const hr_tensor *wd = L0->w_down.data ? &L0->w_down
                          : L0->wo.data   ? &L0->wo
                          : L0->ln_out.data ? &L0->ln_out
                                            : &L0->mb_out; /* Mamba-2 */
    bool x16 = wd->layout == HR_LAYOUT_X16;
    if (mc->dtype == HR_DTYPE_BF16 && hr_cpu()->gemm_x16[HR_DTYPE_AFFINE] && !mq->be->device_mem)
        assert_true(x16);
    assert_int_equal(wd->dtype, HR_DTYPE_AFFINE);
    if (x16)
        assert_int_equal(wd->act_digits, 3);
    owned own = {0};
    dequantize_model(mr, &own);
    hr_runner *rq = NULL, *rr = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 256, .prefill_chunk = 64};
    assert_int_equal(hr_runner_new(&rq, mq, &ro, &err), 0);
    assert_int_equal(hr_runner_new(&rr, mr, &ro, &err), 0);
    int V = mq->hp.n_vocab;
    float *lq = malloc((size_t)V * sizeof *lq), *lr = malloc((size_t)V * sizeof *lr);
    double *pq = malloc((size_t)V * sizeof *pq), *pr = malloc((size_t)V * sizeof *pr);
    prompts ps = load_prompts(src);
    for (int c = 0; c < ps.n; c++) {
        hr_runner_reset(rq);
        hr_runner_reset(rr);
        assert_int_equal(hr_runner_eval(rq, ps.tok[c], ps.len[c], lq, &err), 0);
        assert_int_equal(hr_runner_eval(rr, ps.tok[c], ps.len[c], lr, &err), 0);
        int n_steps = ps.glen[c] < 12 ? ps.glen[c] : 12;
        for (int s = 0; s < n_steps; s++) {
            hr_log_softmax(lq, pq, V);
            hr_log_softmax(lr, pr, V);
            for (int i = 0; i < V; i++) {
                double d = fabs(pq[i] - pr[i]);
                *worst = d > *worst ? d : *worst;
                if (d > TOL)
                    fail_msg("%s %d-bit prompt %d step %d: logprob of %d is %.7f, "
                             "dequantized reference %.7f", name, bits, c, s, i, pq[i], pr[i]);
            }
            int32_t a = hr_argmax(lq, V), b = hr_argmax(lr, V);
            if (a != b && fabs(pr[a] - pr[b]) > NEAR_TIE)
                fail_msg("%s %d-bit: argmax %d vs reference %d", name, bits, a, b);
            (*steps)++;
            int32_t next = b; /* teacher-force the reference's choice */
            assert_int_equal(hr_runner_eval(rq, &next, 1, lq, &err), 0);
            assert_int_equal(hr_runner_eval(rr, &next, 1, lr, &err), 0);
        }
    }
    prompts_free(&ps);
    free(lq);
    free(lr);
    free(pq);
    free(pr);
    hr_runner_free(rq);
    hr_runner_free(rr);
    for (int i = 0; i < own.n; i++)
        free(own.p[i]);
    hr_model_free(mq);
    hr_model_free(mr);
    rm_rf(dst);
}

static void test_mlx_case(void **state) {
    const char *name = *state;
    static const mlx_case cases[] = {{8, 0, HR_DTYPE_COUNT},
                                     {4, 0, HR_DTYPE_COUNT},
                                     {4, 5.0, HR_DTYPE_COUNT},
                                     {4, 0, HR_DTYPE_BF16},
                                     {8, 0, HR_DTYPE_BF16}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int steps = 0;
        double worst = 0;
        run_mlx(name, &cases[i], &steps, &worst);
        printf("mlx %-20s %d-bit%s%s: %3d steps, max |dlogprob| vs dequantized f32 %.2e\n",
               name, cases[i].bits, cases[i].bpw > 0 ? " mixed 5.0bpw" : "",
               cases[i].dtype == HR_DTYPE_BF16 ? " bf16" : "", steps, worst);
    }
}

/* ---- GGUF -------------------------------------------------------------------- */

/* Bounds on KL(original || gguf) per step (nats), about 2-3x the worst
 * measured over these random-weight models (docs/quantization.md). Uniform
 * random weights are the hard case for 4-bit: nothing is an outlier and
 * rows of 64 average little. K-quants need rows that are whole 256-blocks:
 * on the 64-wide fixtures they fall back to F16, so they are measured on
 * the 256-wide "wide" model made below. */
static const struct {
    hr_dtype t;
    double kl_mean, kl_max;
} KL_BOUND[] = {
    {HR_DTYPE_Q8_0, 2e-2, 8e-2}, {HR_DTYPE_Q6_K, 2e-3, 5e-3}, {HR_DTYPE_Q5_K, 8e-3, 2e-2},
    {HR_DTYPE_Q4_K, 3e-2, 6e-2}, {HR_DTYPE_Q4_1, 1.5, 5.0}, {HR_DTYPE_Q4_0, 1.5, 5.0},
};

#define MOE_KL 4.0 /* MoE GGUFs: the dense bounds times this (test_gguf_case) */

static void make_wide(const char *dir);
static void make_patched_copy(const char *name, const char *dir);

/* A fixture's directory; the generated "wide" model lives in the temp dir,
 * made by the first case that asks for it. */
static void src_of(const char *name, char *buf, size_t n) {
    bool wide = !strcmp(name, "wide");
    snprintf(buf, n, "%s/%s", wide ? g_tmp : g_root, name);
    char cfg[8300];
    snprintf(cfg, sizeof cfg, "%s/config.json", buf);
    if (wide && access(cfg, F_OK) != 0)
        make_wide(buf);
}

/* The gemma2 and gemma3_text fixtures have query_pre_attn_scalar 8 with
 * head_dim 16; a GGUF cannot say so (llama.cpp derives the scale from
 * head_dim, and export refuses: test_gguf_model), so their GGUF cases run
 * a copy in the temp dir whose config.json sets it to head_dim. Likewise
 * glm4_moe's expert groups (n_group 2, topk_group 1: llama.cpp's glm4moe
 * routes over all experts): its copy has n_group = topk_group = 1. */
static bool is_patched_copy(const char *name) {
    return !strcmp(name, "gemma2") || !strcmp(name, "gemma3_text") || !strcmp(name, "glm4_moe");
}

/* The directory a GGUF case exports: src_of's, or the gemma copy. */
static void gguf_src_of(const char *name, char *buf, size_t n) {
    if (is_patched_copy(name))
        snprintf(buf, n, "%s/%s-qpas", g_tmp, name);
    else
        src_of(name, buf, n);
}

static hr_model *export_gguf(const char *name, hr_dtype t, char *path, size_t n) {
    char src[8192];
    gguf_src_of(name, src, sizeof src);
    snprintf(path, n, "%s/%s-%s.gguf", g_tmp, name, hr_dtype_name(t));
    hr_error err = {0};
    hr_convert_opts co = {.src = src, .out = path, .bits = 4, .group = 64,
                          .dtype = HR_DTYPE_COUNT, .gguf = t};
    if (hr_convert(&co, &err))
        fail_msg("%s: gguf %s: %s", name, hr_dtype_name(t), err.msg);
    hr_model *m = NULL;
    if (open_on(&m, path, name, &err))
        fail_msg("%s: open gguf: %s", name, err.msg);
    return m;
}

static void greedy(hr_model *m, const int32_t *p, int np, int32_t *out, int n) {
    hr_error err = {0};
    hr_runner *r = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 256};
    assert_int_equal(hr_runner_new(&r, m, &ro, &err), 0);
    float *l = malloc((size_t)m->hp.n_vocab * sizeof *l);
    assert_int_equal(hr_runner_eval(r, p, np, l, &err), 0);
    for (int i = 0; i < n; i++) {
        out[i] = hr_argmax(l, m->hp.n_vocab);
        assert_int_equal(hr_runner_eval(r, &out[i], 1, l, &err), 0);
    }
    free(l);
    hr_runner_free(r);
}

static void test_gguf_case(void **state) {
    const char *name = *state;
    char src[8192], path[8192];
    gguf_src_of(name, src, sizeof src);
    if (is_patched_copy(name))
        make_patched_copy(name, src);
    hr_error err = {0};
    hr_model *orig = NULL;
    if (hr_model_open(&orig, src, &err))
        fail_msg("%s: %s", name, err.msg);
    prompts ps = load_prompts(src);
    /* F32 / F16: same greedy tokens. With experts only F32: the router's
     * top-k is discontinuous, so a rounding that moves a logit across a
     * near-tie swaps an expert and the free-running tokens part; their F16
     * and quantized files are held to KL bounds MOE_KL times the dense ones
     * (teacher-forced). */
    bool moe = orig->hp.n_experts > 0;
    static const hr_dtype exact[] = {HR_DTYPE_F32, HR_DTYPE_F16};
    for (size_t e = 0; e < (moe ? 1u : 2u); e++) {
        hr_model *g = export_gguf(name, exact[e], path, sizeof path);
        int same = 0, total = 0;
        for (int c = 0; c < ps.n; c++) {
            int32_t a[16], b[16];
            greedy(orig, ps.tok[c], ps.len[c], a, 16);
            greedy(g, ps.tok[c], ps.len[c], b, 16);
            for (int i = 0; i < 16; i++) {
                if (a[i] != b[i])
                    fail_msg("%s GGUF %s prompt %d: token %d is %d, safetensors %d", name,
                             hr_dtype_name(exact[e]), c, i, b[i], a[i]);
                same++;
                total++;
            }
        }
        printf("gguf %-12s %-4s: %d/%d greedy tokens equal the safetensors model\n", name,
               hr_dtype_name(exact[e]), same, total);
        hr_model_free(g);
        unlink(path);
    }
    /* quantized: KL against the original, teacher-forced on the oracle */
    size_t nq = sizeof KL_BOUND / sizeof KL_BOUND[0];
    for (size_t q = moe ? 0 : 1; q <= nq; q++) {
        /* q 0: F16 (MoE only), then KL_BOUND's types */
        hr_dtype t = q ? KL_BOUND[q - 1].t : HR_DTYPE_F16;
        double bmean = q ? KL_BOUND[q - 1].kl_mean : 0, bmax = q ? KL_BOUND[q - 1].kl_max : 0;
        if (moe) { /* at least F16's (mixtral's 4 experts flip most; the K-quants of
                    * these 64-wide fixtures are F16) */
            bmean = fmax(bmean * MOE_KL, 1e-2);
            bmax = fmax(bmax * MOE_KL, 3e-1);
            /* one flip of an expert at one step moves up to half of that token's
             * expert weight, whatever the file's precision: the max is bounded by
             * that (gpt_oss, 2 of 4 experts + a router bias: Q8_0 max 0.52 at mean
             * 0.02; glm4_moe, 2 of 8 by sigmoid scores: 0.43 at 0.028; qwen3_moe
             * on the GPU, whose f32-grade Q8_0 products round differently from
             * the CPU's: 0.68 at 0.029) and the mean catches a systematic error */
            bmax = fmax(bmax, 1.0);
            /* qwen3_next: the gated DeltaNet state carries a perturbation to every
             * later token; its Q8_0 and Q4_0 KL are both ~18x qwen2_moe's (Q8_0 mean
             * 0.096, max 1.03; Q4_0 1.19 / 2.55) while F16's is 3e-5: the model's
             * sensitivity, not a path of its own (docs/models.md) */
            if (!strcmp(name, "qwen3_next")) {
                bmean = fmax(bmean, 0.25);
                bmax = fmax(bmax, 2.5);
            }
        }
        hr_model *g = export_gguf(name, t, path, sizeof path);
        kl_stats k = kl_against(orig, g, &ps, HR_DTYPE_F32);
        printf("gguf %-12s %-4s: KL mean %.2e max %.2e (bounds %.0e / %.0e), top-1 agree %d/%d\n",
               name, hr_dtype_name(t), k.mean, k.max, bmean, bmax, k.agree, k.steps);
        assert_true(k.mean <= bmean);
        assert_true(k.max <= bmax);
        hr_model_free(g);
        unlink(path);
    }
    prompts_free(&ps);
    hr_model_free(orig);
}

/* A random llama with 256-wide rows (K-quant blocks), written like a
 * Hugging Face directory, with a ref.json holding three prompts whose
 * "oracle" tokens are the model's own greedy tokens. */
static void make_wide(const char *dir) {
    int d = 256, ff = 512, L = 2, V = 512, qd = 256, kvd = 128;
    char p[8300];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "{\"model_type\": \"llama\", \"vocab_size\": %d, \"hidden_size\": %d, "
               "\"num_hidden_layers\": %d, \"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 2, \"intermediate_size\": %d, "
               "\"rms_norm_eps\": 1e-5, \"max_position_embeddings\": 512}", V, d, L, ff);
    fclose(f);
    hr_tensor t[64];
    int n = 0;
    char *names[64];
    hr_rng rng;
    hr_rng_seed(&rng, 42);
#define ADD(nm, r, c, scale, center)                                                    \
    do {                                                                                \
        names[n] = strdup(nm);                                                          \
        float *x = malloc((size_t)(r) * (c) * sizeof *x);                               \
        for (int i = 0; i < (r) * (c); i++)                                             \
            x[i] = (center) + (scale) * (float)(hr_rng_uniform(&rng) * 2 - 1);          \
        t[n] = (hr_tensor){.name = names[n], .dtype = HR_DTYPE_F32, .ndim = (c) > 1 ? 2 : 1, \
                           .shape = {(r), (c) > 1 ? (c) : 0}, .data = x,                \
                           .nbytes = (size_t)(r) * (c) * 4};                            \
        n++;                                                                            \
    } while (0)
    ADD("model.embed_tokens.weight", V, d, 1.0f, 0);
    ADD("lm_head.weight", V, d, 0.1f, 0);
    ADD("model.norm.weight", d, 1, 0.02f, 1);
    for (int l = 0; l < L; l++) {
        char nm[128];
#define LN(s) (snprintf(nm, sizeof nm, "model.layers.%d." s, l), nm)
        ADD(LN("input_layernorm.weight"), d, 1, 0.02f, 1);
        ADD(LN("post_attention_layernorm.weight"), d, 1, 0.02f, 1);
        ADD(LN("self_attn.q_proj.weight"), qd, d, 0.1f, 0);
        ADD(LN("self_attn.k_proj.weight"), kvd, d, 0.1f, 0);
        ADD(LN("self_attn.v_proj.weight"), kvd, d, 0.1f, 0);
        ADD(LN("self_attn.o_proj.weight"), d, qd, 0.1f, 0);
        ADD(LN("mlp.gate_proj.weight"), ff, d, 0.1f, 0);
        ADD(LN("mlp.up_proj.weight"), ff, d, 0.1f, 0);
        ADD(LN("mlp.down_proj.weight"), d, ff, 0.07f, 0);
#undef LN
    }
#undef ADD
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    hr_error err = {0};
    assert_int_equal(hr_st_write(p, t, (size_t)n, NULL, 0, &err), 0);
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free((void *)t[i].data);
    }
    hr_model *m = NULL;
    assert_int_equal(hr_model_open(&m, dir, &err), 0);
    json_t *cases = json_array();
    for (int c = 0; c < 3; c++) {
        int32_t pr[6], out[16];
        for (int i = 0; i < 6; i++)
            pr[i] = (int32_t)(hr_rng_next(&rng) % (uint64_t)V);
        greedy(m, pr, 6, out, 16);
        json_t *pj = json_array(), *gj = json_array();
        for (int i = 0; i < 6; i++)
            json_array_append_new(pj, json_integer(pr[i]));
        for (int i = 0; i < 16; i++)
            json_array_append_new(gj, json_integer(out[i]));
        json_array_append_new(cases, json_pack("{s:o,s:o}", "prompt_tokens", pj,
                                               "greedy_tokens", gj));
    }
    hr_model_free(m);
    json_t *ref = json_pack("{s:o}", "cases", cases);
    snprintf(p, sizeof p, "%s/ref.json", dir);
    json_dump_file(ref, p, 0);
    json_decref(ref);
}

/* ---- MLX 4-bit on the integer path (HEARTH_QUANT_ACT=int8) ---------------------
 * Run as `test_quant_parity --int8` with HEARTH_QUANT_ACT=int8 (ctest
 * test_quant_parity_int8; the choice is made once per process): the 4-bit
 * model's matrices are repacked (exact values) and run with int8 activations,
 * bounded by KL against the same model dequantized to f32 (the exact path),
 * about 3x the worst measured (docs/quantization.md). */
#define INT8_KL_MEAN 5e-3
#define INT8_KL_MAX 2e-2

static void test_mlx_int8_case(void **state) {
    const char *name = *state;
    if (!hr_cpu()->gemm_x16[HR_DTYPE_AFFINE]) {
        printf("%s: skipped: this CPU (%s kernels) has no x16 kernels for MLX affine weights\n",
               name, hr_cpu()->name);
        skip();
    }
    char src[8192], dst[8192];
    src_of(name, src, sizeof src);
    snprintf(dst, sizeof dst, "%s/%s-q4-int8", g_tmp, name);
    hr_error err = {0};
    /* bf16, as mlx-community models are: the scales have exact f16s (f32
     * ones would keep the f32 path) */
    hr_convert_opts co = {.src = src, .out = dst, .quantize = true, .bits = 4, .group = 64,
                          .dtype = HR_DTYPE_BF16, .gguf = HR_DTYPE_COUNT};
    if (hr_convert(&co, &err))
        fail_msg("%s: convert: %s", name, err.msg);
    hr_model *mq = NULL, *mr = NULL;
    if (hr_model_open(&mq, dst, &err) || hr_model_open(&mr, dst, &err))
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(mq->layers[0].w_down.dtype, HR_DTYPE_AFFINE);
    assert_int_equal(mq->layers[0].w_down.layout, HR_LAYOUT_X16);
    assert_int_equal(mq->layers[0].w_down.act_digits, 1);
    owned own = {0};
    dequantize_model(mr, &own);
    prompts ps = load_prompts(src);
    kl_stats k = kl_against(mr, mq, &ps, HR_DTYPE_F32);
    printf("mlx %-12s 4-bit int8: KL vs the exact path mean %.2e max %.2e (bounds %.0e / %.0e), "
           "top-1 agree %d/%d\n", name, k.mean, k.max, INT8_KL_MEAN, INT8_KL_MAX, k.agree,
           k.steps);
    assert_true(k.mean <= INT8_KL_MEAN);
    assert_true(k.max <= INT8_KL_MAX);
    prompts_free(&ps);
    for (int i = 0; i < own.n; i++)
        free(own.p[i]);
    hr_model_free(mq);
    hr_model_free(mr);
    rm_rf(dst);
}

/* ---- KV cache dtypes ----------------------------------------------------------------
 * The same model with its KV cache in F16 or BF16 against F32: KL bounded
 * about 3x the worst measured (docs/numerics.md). */
static const struct {
    hr_dtype t;
    double kl_mean, kl_max;
} KV_BOUND[] = {{HR_DTYPE_F16, 2e-6, 1e-5}, {HR_DTYPE_BF16, 1.5e-4, 6e-4}};

static void test_kv_dtype_case(void **state) {
    const char *name = *state;
    char src[8192];
    src_of(name, src, sizeof src);
    hr_error err = {0};
    hr_model *m = NULL;
    assert_int_equal(hr_model_open_on(&m, src, g_device, &err), 0);
    prompts ps = load_prompts(src);
    for (size_t i = 0; i < sizeof KV_BOUND / sizeof KV_BOUND[0]; i++) {
        kl_stats k = kl_against(m, m, &ps, KV_BOUND[i].t);
        printf("kv %-12s %-4s: KL vs f32 KV mean %.2e max %.2e (bounds %.0e / %.0e), top-1 "
               "agree %d/%d\n", name, hr_dtype_name(KV_BOUND[i].t), k.mean, k.max,
               KV_BOUND[i].kl_mean, KV_BOUND[i].kl_max, k.agree, k.steps);
        assert_true(k.mean <= KV_BOUND[i].kl_mean);
        assert_true(k.max <= KV_BOUND[i].kl_max);
    }
    prompts_free(&ps);
    hr_model_free(m);
}

/* The fixture `name` at dir with query_pre_attn_scalar = head_dim (links to
 * its weights, prompts and generation config). */
static void make_patched_copy(const char *name, const char *dir) {
    char from[8300], to[8300];
    mkdir(dir, 0755);
    static const char *links[] = {"model.safetensors", "ref.json", "generation_config.json"};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        snprintf(from, sizeof from, "%s/%s/%s", g_root, name, links[i]);
        snprintf(to, sizeof to, "%s/%s", dir, links[i]);
        assert_int_equal(symlink(from, to), 0);
    }
    snprintf(from, sizeof from, "%s/%s/config.json", g_root, name);
    json_t *cfg = json_load_file(from, 0, NULL);
    assert_non_null(cfg);
    if (!strcmp(name, "glm4_moe")) {
        json_object_set_new(cfg, "n_group", json_integer(1));
        json_object_set_new(cfg, "topk_group", json_integer(1));
    } else {
        json_object_set(cfg, "query_pre_attn_scalar", json_object_get(cfg, "head_dim"));
    }
    snprintf(to, sizeof to, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, to, 0), 0);
    json_decref(cfg);
}

/* ---- errors ------------------------------------------------------------------ */

static void test_errors(void **state) {
    (void)state;
    char src[8192], dst[8192];
    snprintf(src, sizeof src, "%s/llama", g_root);
    snprintf(dst, sizeof dst, "%s/bad", g_tmp);
    hr_error err = {0};
    hr_convert_opts co = {.src = src, .out = dst, .quantize = true, .bits = 7, .group = 64,
                          .dtype = HR_DTYPE_COUNT, .gguf = HR_DTYPE_COUNT};
    assert_int_not_equal(hr_convert(&co, &err), 0);
    assert_non_null(strstr(err.msg, "--q-bits"));
    co.bits = 4;
    co.target_bpw = 1.0;
    assert_int_not_equal(hr_convert(&co, &err), 0);
    assert_non_null(strstr(err.msg, "below the smallest"));
    assert_int_equal(access(dst, F_OK), -1); /* nothing half-written */
    co.target_bpw = 0;
    co.out = src; /* exists */
    assert_int_not_equal(hr_convert(&co, &err), 0);
    assert_non_null(strstr(err.msg, "already exists"));
    /* a quantized weight without its config block */
    snprintf(dst, sizeof dst, "%s/noq", g_tmp);
    co.out = dst;
    assert_int_equal(hr_convert(&co, &err), 0);
    char cfgp[8300];
    snprintf(cfgp, sizeof cfgp, "%s/config.json", dst);
    json_t *cfg = json_load_file(cfgp, 0, NULL);
    json_object_del(cfg, "quantization");
    json_object_del(cfg, "quantization_config");
    json_dump_file(cfg, cfgp, 0);
    hr_model *m = NULL;
    assert_int_not_equal(hr_model_open(&m, dst, &err), 0);
    assert_non_null(strstr(err.msg, "no 'quantization' block"));
    /* a per-module override that disagrees with the packed shape */
    json_object_set_new(cfg, "quantization", json_pack("{s:i,s:i,s:{s:i,s:i}}", "bits", 4,
                        "group_size", 64, "model.layers.0.mlp.down_proj", "bits", 8,
                        "group_size", 64));
    json_dump_file(cfg, cfgp, 0);
    json_decref(cfg);
    assert_int_not_equal(hr_model_open(&m, dst, &err), 0);
    assert_non_null(strstr(err.msg, "model.layers.0.mlp.down_proj.weight"));
    rm_rf(dst);
    /* GGUF export of an unsupported architecture */
    snprintf(src, sizeof src, "%s/phi3", g_root);
    snprintf(dst, sizeof dst, "%s/phi3.gguf", g_tmp);
    co = (hr_convert_opts){.src = src, .out = dst, .dtype = HR_DTYPE_COUNT, .gguf = HR_DTYPE_Q8_0};
    assert_int_not_equal(hr_convert(&co, &err), 0);
    assert_non_null(strstr(err.msg, "not supported yet"));
    assert_int_equal(access(dst, F_OK), -1);
}

/* test_quant_parity [--int8 | --device NAME]: --device runs the quantized
 * and KV-dtype cases with the model under test on that backend (the
 * references stay on the CPU); a GPU that is not there skips, saying why. */
int main(int argc, char **argv) {
    if (!hr_test_device(argc, argv, &g_device))
        return 0;
    const char *root = getenv("HEARTH_ROOT");
    snprintf(g_root, sizeof g_root, "%s/tests/fixtures/models", root ? root : ".");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hearth-qparity-XXXXXX");
    if (!mkdtemp(g_tmp))
        return 1;
    static const char *mlx_models[] = {"llama", "llama-tied", "qwen2", "qwen3", "gemma3_text",
                                       "phi3", "starcoder2", "glm4", "qwen3-bf16", "wide",
                                       "qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "gpt_oss",
                                       "qwen3_next", "glm4_moe", "granitemoe", "granitemoehybrid",
                                       "gemma4_moe"};
    static const char *gguf_models[] = {"llama", "llama-tied", "llama-rope-llama3", "qwen2",
                                        "qwen3", "llama-bf16", "gemma", "gemma2",
                                        "gemma3_text", "wide", "qwen3_moe", "qwen2_moe",
                                        "mixtral", "olmoe", "gpt_oss", "qwen3_next",
                                        "glm4_moe", "granitemoe", "granitemoehybrid",
                                        "gemma4_moe"};
    static const char *int8_models[] = {"llama", "qwen3", "gemma3_text", "phi3", "wide"};
    struct CMUnitTest tests[48];
    size_t n = 0;
    if (argc > 1 && !strcmp(argv[1], "--int8")) {
        for (size_t i = 0; i < sizeof int8_models / sizeof int8_models[0]; i++)
            tests[n++] = (struct CMUnitTest){.name = int8_models[i],
                                             .test_func = test_mlx_int8_case,
                                             .initial_state = (void *)int8_models[i]};
        int rc = _cmocka_run_group_tests("quant_parity_int8", tests, n, NULL, NULL);
        rm_rf(g_tmp);
        return rc;
    }
    for (size_t i = 0; i < sizeof mlx_models / sizeof mlx_models[0]; i++)
        tests[n++] = (struct CMUnitTest){.name = mlx_models[i], .test_func = test_mlx_case,
                                         .initial_state = (void *)mlx_models[i]};
    for (size_t i = 0; i < sizeof gguf_models / sizeof gguf_models[0]; i++)
        tests[n++] = (struct CMUnitTest){.name = gguf_models[i], .test_func = test_gguf_case,
                                         .initial_state = (void *)gguf_models[i]};
    static const char *kv_models[] = {"llama", "qwen3", "gemma3_text", "phi3", "wide"};
    for (size_t i = 0; i < sizeof kv_models / sizeof kv_models[0]; i++)
        tests[n++] = (struct CMUnitTest){.name = kv_models[i], .test_func = test_kv_dtype_case,
                                         .initial_state = (void *)kv_models[i]};
    if (!strcmp(g_device, "cpu")) /* the loader's errors, whatever the backend */
        tests[n++] = (struct CMUnitTest){.name = "errors", .test_func = test_errors};
    if (getenv("HEARTH_TEST_FILTER")) /* e.g. "glm4_moe": the cases of that name */
        cmocka_set_test_filter(getenv("HEARTH_TEST_FILTER"));
    int rc = _cmocka_run_group_tests("quant_parity", tests, n, NULL, NULL);
    rm_rf(g_tmp);
    return rc;
}
