/* Mixture-of-experts and hybrid (gated DeltaNet) models beyond parity:
 * the routing rule, batch invariance of the forward pass (a sequence's
 * logits are bit-identical whether it runs alone or batched with others,
 * in prefill and in decode), the recurrent state's bookkeeping and the
 * config errors that name their field. */
#include "core/error.h"
#include "support/runner.h"
#include "io/safetensors.h"
#include "kernels/cpu/moe.h"
#include "model/convert.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/model.h"

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

static char g_root[4096];

/* ---- routing ------------------------------------------------------------------ */

static void test_route(void **state) {
    (void)state;
    const float lg[4] = {1.0f, 3.0f, 2.0f, 3.0f};
    int32_t sel[2];
    float w[2];
    /* softmax over all, top 2 (ties: the lower index first) */
    hr_moe_route(lg, 4, 2, HR_BROUTER_SOFTMAX_TOPK, false, sel, w);
    assert_int_equal(sel[0], 1);
    assert_int_equal(sel[1], 3);
    double z = exp(1.0) + 2 * exp(3.0) + exp(2.0);
    assert_true(fabs(w[0] - exp(3.0) / z) < 1e-6 && fabs(w[1] - exp(3.0) / z) < 1e-6);
    hr_moe_route(lg, 4, 2, HR_BROUTER_SOFTMAX_TOPK, true, sel, w); /* renormalised */
    assert_true(fabs(w[0] - 0.5) < 1e-6 && fabs(w[1] - 0.5) < 1e-6);
    /* top 2 of the logits, softmax over those two */
    const float lg2[3] = {0.0f, 1.0f, 3.0f};
    hr_moe_route(lg2, 3, 2, HR_BROUTER_TOPK_SOFTMAX, false, sel, w);
    assert_int_equal(sel[0], 2);
    assert_int_equal(sel[1], 1);
    assert_true(fabs(w[0] - 1 / (1 + exp(-2.0))) < 1e-6);
}

/* ---- batch invariance ------------------------------------------------------------ */

static int32_t *prompt(const json_t *ref, int c, int *n) {
    const json_t *pt = json_object_get(json_array_get(json_object_get(ref, "cases"), (size_t)c),
                                       "prompt_tokens");
    *n = (int)json_array_size(pt);
    int32_t *p = malloc((size_t)*n * sizeof *p);
    for (int i = 0; i < *n; i++)
        p[i] = (int32_t)json_integer_value(json_array_get(pt, (size_t)i));
    return p;
}

/* Sequences s < n (tokens tok[s][0..len[s]) from position pos0[s], blocks
 * tab[s]) through one forward; the logits of each one's last token into
 * out[s]. */
static void run(hr_fwd *f, hr_kv *kv, const hr_model *m, int n, int32_t *const *tok,
                const int *len, const int *pos0, int32_t (*tab)[8], float *out) {
    int T = 0;
    for (int s = 0; s < n; s++)
        T += len[s];
    int32_t *tk = malloc((size_t)T * sizeof *tk), *ps = malloc((size_t)T * sizeof *ps),
            *sq = malloc((size_t)T * sizeof *sq);
    uint8_t *want = calloc((size_t)T, 1);
    hr_seq_blocks sb[3];
    int t = 0;
    for (int s = 0; s < n; s++) {
        sb[s] = (hr_seq_blocks){tab[s], 8, 0, 0};
        for (int i = 0; i < len[s]; i++, t++) {
            tk[t] = tok[s][i];
            ps[t] = pos0[s] + i;
            sq[t] = s;
            want[t] = i == len[s] - 1;
        }
    }
    hr_batch b = {.n_tokens = T, .token = tk, .pos = ps, .seq = sq, .logits = want,
                  .n_seqs = n, .seqs = sb};
    hr_error err = {0};
    if (hr_forward(f, kv, &b, out, &err))
        fail_msg("%s", err.msg);
    (void)m;
    free(tk);
    free(ps);
    free(sq);
    free(want);
}

/* model at path (a fixture's directory, or a file made from fixture name) */
static void check_invariant_at(const char *name, const char *path) {
    char dir[4200], refp[4300];
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(refp, sizeof refp, "%s/%s/ref.json", g_root, name);
    json_t *ref = json_load_file(refp, 0, NULL);
    assert_non_null(ref);
    hr_error err = {0};
    hr_model *m = NULL;
    if (hr_model_open(&m, dir, &err))
        fail_msg("%s: %s", name, err.msg);
    int V = m->hp.n_vocab, len[3], zero[3] = {0, 0, 0};
    int32_t *tok[3];
    for (int s = 0; s < 3; s++)
        tok[s] = prompt(ref, s, &len[s]);
    hr_kv kv;
    assert_int_equal(hr_kv_init(&kv, &m->hp, HR_DTYPE_F32, 48, &err), 0);
    hr_fwd *alone = NULL, *batched = NULL;
    assert_int_equal(hr_fwd_new(&alone, m, 128, 3, 256, 2, &err), 0); /* 3 state slots */
    assert_int_equal(hr_fwd_new(&batched, m, 128, 3, 256, 2, &err), 0);
    int32_t ta[3][8], tb[3][8];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 8; i++) {
            ta[s][i] = hr_kv_alloc(&kv);
            tb[s][i] = hr_kv_alloc(&kv);
        }
    float *la = malloc((size_t)3 * V * sizeof *la), *lb = malloc((size_t)3 * V * sizeof *lb);
    /* prefill: each alone, then the three together */
    for (int s = 0; s < 3; s++)
        run(alone, &kv, m, 1, &tok[s], &len[s], &zero[s], &ta[s], la + (size_t)s * V);
    run(batched, &kv, m, 3, tok, len, zero, tb, lb);
    for (int s = 0; s < 3; s++)
        if (memcmp(la + (size_t)s * V, lb + (size_t)s * V, (size_t)V * sizeof *la))
            fail_msg("%s: prompt %d's prefill logits differ batched", name, s);
    /* decode two steps: the three together; alone, one at a time (the
     * recurrent state of sequence s continues in the alone context only
     * for the sequence it ran last: so alone runs s from scratch) */
    int one[3] = {1, 1, 1}, pos[3];
    int32_t next[3], *np[3];
    for (int step = 0; step < 2; step++) {
        for (int s = 0; s < 3; s++) {
            next[s] = (int32_t)((s * 7 + step * 13) % V);
            np[s] = &next[s];
            pos[s] = len[s] + step;
        }
        run(batched, &kv, m, 3, np, one, pos, tb, lb);
        for (int s = 0; s < 3; s++) {
            /* alone: the whole sequence so far, then compare its last row */
            int n = len[s] + step + 1;
            int32_t *all = malloc((size_t)n * sizeof *all);
            memcpy(all, tok[s], (size_t)len[s] * sizeof *all);
            for (int k = 0; k <= step; k++)
                all[len[s] + k] = (int32_t)((s * 7 + k * 13) % V);
            /* prefill all but the last, then the last as a decode step */
            int head = n - 1, p0 = n - 1;
            run(alone, &kv, m, 1, &all, &head, &zero[0], &ta[s], la);
            int32_t *last = all + n - 1;
            run(alone, &kv, m, 1, &last, &one[0], &p0, &ta[s], la);
            if (memcmp(la, lb + (size_t)s * V, (size_t)V * sizeof *la))
                fail_msg("%s: sequence %d decode step %d differs batched", name, s, step);
            free(all);
        }
    }
    printf("%-12s %s bit-identical alone and batched (prefill of 3 prompts, 2 decode steps)\n",
           name, hr_dtype_name(m->layers[0].e_up ? m->layers[0].e_up[0].dtype : HR_DTYPE_F32));
    free(la);
    free(lb);
    for (int s = 0; s < 3; s++)
        free(tok[s]);
    hr_fwd_free(alone);
    hr_fwd_free(batched);
    hr_kv_deinit(&kv);
    hr_model_free(m);
    json_decref(ref);
}

static void check_invariant(const char *name) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", g_root, name);
    check_invariant_at(name, dir);
}

static void test_batch_invariance(void **state) {
    (void)state;
    static const char *cases[] = {"qwen3_moe", "qwen2_moe", "mixtral", "olmoe", "gpt_oss",
                                  "qwen3_next", "glm4_moe", "granitemoe", "granitemoehybrid",
                                  "gemma4_moe"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_invariant(cases[i]);
    /* quantized experts: groups of every size go through the row and the
     * panel kernels, and still give each token the same bits (mixtral: its
     * experts' rows are 64 wide, the integer kernels'; rows that are not a
     * multiple of 64 take the f32-activation kernels, whose few-row and
     * panel paths sum in different orders: docs/models.md) */
    static const hr_dtype q[] = {HR_DTYPE_Q8_0, HR_DTYPE_Q4_0};
    for (size_t i = 0; i < 2; i++) {
        char src[4200], out[64];
        snprintf(src, sizeof src, "%s/mixtral", g_root);
        snprintf(out, sizeof out, "/tmp/hearth-moe-inv-%d-%zu.gguf", (int)getpid(), i);
        hr_error err = {0};
        hr_convert_opts co = {.src = src, .out = out, .bits = 4, .group = 64,
                              .dtype = HR_DTYPE_COUNT, .gguf = q[i]};
        if (hr_convert(&co, &err))
            fail_msg("%s", err.msg);
        check_invariant_at("mixtral", out);
        unlink(out);
    }
}

/* ---- the recurrent state's bookkeeping ------------------------------------------ */

static void test_recurrent_slots(void **state) {
    (void)state;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/qwen3_next", g_root);
    hr_error err = {0};
    hr_model *m = NULL;
    assert_int_equal(hr_model_open(&m, dir, &err), 0);
    hr_kv kv;
    assert_int_equal(hr_kv_init(&kv, &m->hp, HR_DTYPE_F32, 8, &err), 0);
    hr_fwd *f = NULL;
    assert_int_equal(hr_fwd_new(&f, m, 8, 2, 64, 1, &err), 0);
    float *lg = malloc((size_t)2 * m->hp.n_vocab * sizeof *lg);
    int32_t ta[2] = {hr_kv_alloc(&kv), hr_kv_alloc(&kv)}, tb[2] = {hr_kv_alloc(&kv),
                                                                   hr_kv_alloc(&kv)};
    int32_t tok[2] = {5, 6}, pos[2] = {0, 1}, seq[2] = {0, 0};
    uint8_t want[2] = {0, 1};
    hr_seq_blocks sb[2] = {{ta, 2, 0, 0}, {tb, 2, 0, 0}};
    hr_batch b = {.n_tokens = 2, .token = tok, .pos = pos, .seq = seq, .logits = want,
                  .n_seqs = 1, .seqs = sb};
    assert_int_equal(hr_forward(f, &kv, &b, lg, &err), 0);
    /* continuing anywhere but where it left off (a rewind, a cached prefix) */
    int32_t p5 = 5, t1 = 7, s0 = 0;
    uint8_t w1 = 1;
    hr_batch c = {.n_tokens = 1, .token = &t1, .pos = &p5, .seq = &s0, .logits = &w1,
                  .n_seqs = 1, .seqs = sb};
    assert_int_equal(hr_forward(f, &kv, &c, lg, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "recurrent state is not here"));
    /* a second sequence takes the second slot; a third has none while both live */
    c.seqs = &sb[1];
    int32_t p0 = 0;
    c.pos = &p0;
    assert_int_equal(hr_forward(f, &kv, &c, lg, &err), 0);
    int32_t tc[2] = {hr_kv_alloc(&kv), hr_kv_alloc(&kv)};
    hr_seq_blocks sc = {tc, 2, 0, 0};
    c.seqs = &sc;
    assert_int_equal(hr_forward(f, &kv, &c, lg, &err), HR_EFULL);
    assert_non_null(strstr(err.msg, "no recurrent state slot free"));
    /* once the first sequence's blocks are gone, its slot is free again */
    hr_kv_unref(&kv, ta[0]);
    hr_kv_unref(&kv, ta[1]);
    assert_int_equal(hr_forward(f, &kv, &c, lg, &err), 0);
    /* a sequence without tokens in a step holds no slot in it */
    hr_seq_blocks idle[2] = {{tb, 2, 0, 0}, {tc, 2, 0, 0}};
    int32_t p1 = 1, s1 = 1;
    hr_batch e = {.n_tokens = 1, .token = &t1, .pos = &p1, .seq = &s1, .logits = &w1,
                  .n_seqs = 2, .seqs = idle};
    assert_int_equal(hr_forward(f, &kv, &e, lg, &err), 0);
    /* two sequences sharing a first block cannot both carry state */
    hr_seq_blocks two[2] = {{tc, 2, 0, 0}, {tc, 2, 0, 0}};
    int32_t tk2[2] = {1, 2}, ps2[2] = {0, 0}, sq2[2] = {0, 1};
    uint8_t w2[2] = {1, 1};
    hr_batch d = {.n_tokens = 2, .token = tk2, .pos = ps2, .seq = sq2, .logits = w2,
                  .n_seqs = 2, .seqs = two};
    assert_int_equal(hr_forward(f, &kv, &d, lg, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "share their first KV block"));
    free(lg);
    hr_fwd_free(f);
    hr_kv_deinit(&kv);
    hr_model_free(m);
}

/* ---- gpt-oss's MXFP4 experts as the hub ships them ------------------------------------ */

static const float FP4[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

/* x[0..32) as one hub MXFP4 group (16 code bytes, an E8M0 scale) and the
 * values it stands for into y */
static void quant_group(const float *x, uint8_t *blk, uint8_t *scale, float *y) {
    float mx = 0;
    for (int i = 0; i < 32; i++)
        mx = fmaxf(mx, fabsf(x[i]));
    int s = mx > 0 ? 127 + (int)ceilf(log2f(mx / 6)) : 127;
    s = s < 1 ? 1 : s > 254 ? 254 : s;
    float sc = ldexpf(1, s - 127);
    *scale = (uint8_t)s;
    uint8_t code[32];
    for (int i = 0; i < 32; i++) {
        float a = fabsf(x[i]) / sc;
        int best = 0;
        for (int k = 1; k < 8; k++)
            if (fabsf(FP4[k] - a) < fabsf(FP4[best] - a))
                best = k;
        code[i] = (uint8_t)(best | (x[i] < 0 ? 8 : 0));
        y[i] = (x[i] < 0 ? -FP4[best] : FP4[best]) * sc;
    }
    for (int i = 0; i < 16; i++)
        blk[i] = (uint8_t)(code[2 * i] | code[2 * i + 1] << 4);
}

/* A fused gpt_oss expert tensor [E, in, out] (x @ W) as hub blocks/scales
 * [E, out, in/32, 16] / [E, out, in/32]; fused gets the values they stand
 * for (the reference model's weights) */
static void to_hub(float *fused, int64_t E, int64_t in, int64_t out, uint8_t *blocks,
                   uint8_t *scales) {
    float x[32], y[32];
    for (int64_t e = 0; e < E; e++)
        for (int64_t r = 0; r < out; r++)
            for (int64_t g = 0; g < in / 32; g++) {
                for (int i = 0; i < 32; i++)
                    x[i] = fused[(e * in + g * 32 + i) * out + r];
                size_t at = (size_t)((e * out + r) * (in / 32) + g);
                quant_group(x, blocks + at * 16, scales + at, y);
                for (int i = 0; i < 32; i++)
                    fused[(e * in + g * 32 + i) * out + r] = y[i];
            }
}

static void write_dir(const char *dir, const hr_tensor *t, size_t n) {
    char p[4300], from[4300];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    snprintf(from, sizeof from, "%s/gpt_oss/config.json", g_root);
    unlink(p);
    assert_int_equal(symlink(from, p), 0);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    hr_error err = {0};
    if (hr_st_write(p, t, n, NULL, 0, &err))
        fail_msg("%s", err.msg);
}

/* The fixture's experts quantized to MXFP4 in the hub's layout load and
 * give the logits of the same model with those values in f32. */
static void test_gpt_oss_mxfp4(void **state) {
    (void)state;
    char src[4200], tmp[] = "/tmp/hearth-mxfp4-XXXXXX", qdir[4300], rdir[4300];
    snprintf(src, sizeof src, "%s/gpt_oss/model.safetensors", g_root);
    assert_non_null(mkdtemp(tmp));
    snprintf(qdir, sizeof qdir, "%s/q", tmp);
    snprintf(rdir, sizeof rdir, "%s/ref", tmp);
    hr_error err = {0};
    hr_st_file *f = NULL;
    assert_int_equal(hr_st_open(&f, src, &err), 0);
    size_t n = 0;
    while (hr_st_tensor(f, n))
        n++;
    hr_tensor *qt = calloc(2 * n, sizeof *qt), *rt = calloc(n, sizeof *rt);
    void *owned[64];
    char *names[64];
    int n_owned = 0, n_names = 0;
    size_t nq = 0;
    for (size_t i = 0; i < n; i++) {
        const hr_tensor *t = hr_st_tensor(f, i);
        rt[i] = *t;
        bool gu = strstr(t->name, "experts.gate_up_proj") && !strstr(t->name, "bias");
        bool dn = strstr(t->name, "experts.down_proj") && !strstr(t->name, "bias");
        if (!gu && !dn) {
            qt[nq++] = *t;
            continue;
        }
        int64_t E = t->shape[0], in = t->shape[1], out = t->shape[2];
        float *vals = malloc(t->nbytes);
        memcpy(vals, t->data, t->nbytes);
        uint8_t *bl = malloc((size_t)(E * out * in / 2)), *sc = malloc((size_t)(E * out * in / 32));
        to_hub(vals, E, in, out, bl, sc);
        rt[i].data = vals;
        owned[n_owned++] = vals;
        owned[n_owned++] = bl;
        owned[n_owned++] = sc;
        char *bn = malloc(256), *sn = malloc(256);
        snprintf(bn, 256, "%s_blocks", t->name);
        snprintf(sn, 256, "%s_scales", t->name);
        names[n_names++] = bn;
        names[n_names++] = sn;
        qt[nq++] = (hr_tensor){.name = bn, .dtype = HR_DTYPE_U8, .ndim = 4,
                               .shape = {E, out, in / 32, 16}, .data = bl,
                               .nbytes = (size_t)(E * out * in / 2)};
        qt[nq++] = (hr_tensor){.name = sn, .dtype = HR_DTYPE_U8, .ndim = 3,
                               .shape = {E, out, in / 32}, .data = sc,
                               .nbytes = (size_t)(E * out * in / 32)};
    }
    write_dir(qdir, qt, nq);
    write_dir(rdir, rt, n);
    hr_model *mq = NULL, *mr = NULL;
    if (hr_model_open(&mq, qdir, &err) || hr_model_open(&mr, rdir, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(mq->layers[0].e_gate[0].dtype, HR_DTYPE_MXFP4);
    hr_runner *rq = NULL, *rr = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 64};
    assert_int_equal(hr_runner_new(&rq, mq, &ro, &err), 0);
    assert_int_equal(hr_runner_new(&rr, mr, &ro, &err), 0);
    int V = mq->hp.n_vocab;
    float *lq = malloc((size_t)V * sizeof *lq), *lr = malloc((size_t)V * sizeof *lr);
    int32_t tok[8] = {1, 17, 230, 5, 99, 400, 7, 63};
    double worst = 0;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(hr_runner_eval(rq, &tok[i], 1, lq, &err), 0);
        assert_int_equal(hr_runner_eval(rr, &tok[i], 1, lr, &err), 0);
        double zq = 0, zr = 0, mq_ = -INFINITY, mr_ = -INFINITY;
        for (int v = 0; v < V; v++) {
            mq_ = fmax(mq_, lq[v]);
            mr_ = fmax(mr_, lr[v]);
        }
        for (int v = 0; v < V; v++) {
            zq += exp(lq[v] - mq_);
            zr += exp(lr[v] - mr_);
        }
        for (int v = 0; v < V; v++) {
            double d = fabs((lq[v] - mq_ - log(zq)) - (lr[v] - mr_ - log(zr)));
            worst = fmax(worst, d);
        }
    }
    printf("gpt_oss MXFP4 (hub layout) vs its values in f32: max |dlogprob| %.2e\n", worst);
    assert_true(worst < 1e-4);
    /* as a GGUF file (llama.cpp's gpt-oss: MXFP4 experts as GGML type 39, the rest F32):
     * the same blocks, so the same logits, bit for bit */
    char gpath[4300];
    snprintf(gpath, sizeof gpath, "%s/gpt-oss.gguf", tmp);
    hr_convert_opts co = {.src = qdir, .out = gpath, .dtype = HR_DTYPE_COUNT,
                          .gguf = HR_DTYPE_F32};
    if (hr_convert(&co, &err))
        fail_msg("gguf export: %s", err.msg);
    hr_model *mg = NULL;
    if (hr_model_open(&mg, gpath, &err))
        fail_msg("gguf open: %s", err.msg);
    assert_int_equal(mg->layers[0].e_gate[0].dtype, HR_DTYPE_MXFP4);
    hr_runner *rg = NULL;
    assert_int_equal(hr_runner_new(&rg, mg, &ro, &err), 0);
    hr_runner_reset(rq);
    float *lg = malloc((size_t)V * sizeof *lg);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(hr_runner_eval(rq, &tok[i], 1, lq, &err), 0);
        assert_int_equal(hr_runner_eval(rg, &tok[i], 1, lg, &err), 0);
        if (memcmp(lq, lg, (size_t)V * sizeof *lq))
            fail_msg("gpt-oss GGUF (MXFP4 experts): token %d's logits differ from the hub "
                     "MXFP4 model's", i);
    }
    printf("gpt_oss MXFP4 as GGUF (gpt-oss, type 39): logits bit-identical to the hub layout\n");
    free(lg);
    hr_runner_free(rg);
    hr_model_free(mg);
    unlink(gpath);
    /* a scales tensor of the wrong shape, a fused tensor of the wrong shape */
    char bad[4300];
    snprintf(bad, sizeof bad, "%s/bad", tmp);
    for (size_t i = 0; i < nq; i++)
        if (strstr(qt[i].name, "layers.1.mlp.experts.down_proj_scales")) {
            qt[i].ndim = 2;
            qt[i].shape[0] *= qt[i].shape[1];
            qt[i].shape[1] = qt[i].shape[2];
        }
    write_dir(bad, qt, nq);
    hr_model *mb = NULL;
    assert_int_equal(hr_model_open(&mb, bad, &err), HR_EFORMAT);
    assert_non_null(strstr(err.msg, "down_proj_scales' must be U8"));
    for (size_t i = 0; i < n; i++)
        if (strstr(rt[i].name, "layers.0.mlp.experts.down_proj") && !strstr(rt[i].name, "bias")) {
            int64_t t0 = rt[i].shape[1];
            rt[i].shape[1] = rt[i].shape[2];
            rt[i].shape[2] = t0;
        }
    write_dir(bad, rt, n);
    assert_int_equal(hr_model_open(&mb, bad, &err), HR_EFORMAT);
    assert_non_null(strstr(err.msg, "has shape [4, 64, 32], expected [4, 32, 64]"));
    free(lq);
    free(lr);
    hr_runner_free(rq);
    hr_runner_free(rr);
    hr_model_free(mq);
    hr_model_free(mr);
    for (int i = 0; i < n_owned; i++)
        free(owned[i]);
    for (int i = 0; i < n_names; i++)
        free(names[i]);
    free(qt);
    free(rt);
    hr_st_close(f);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
}

/* ---- mlx-lm's stacked experts (switch_mlp) ---------------------------------------------- */

/* qwen3_moe quantized by hr_convert (one matrix per expert), then its
 * experts restacked [E, out, in] as mlx-lm's switch_mlp writes them (the
 * affine weight, scales and biases alike): the same logits, bit for bit. */
static void test_switch_mlp(void **state) {
    (void)state;
    char tmp[] = "/tmp/hearth-switch-XXXXXX", qdir[4300], sdir[4300], src[4200], p[4400];
    assert_non_null(mkdtemp(tmp));
    snprintf(src, sizeof src, "%s/qwen3_moe", g_root);
    snprintf(qdir, sizeof qdir, "%s/q", tmp);
    snprintf(sdir, sizeof sdir, "%s/s", tmp);
    hr_error err = {0};
    hr_convert_opts co = {.src = src, .out = qdir, .quantize = true, .bits = 4, .group = 64,
                          .dtype = HR_DTYPE_COUNT, .gguf = HR_DTYPE_COUNT};
    if (hr_convert(&co, &err))
        fail_msg("%s", err.msg);
    snprintf(p, sizeof p, "%s/model.safetensors", qdir);
    hr_st_file *f = NULL;
    assert_int_equal(hr_st_open(&f, p, &err), 0);
    size_t n = 0;
    while (hr_st_tensor(f, n))
        n++;
    hr_tensor *out = calloc(n, sizeof *out);
    char **names = calloc(n, sizeof *names);
    void **bufs = calloc(n, sizeof *bufs);
    size_t no = 0;
    int E = 8;
    for (size_t i = 0; i < n; i++) {
        const hr_tensor *t = hr_st_tensor(f, i);
        int layer, e;
        char part[64], suffix[64];
        if (sscanf(t->name, "model.layers.%d.mlp.experts.%d.%63[^.].%63s", &layer, &e, part,
                   suffix) != 4) {
            out[no++] = *t;
            continue;
        }
        if (e != 0)
            continue;
        names[no] = malloc(256);
        snprintf(names[no], 256, "model.layers.%d.mlp.switch_mlp.%s.%s", layer, part, suffix);
        char *buf = bufs[no] = malloc(t->nbytes * (size_t)E);
        for (int k = 0; k < E; k++) {
            char nm[256];
            snprintf(nm, sizeof nm, "model.layers.%d.mlp.experts.%d.%s.%s", layer, k, part, suffix);
            const hr_tensor *ek = hr_st_find(f, nm);
            assert_non_null(ek);
            memcpy(buf + (size_t)k * t->nbytes, ek->data, t->nbytes);
        }
        out[no] = *t;
        out[no].name = names[no];
        out[no].ndim = 3;
        out[no].shape[0] = E;
        out[no].shape[1] = t->shape[0];
        out[no].shape[2] = t->shape[1];
        out[no].data = buf;
        out[no].nbytes = t->nbytes * (size_t)E;
        no++;
    }
    mkdir(sdir, 0755);
    char from[4400];
    snprintf(from, sizeof from, "%s/config.json", qdir);
    snprintf(p, sizeof p, "%s/config.json", sdir);
    assert_int_equal(symlink(from, p), 0);
    snprintf(p, sizeof p, "%s/model.safetensors", sdir);
    if (hr_st_write(p, out, no, NULL, 0, &err))
        fail_msg("%s", err.msg);
    hr_model *mq = NULL, *ms = NULL;
    if (hr_model_open(&mq, qdir, &err) || hr_model_open(&ms, sdir, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(ms->layers[0].e_gate[3].dtype, HR_DTYPE_AFFINE);
    hr_runner *rq = NULL, *rs = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 64};
    assert_int_equal(hr_runner_new(&rq, mq, &ro, &err), 0);
    assert_int_equal(hr_runner_new(&rs, ms, &ro, &err), 0);
    int V = mq->hp.n_vocab;
    float *lq = malloc((size_t)V * sizeof *lq), *ls = malloc((size_t)V * sizeof *ls);
    int32_t tok[6] = {3, 77, 12, 400, 9, 250};
    assert_int_equal(hr_runner_eval(rq, tok, 6, lq, &err), 0);
    assert_int_equal(hr_runner_eval(rs, tok, 6, ls, &err), 0);
    assert_memory_equal(lq, ls, (size_t)V * sizeof *lq);
    printf("qwen3_moe 4-bit: switch_mlp (stacked) experts give the per-expert logits bit for bit\n");
    free(lq);
    free(ls);
    hr_runner_free(rq);
    hr_runner_free(rs);
    hr_model_free(mq);
    hr_model_free(ms);
    for (size_t i = 0; i < n; i++) {
        free(names[i]);
        free(bufs[i]);
    }
    free(names);
    free(bufs);
    free(out);
    hr_st_close(f);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
}

/* ---- gemma4's attention_k_eq_v ------------------------------------------------------- */

/* dir/config.json: the fixture's with "attention_k_eq_v" set; dir/model.safetensors:
 * n tensors */
static void write_model(const char *dir, bool k_eq_v, const hr_tensor *t, size_t n) {
    char p[4400], src[4400];
    hr_error err = {0};
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(src, sizeof src, "%s/gemma4_moe/config.json", g_root);
    json_t *cfg = json_load_file(src, 0, NULL);
    assert_non_null(cfg);
    json_object_set_new(cfg, "attention_k_eq_v", json_boolean(k_eq_v));
    json_object_set_new(cfg, "num_global_key_value_heads",
                        json_deep_copy(json_object_get(cfg, "num_key_value_heads")));
    snprintf(p, sizeof p, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, p, 0), 0);
    json_decref(cfg);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (hr_st_write(p, t, n, NULL, 0, &err))
        fail_msg("%s", err.msg);
}

static void last_logits(const char *dir, const int32_t *tok, int n, float *out) {
    hr_error err = {0};
    hr_model *m = NULL;
    hr_runner *r = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 64};
    if (hr_model_open(&m, dir, &err) || hr_runner_new(&r, m, &ro, &err) ||
        hr_runner_eval(r, tok, n, out, &err))
        fail_msg("%s: %s", dir, err.msg);
    hr_runner_free(r);
    hr_model_free(m);
}

/* attention_k_eq_v: a full-attention layer without v_proj takes its values
 * from the key projection (before k_norm; V's own norm after). No oracle
 * has run it: the model without the full layer's v_proj and the flag set
 * gives the logits, bit for bit, of the model whose v_proj is a copy of
 * its k_proj, and not the fixture's. */
static void test_gemma4_k_eq_v(void **state) {
    (void)state;
    char tmp[] = "/tmp/hearth-keqv-XXXXXX", a[4300], b[4300], src[4300];
    assert_non_null(mkdtemp(tmp));
    snprintf(src, sizeof src, "%s/gemma4_moe/model.safetensors", g_root);
    hr_error err = {0};
    hr_st_file *f = NULL;
    assert_int_equal(hr_st_open(&f, src, &err), 0);
    size_t n = hr_st_count(f), na = 0;
    hr_tensor *ta = calloc(n, sizeof *ta), *tb = calloc(n, sizeof *tb);
    const hr_tensor *k2 = hr_st_find(f, "model.layers.2.self_attn.k_proj.weight");
    assert_non_null(k2);
    for (size_t i = 0; i < n; i++) {
        const hr_tensor *t = hr_st_tensor(f, i);
        bool v2 = !strcmp(t->name, "model.layers.2.self_attn.v_proj.weight"); /* full layer */
        tb[i] = *t;
        if (v2)
            tb[i].data = k2->data; /* same shape: 2 KV heads on every layer */
        else
            ta[na++] = *t;
    }
    assert_int_equal(na, n - 1);
    snprintf(a, sizeof a, "%s/a", tmp);
    snprintf(b, sizeof b, "%s/b", tmp);
    write_model(a, true, ta, na);
    write_model(b, false, tb, n);
    int32_t tok[7] = {3, 77, 12, 400, 9, 250, 31};
    float la[512], lb[512], lf[512];
    last_logits(a, tok, 7, la);
    last_logits(b, tok, 7, lb);
    snprintf(src, sizeof src, "%s/gemma4_moe", g_root);
    last_logits(src, tok, 7, lf);
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_not_equal(la, lf, sizeof la);
    printf("gemma4 attention_k_eq_v: V from k_proj on the full layer, bit for bit\n");
    free(ta);
    free(tb);
    hr_st_close(f);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
}

/* ---- config errors ------------------------------------------------------------------ */

static void expect_config_error(const char *json, int code, const char *needle) {
    json_t *cfg = json_loads(json, 0, NULL);
    assert_non_null(cfg);
    hr_hparams hp;
    hr_error err = {0};
    int rc = hr_hparams_from_json(&hp, cfg, NULL, &err);
    if (rc != code || !strstr(err.msg, needle))
        fail_msg("%s: got %d '%s', want %d '%s'", json, rc, err.msg, code, needle);
    hr_hparams_deinit(&hp);
    json_decref(cfg);
}

#define BASE "\"vocab_size\": 8, \"hidden_size\": 8, \"num_hidden_layers\": 2, " \
             "\"num_attention_heads\": 2, \"intermediate_size\": 8"

static void test_config_errors(void **state) {
    (void)state;
    expect_config_error("{\"model_type\": \"qwen3_moe\", " BASE ", \"num_experts\": 4, "
                        "\"num_experts_per_tok\": 5}", HR_EFORMAT, "num_experts_per_tok");
    expect_config_error("{\"model_type\": \"qwen3_moe\", " BASE ", \"num_experts\": 4, "
                        "\"num_experts_per_tok\": 2, \"mlp_only_layers\": [7]}", HR_EFORMAT,
                        "mlp_only_layers");
    expect_config_error("{\"model_type\": \"qwen2_moe\", " BASE ", \"num_experts\": 4, "
                        "\"num_experts_per_tok\": 2}", HR_EFORMAT,
                        "shared_expert_intermediate_size");
    expect_config_error("{\"model_type\": \"qwen3_next\", " BASE ", \"num_experts\": 4, "
                        "\"num_experts_per_tok\": 2, \"shared_expert_intermediate_size\": 8, "
                        "\"layer_types\": [\"linear_attention\", \"full_attention\"]}",
                        HR_EFORMAT, "linear_num_key_heads");
    expect_config_error("{\"model_type\": \"qwen3_moe\", " BASE ", \"num_experts\": 4, "
                        "\"num_experts_per_tok\": 2, \"layer_types\": [\"linear_attention\", "
                        "\"full_attention\"]}", HR_EUNSUPPORTED, "layer type 'linear_attention'");
    expect_config_error("{\"model_type\": \"glm4_moe\", " BASE ", \"n_routed_experts\": 8, "
                        "\"num_experts_per_tok\": 2, \"n_shared_experts\": 1, \"n_group\": 3}",
                        HR_EFORMAT, "'n_group' (3)");
    expect_config_error("{\"model_type\": \"glm4_moe\", " BASE ", \"n_routed_experts\": 8, "
                        "\"num_experts_per_tok\": 2}", HR_EFORMAT, "'n_shared_experts'");
    expect_config_error("{\"model_type\": \"granitemoehybrid\", " BASE ", "
                        "\"num_local_experts\": 0, \"layer_types\": [\"mamba\", \"attention\"]}",
                        HR_EUNSUPPORTED, "'num_local_experts' 0");
    expect_config_error("{\"model_type\": \"granitemoehybrid\", " BASE ", "
                        "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, "
                        "\"shared_intermediate_size\": 8, \"mamba_n_heads\": 3, "
                        "\"mamba_d_state\": 4, \"layer_types\": [\"mamba\", \"attention\"]}",
                        HR_EFORMAT, "Mamba-2 dimensions");
    expect_config_error("{\"model_type\": \"qwen3_next\", " BASE ", \"num_experts\": 4, "
                        "\"num_experts_per_tok\": 2, \"shared_expert_intermediate_size\": 8, "
                        "\"layer_types\": [\"mamba\", \"full_attention\"]}", HR_EUNSUPPORTED,
                        "layer type 'mamba'");
    expect_config_error("{\"model_type\": \"granitemoehybrid\", " BASE ", "
                        "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, "
                        "\"shared_intermediate_size\": 8, \"mamba_n_heads\": 2, "
                        "\"mamba_d_state\": 4, \"time_step_limit\": [0.001, 0.1], "
                        "\"layer_types\": [\"mamba\", \"attention\"]}", HR_EUNSUPPORTED,
                        "time_step_limit");
    /* Granite 4.0-H's config.json as the hub has it (4.x: "mamba" / "attention") and as
     * transformers 5.x writes it (the fixture: "linear_attention" / "full_attention") */
    json_t *cfg = json_loads("{\"model_type\": \"granitemoehybrid\", " BASE ", "
                             "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, "
                             "\"shared_intermediate_size\": 8, \"mamba_n_heads\": 2, "
                             "\"mamba_d_state\": 4, \"layer_types\": [\"mamba\", "
                             "\"attention\"]}", 0, NULL);
    hr_hparams hp;
    hr_error err = {0};
    assert_int_equal(hr_hparams_from_json(&hp, cfg, NULL, &err), 0);
    assert_true(hp.layer_linear[0] && !hp.layer_linear[1] && !hp.layer_rope[1]);
    assert_int_equal(hp.mb_inner, 16);
    assert_int_equal(hp.mb_head_dim, 8);
    hr_hparams_deinit(&hp);
    json_decref(cfg);
}

/* Gemma-4: what the forward pass does not do is refused, naming the field;
 * what it does is read as transformers reads it. */
#define GEMMA4 "{\"model_type\": \"gemma4_text\", " BASE ", \"num_key_value_heads\": 1, " \
               "\"head_dim\": 4, \"sliding_window\": 4, \"layer_types\": " \
               "[\"sliding_attention\", \"full_attention\"]"

static void test_gemma4_config(void **state) {
    (void)state;
    expect_config_error(GEMMA4 ", \"hidden_size_per_layer_input\": 256}", HR_EUNSUPPORTED,
                        "not supported yet: gemma4_text hidden_size_per_layer_input 256");
    expect_config_error(GEMMA4 ", \"hidden_size_per_layer_input\": 0, "
                        "\"num_kv_shared_layers\": 1}", HR_EUNSUPPORTED,
                        "gemma4_text num_kv_shared_layers 1");
    expect_config_error(GEMMA4 ", \"hidden_size_per_layer_input\": 0, "
                        "\"use_bidirectional_attention\": \"all\"}", HR_EUNSUPPORTED,
                        "gemma4_text use_bidirectional_attention 'all'");
    /* no per_layer_config: transformers takes global_head_dim, 512 when absent */
    expect_config_error(GEMMA4 ", \"hidden_size_per_layer_input\": 0}", HR_EUNSUPPORTED,
                        "gemma4_text global_head_dim 512");
    expect_config_error(GEMMA4 ", \"hidden_size_per_layer_input\": 0, "
                        "\"global_head_dim\": 8}", HR_EUNSUPPORTED, "global_head_dim 8");
    expect_config_error(GEMMA4 ", \"hidden_size_per_layer_input\": 0, "
                        "\"per_layer_config\": {\"1\": {\"head_dim\": 8}}}", HR_EUNSUPPORTED,
                        "per_layer_config layer 1 head_dim 8");
    expect_config_error(GEMMA4 ", \"hidden_size_per_layer_input\": 0, \"global_head_dim\": 4, "
                        "\"attention_k_eq_v\": true, \"num_global_key_value_heads\": 2}",
                        HR_EUNSUPPORTED, "num_global_key_value_heads 2");
    expect_config_error(GEMMA4 ", \"hidden_size_per_layer_input\": 0, \"global_head_dim\": 4, "
                        "\"rope_parameters\": {\"full_attention\": {\"rope_type\": "
                        "\"proportional\", \"rope_theta\": 1e6}}}", HR_EUNSUPPORTED,
                        "rope type 'proportional'");
    expect_config_error(GEMMA4 ", \"hidden_size_per_layer_input\": 0, \"global_head_dim\": 4, "
                        "\"enable_moe_block\": true, \"num_experts\": 4}", HR_EFORMAT,
                        "'top_k_experts' (0)");
    /* accepted: the last layer full whatever layer_types says, q.k unscaled, top_k_experts,
     * K as V on the full layers; without enable_moe_block a dense model */
    json_t *cfg = json_loads("{\"model_type\": \"gemma4_text\", " BASE ", "
                             "\"num_key_value_heads\": 1, \"head_dim\": 4, "
                             "\"sliding_window\": 4, \"hidden_size_per_layer_input\": 0, "
                             "\"layer_types\": [\"sliding_attention\", \"sliding_attention\"], "
                             "\"per_layer_config\": {\"1\": {\"head_dim\": 4}}, "
                             "\"attention_k_eq_v\": true, \"num_global_key_value_heads\": 1, "
                             "\"enable_moe_block\": true, \"num_experts\": 4, "
                             "\"top_k_experts\": 2, \"moe_intermediate_size\": 4}", 0, NULL);
    hr_hparams hp;
    hr_error err = {0};
    assert_int_equal(hr_hparams_from_json(&hp, cfg, NULL, &err), 0);
    assert_true(hp.layer_sliding[0] && !hp.layer_sliding[1] && hp.k_eq_v);
    assert_true(hp.attn_scale == 1.0f && hp.n_experts_used == 2 && hp.d_ff_expert == 4);
    assert_true(hp.layer_moe[0] && hp.layer_moe[1]);
    hr_hparams_deinit(&hp);
    json_object_set_new(cfg, "enable_moe_block", json_false());
    assert_int_equal(hr_hparams_from_json(&hp, cfg, NULL, &err), 0);
    assert_true(hp.n_experts == 0 && !hp.layer_moe[0] && !hp.layer_moe[1]);
    hr_hparams_deinit(&hp);
    json_decref(cfg);
}

int main(void) {
    const char *root = getenv("HEARTH_ROOT");
    snprintf(g_root, sizeof g_root, "%s/tests/fixtures/models", root ? root : ".");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_recurrent_slots),
        cmocka_unit_test(test_gpt_oss_mxfp4),
        cmocka_unit_test(test_switch_mlp),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_gemma4_config),
        cmocka_unit_test(test_gemma4_k_eq_v),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
