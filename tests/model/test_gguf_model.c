/* GGUF <-> Hugging Face for the gemma family (src/model/gguf_model.c):
 *  - norms: an exported GGUF stores gemma's norm weights with the 1 added
 *    (bit-exact w + 1, as convert_hf_to_gguf.py writes them) and the loaded
 *    GGUF model uses them as they are: its logits equal the safetensors
 *    model's;
 *  - what llama.cpp derives rather than reads, on hand-written files with
 *    llama.cpp's keys: attention scale (head_dim, or n_embd / n_head for the
 *    27B layer counts), sliding pattern (period 2 / 6, or the file's),
 *    local RoPE base, softcapping defaults, tied output, names;
 *  - export of a config a GGUF cannot express fails and writes nothing. */
#include "core/error.h"
#include "support/runner.h"
#include "io/gguf.h"
#include "io/gguf_write.h"
#include "model/config.h"
#include "model/convert.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "model/weights.h"

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

static char g_root[4096], g_tmp[4096];

/* ---- helpers --------------------------------------------------------------- */

/* Fixture `name` at g_tmp/<out> with config.json updated by the JSON object
 * patch (a null value sets null); weights linked. Returns the path. */
static const char *fixture_copy(const char *name, const char *out, const char *patch,
                                char *dir, size_t n) {
    char from[8300], to[8300];
    snprintf(dir, n, "%s/%s", g_tmp, out);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(from, sizeof from, "%s/%s/model.safetensors", g_root, name);
    snprintf(to, sizeof to, "%s/model.safetensors", dir);
    assert_int_equal(symlink(from, to), 0);
    snprintf(from, sizeof from, "%s/%s/config.json", g_root, name);
    json_t *cfg = json_load_file(from, 0, NULL), *p = json_loads(patch, 0, NULL);
    assert_non_null(cfg);
    assert_non_null(p);
    assert_int_equal(json_object_update(cfg, p), 0);
    snprintf(to, sizeof to, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, to, 0), 0);
    json_decref(cfg);
    json_decref(p);
    return dir;
}

static int export_f32(const char *src, const char *path, hr_error *err) {
    hr_convert_opts co = {.src = src, .out = path, .bits = 4, .group = 64,
                          .dtype = HR_DTYPE_COUNT, .gguf = HR_DTYPE_F32};
    return hr_convert(&co, err);
}

/* ---- norms are taken as they are --------------------------------------------- */

/* The GGUF tensor gguf_name holds exactly hf_name's values + 1. */
static void check_shifted(const hr_gguf *g, const hr_weights *w, const char *gguf_name,
                          const char *hf_name) {
    const hr_gguf_tensor *gt = hr_gguf_find_tensor(g, gguf_name);
    const hr_tensor *t = hr_weights_find(w, hf_name);
    if (!gt || !t)
        fail_msg("%s / %s missing", gguf_name, hf_name);
    assert_int_equal(gt->type, 0); /* F32 */
    assert_int_equal(t->dtype, HR_DTYPE_F32);
    assert_int_equal(gt->ne[0], t->shape[0]);
    const float *a = gt->data, *b = t->data;
    for (int64_t i = 0; i < t->shape[0]; i++)
        if (a[i] != b[i] + 1.0f)
            fail_msg("%s[%lld] = %.9g, want %s + 1 = %.9g", gguf_name, (long long)i, a[i],
                     hf_name, b[i] + 1.0f);
}

static void norms_case(const char *name, const char *src) {
    char path[8300];
    snprintf(path, sizeof path, "%s/%s.gguf", g_tmp, name);
    hr_error err = {0};
    if (export_f32(src, path, &err))
        fail_msg("%s: %s", name, err.msg);
    /* the file: w + 1 under llama.cpp's names */
    hr_gguf *g = NULL;
    hr_weights *w = NULL;
    assert_int_equal(hr_gguf_open(&g, path, &err), 0);
    assert_int_equal(hr_weights_open(&w, src, &err), 0);
    bool four = strcmp(name, "gemma") != 0;
    check_shifted(g, w, "output_norm.weight", "model.norm.weight");
    check_shifted(g, w, "blk.1.attn_norm.weight", "model.layers.1.input_layernorm.weight");
    check_shifted(g, w, "blk.1.ffn_norm.weight", four ? "model.layers.1.pre_feedforward_layernorm.weight"
                                                     : "model.layers.1.post_attention_layernorm.weight");
    if (four) {
        check_shifted(g, w, "blk.1.post_attention_norm.weight",
                      "model.layers.1.post_attention_layernorm.weight");
        check_shifted(g, w, "blk.1.post_ffw_norm.weight",
                      "model.layers.1.post_feedforward_layernorm.weight");
    }
    if (!strcmp(name, "gemma3_text")) {
        check_shifted(g, w, "blk.1.attn_q_norm.weight", "model.layers.1.self_attn.q_norm.weight");
        check_shifted(g, w, "blk.1.attn_k_norm.weight", "model.layers.1.self_attn.k_norm.weight");
    }
    assert_null(hr_gguf_find_tensor(g, "output.weight")); /* tied */
    hr_weights_close(w);
    hr_gguf_close(g);

    /* the model: norms used as they are, the same logits */
    hr_model *a = NULL, *b = NULL;
    if (hr_model_open(&a, src, &err) || hr_model_open(&b, path, &err))
        fail_msg("%s: %s", name, err.msg);
    assert_true(a->hp.norm_offset == 1.0f && b->hp.norm_offset == 0.0f);
    hr_runner *ra = NULL, *rb = NULL;
    hr_runner_opts ro = {.n_threads = 2, .n_ctx = 128};
    assert_int_equal(hr_runner_new(&ra, a, &ro, &err), 0);
    assert_int_equal(hr_runner_new(&rb, b, &ro, &err), 0);
    int V = a->hp.n_vocab;
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) /* longer than the fixtures' 16-token window */
        prompt[i] = (int32_t)((i * 37 + 11) % V);
    assert_int_equal(hr_runner_eval(ra, prompt, 40, la, &err), 0);
    assert_int_equal(hr_runner_eval(rb, prompt, 40, lb, &err), 0);
    double worst = 0;
    for (int i = 0; i < V; i++)
        worst = fmax(worst, fabs((double)la[i] - lb[i]));
    printf("gguf %-12s F32: max |logit - safetensors| %.1e over %d logits\n", name, worst, V);
    assert_true(worst <= 1e-5);
    free(la);
    free(lb);
    hr_runner_free(ra);
    hr_runner_free(rb);
    hr_model_free(a);
    hr_model_free(b);
    unlink(path);
}

static void test_norms_as_is(void **state) {
    (void)state;
    char src[8300], dir[8300];
    snprintf(src, sizeof src, "%s/gemma", g_root);
    norms_case("gemma", src);
    /* query_pre_attn_scalar as llama.cpp derives it (see test_export_errors) */
    norms_case("gemma2", fixture_copy("gemma2", "g2", "{\"query_pre_attn_scalar\": 16}",
                                      dir, sizeof dir));
    norms_case("gemma3_text", fixture_copy("gemma3_text", "g3",
                                           "{\"query_pre_attn_scalar\": 16}", dir, sizeof dir));
}

/* ---- what llama.cpp derives ---------------------------------------------------- */

typedef struct kv {
    const char *key; /* after "{arch}." */
    char type;       /* 'u' u32, 'f' f32, 's' string, 'a' an array (llama.cpp ignores) */
    double v;
    const char *s;
} kv;

/* A GGUF with llama.cpp's keys for arch (and the extra ones), a 2-row
 * token_embd; its config resolved into hp, or the error. */
static int hand_config(const char *arch, int n_layers, int d, int n_heads, int head_dim,
                       const kv *extra, size_t n_extra, bool output, hr_hparams *hp,
                       hr_error *err) {
    static float emb[2 * 512];
    char path[8300], k[128];
    snprintf(path, sizeof path, "%s/hand.gguf", g_tmp);
    hr_gguf_w *w = hr_gguf_w_new();
#define K(s) (snprintf(k, sizeof k, "%s.%s", arch, s), k)
    hr_gguf_w_str(w, "general.architecture", arch);
    hr_gguf_w_u32(w, K("context_length"), 8192);
    hr_gguf_w_u32(w, K("embedding_length"), (uint32_t)d);
    hr_gguf_w_u32(w, K("block_count"), (uint32_t)n_layers);
    hr_gguf_w_u32(w, K("feed_forward_length"), (uint32_t)(2 * d));
    hr_gguf_w_u32(w, K("attention.head_count"), (uint32_t)n_heads);
    hr_gguf_w_u32(w, K("attention.head_count_kv"), 1);
    hr_gguf_w_u32(w, K("attention.key_length"), (uint32_t)head_dim);
    hr_gguf_w_u32(w, K("attention.value_length"), (uint32_t)head_dim);
    hr_gguf_w_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-6f);
    for (size_t i = 0; i < n_extra; i++) {
        if (extra[i].type == 'u') {
            hr_gguf_w_u32(w, K(extra[i].key), (uint32_t)extra[i].v);
        } else if (extra[i].type == 'f') {
            hr_gguf_w_f32(w, K(extra[i].key), (float)extra[i].v);
        } else if (extra[i].type == 's') {
            hr_gguf_w_str(w, K(extra[i].key), extra[i].s);
        } else {
            int32_t pat[4] = {1, 0, 1, 0};
            hr_gguf_w_arr_i32(w, K(extra[i].key), pat, 4);
        }
    }
#undef K
    uint64_t ne[2] = {(uint64_t)d, 2};
    assert_true(d <= 512);
    hr_gguf_w_tensor(w, "token_embd.weight", 0, 2, ne, emb, (size_t)d * 2 * 4);
    if (output)
        hr_gguf_w_tensor(w, "output.weight", 0, 2, ne, emb, (size_t)d * 2 * 4);
    assert_int_equal(hr_gguf_w_write(w, path, err), 0);
    hr_gguf_w_free(w);
    hr_gguf *g = NULL;
    json_t *cfg = NULL;
    bool permuted = true;
    assert_int_equal(hr_gguf_open(&g, path, err), 0);
    int rc = hr_gguf_config(g, &cfg, &permuted, err);
    if (!rc) {
        rc = hr_hparams_from_json(hp, cfg, NULL, err);
        assert_int_equal(permuted, !strcmp(arch, "llama"));
    }
    json_decref(cfg);
    hr_gguf_close(g);
    unlink(path);
    return rc;
}

static void derived(const char *arch, int n_layers, int d, int n_heads, int head_dim,
                    const kv *extra, size_t n_extra, bool output, hr_hparams *hp) {
    hr_error err = {0};
    if (hand_config(arch, n_layers, d, n_heads, head_dim, extra, n_extra, output, hp, &err))
        fail_msg("%s: %s", arch, err.msg);
}

/* The end-of-generation ids of a GGUF whose vocabulary is toks[0..n) and
 * whose metadata names eos (and eot when >= 0). */
static void eog_of(const char *const *toks, size_t n, int eos, int eot, hr_hparams *hp) {
    static float emb[16 * 16];
    char path[8300];
    snprintf(path, sizeof path, "%s/eog.gguf", g_tmp);
    hr_gguf_w *w = hr_gguf_w_new();
    hr_gguf_w_str(w, "general.architecture", "qwen3");
    hr_gguf_w_u32(w, "qwen3.embedding_length", 16);
    hr_gguf_w_u32(w, "qwen3.block_count", 1);
    hr_gguf_w_u32(w, "qwen3.feed_forward_length", 32);
    hr_gguf_w_u32(w, "qwen3.attention.head_count", 2);
    hr_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    hr_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, n);
    hr_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (eot >= 0)
        hr_gguf_w_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)eot);
    uint64_t ne[2] = {16, 16};
    hr_gguf_w_tensor(w, "token_embd.weight", 0, 2, ne, emb, sizeof emb);
    hr_error err = {0};
    assert_int_equal(hr_gguf_w_write(w, path, &err), 0);
    hr_gguf_w_free(w);
    hr_gguf *g = NULL;
    json_t *cfg = NULL;
    bool permuted;
    assert_int_equal(hr_gguf_open(&g, path, &err), 0);
    if (hr_gguf_config(g, &cfg, &permuted, &err) || hr_hparams_from_json(hp, cfg, NULL, &err))
        fail_msg("eog: %s", err.msg);
    json_decref(cfg);
    hr_gguf_close(g);
    unlink(path);
}

static void assert_eos(const hr_hparams *hp, const int *want, int n) {
    if (hp->n_eos != n)
        fail_msg("%d end-of-generation ids, want %d", hp->n_eos, n);
    for (int i = 0; i < n; i++)
        if (hp->eos_ids[i] != want[i])
            fail_msg("end-of-generation id %d is %d, want %d", i, hp->eos_ids[i], want[i]);
}

/* A GGUF stops where llama.cpp does: the metadata's eos (and eot), then
 * every token whose text is an end of turn (gemma's <end_of_turn> when the
 * file's eos is <eos>; ChatML's <|im_end|>; <|eot_id|>, <|eom_id|>), each
 * once; "<|end|>" is not one next to "<|return|>" and "<|call|>". */
static void test_eog(void **state) {
    (void)state;
    hr_hparams hp;
    static const char *const gemma[] = {"<pad>", "<eos>", "<bos>", "a", "b", "<end_of_turn>",
                                        "<start_of_turn>", "c"};
    eog_of(gemma, 8, 1, -1, &hp);
    assert_eos(&hp, (int[]){1, 5}, 2);
    hr_hparams_deinit(&hp);
    static const char *const llama3[] = {"x", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>",
                                         "<|start_header_id|>", "<|im_end|>x"};
    eog_of(llama3, 6, 1, 2, &hp);
    assert_eos(&hp, (int[]){1, 2, 3}, 3);
    hr_hparams_deinit(&hp);
    static const char *const harmony[] = {"<|end|>", "<|return|>", "<|call|>", "<|endoftext|>"};
    eog_of(harmony, 4, 3, -1, &hp);
    assert_eos(&hp, (int[]){3, 1, 2}, 3);
    hr_hparams_deinit(&hp);
    static const char *const phi[] = {"<|end|>", "<|endoftext|>", "<|user|>"};
    eog_of(phi, 3, 1, -1, &hp);
    assert_eos(&hp, (int[]){1, 0}, 2);
    hr_hparams_deinit(&hp);
}

static void assert_sliding(const hr_hparams *hp, const char *pattern) {
    assert_int_equal((int)strlen(pattern), hp->n_layers);
    for (int i = 0; i < hp->n_layers; i++)
        if (hp->layer_sliding[i] != (pattern[i] == 'S'))
            fail_msg("layer %d: sliding %d, want pattern %s", i, hp->layer_sliding[i], pattern);
}

static void test_derived(void **state) {
    (void)state;
    hr_hparams hp;
    /* gemma3: window given, no pattern, no local base: 5 sliding + 1 global,
     * local base 10000 unscaled, global linear; q scale 1/sqrt(head_dim) */
    kv g3[] = {{"attention.sliding_window", 'u', 512, NULL}, {"rope.freq_base", 'f', 1e6, NULL},
               {"rope.scaling.type", 's', 0, "linear"}, {"rope.scaling.factor", 'f', 8, NULL}};
    derived("gemma3", 8, 256, 4, 32, g3, 4, false, &hp);
    assert_sliding(&hp, "SSSSSFSS");
    assert_int_equal(hp.sliding_window, 512);
    assert_true(hp.has_rope_local && hp.rope_local.theta == 10000.0 &&
                hp.rope_local.type == HR_ROPE_DEFAULT && hp.rope.theta == 1e6);
    assert_true(hp.rope.type == HR_ROPE_LINEAR && hp.rope.factor == 8.0);
    assert_true(hp.attn_scale == (float)(1.0 / sqrt(32.0)));
    assert_true(hp.attn_softcap == 0 && hp.final_softcap == 0);
    assert_true(hp.norm_offset == 1.0f); /* the arch's; hr_model_open zeroes it for a GGUF */
    assert_int_equal(hp.act, HR_ACT_GELU_TANH);
    assert_true(hp.tie_embeddings); /* no output.weight */
    hr_hparams_deinit(&hp);
    /* gemma3 "27B" (62 layers): 1/sqrt(n_embd / n_head); pattern and local
     * base from the file; an array pattern is ignored, as llama.cpp does */
    kv g3b[] = {{"attention.sliding_window", 'u', 1024, NULL},
                {"attention.sliding_window_pattern", 'u', 3, NULL},
                {"rope.freq_base_swa", 'f', 5000, NULL}, {"final_logit_softcapping", 'f', 30, NULL}};
    derived("gemma3", 62, 256, 4, 32, g3b, 4, true, &hp);
    assert_true(hp.attn_scale == (float)(1.0 / sqrt(64.0)));
    for (int i = 0; i < 62; i++)
        assert_int_equal(hp.layer_sliding[i], i % 3 != 2);
    assert_true(hp.rope_local.theta == 5000.0 && hp.final_softcap == 30.0f);
    assert_false(hp.tie_embeddings);
    hr_hparams_deinit(&hp);
    kv g3c[] = {{"attention.sliding_window", 'u', 64, NULL},
                {"attention.sliding_window_pattern", 'a', 0, NULL}};
    derived("gemma3", 7, 256, 4, 32, g3c, 2, false, &hp);
    assert_sliding(&hp, "SSSSSFS");
    hr_hparams_deinit(&hp);
    /* gemma3 without a window: no sliding layers, one rope */
    derived("gemma3", 4, 256, 4, 32, NULL, 0, false, &hp);
    assert_sliding(&hp, "FFFF");
    assert_false(hp.has_rope_local);
    hr_hparams_deinit(&hp);

    /* gemma2: always sliding (4096, period 2), softcapping 50 / 30 unless
     * given, local base = global base, output tied even with output.weight */
    kv g2[] = {{"rope.freq_base", 'f', 20000, NULL}};
    derived("gemma2", 4, 256, 4, 32, g2, 1, true, &hp);
    assert_sliding(&hp, "SFSF");
    assert_int_equal(hp.sliding_window, 4096);
    assert_true(hp.attn_softcap == 50.0f && hp.final_softcap == 30.0f);
    assert_true(hp.rope_local.theta == 20000.0 && hp.rope.theta == 20000.0);
    assert_true(hp.attn_scale == (float)(1.0 / sqrt(32.0)));
    assert_true(hp.tie_embeddings);
    hr_hparams_deinit(&hp);
    kv g2b[] = {{"attn_logit_softcapping", 'f', 20, NULL}, {"final_logit_softcapping", 'f', 10, NULL},
                {"attention.sliding_window", 'u', 256, NULL}};
    derived("gemma2", 46, 256, 4, 32, g2b, 3, false, &hp);
    assert_true(hp.attn_softcap == 20.0f && hp.final_softcap == 10.0f);
    assert_int_equal(hp.sliding_window, 256);
    assert_true(hp.attn_scale == (float)(1.0 / sqrt(64.0))); /* "27B" */
    hr_hparams_deinit(&hp);

    /* rope.dimension_count: the head dimension loads; less is partial
     * rotary, which these families do not have: refused, not misread */
    kv rot[] = {{"rope.dimension_count", 'u', 32, NULL}};
    derived("qwen3", 2, 256, 4, 32, rot, 1, false, &hp);
    assert_int_equal(hp.rot_dim, 32);
    hr_hparams_deinit(&hp);
    hr_error err = {0};
    kv half[] = {{"rope.dimension_count", 'u', 16, NULL}};
    assert_int_equal(hand_config("llama", 2, 256, 4, 32, half, 1, false, &hp, &err),
                     HR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "not supported yet"));
    assert_non_null(strstr(err.msg, "rope.dimension_count 16"));

    /* gemma: no sliding, 1/sqrt(head_dim), tied */
    derived("gemma", 2, 256, 4, 32, NULL, 0, true, &hp);
    assert_sliding(&hp, "FF");
    assert_true(hp.attn_scale == (float)(1.0 / sqrt(32.0)) && hp.tie_embeddings);
    assert_true(hp.attn_softcap == 0 && hp.final_softcap == 0);
    hr_hparams_deinit(&hp);
}

static void test_names(void **state) {
    (void)state;
    static const struct { const char *arch, *gguf, *hf; } cases[] = {
        {"gemma2", "blk.3.ffn_norm.weight", "model.layers.3.pre_feedforward_layernorm.weight"},
        {"gemma2", "blk.3.post_attention_norm.weight",
         "model.layers.3.post_attention_layernorm.weight"},
        {"gemma3", "blk.0.post_ffw_norm.weight", "model.layers.0.post_feedforward_layernorm.weight"},
        {"gemma3", "blk.0.attn_q_norm.weight", "model.layers.0.self_attn.q_norm.weight"},
        {"gemma", "blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
        {"llama", "blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
        {"llama", "blk.1.post_ffw_norm.weight", NULL},
        {"gemma", "blk.1.post_attention_norm.weight", NULL},
    };
    char path[8300];
    snprintf(path, sizeof path, "%s/names.gguf", g_tmp);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hr_gguf_w *w = hr_gguf_w_new();
        hr_gguf_w_str(w, "general.architecture", cases[i].arch);
        hr_error err = {0};
        assert_int_equal(hr_gguf_w_write(w, path, &err), 0);
        hr_gguf_w_free(w);
        hr_gguf *g = NULL;
        assert_int_equal(hr_gguf_open(&g, path, &err), 0);
        char buf[256];
        const char *hf = hr_gguf_hf_name(g, cases[i].gguf, buf, sizeof buf);
        if (cases[i].hf)
            assert_string_equal(hf, cases[i].hf);
        else
            assert_null(hf);
        hr_gguf_close(g);
        unlink(path);
    }
}

/* ---- configs a GGUF cannot express --------------------------------------------- */

static void export_fails(const char *name, const char *out, const char *patch, const char *want) {
    char src[8300], path[8300];
    if (patch)
        fixture_copy(name, out, patch, src, sizeof src);
    else
        snprintf(src, sizeof src, "%s/%s", g_root, name);
    snprintf(path, sizeof path, "%s/%s.gguf", g_tmp, out);
    hr_error err = {0};
    assert_int_equal(export_f32(src, path, &err), HR_EUNSUPPORTED);
    if (!strstr(err.msg, want))
        fail_msg("%s: error '%s' lacks '%s'", out, err.msg, want);
    assert_int_equal(access(path, F_OK), -1); /* nothing written */
    printf("%s\n", err.msg);
}

static void test_export_errors(void **state) {
    (void)state;
    /* the fixtures as they are: query_pre_attn_scalar 8, head_dim 16 */
    export_fails("gemma2", "qpas2", NULL, "not supported yet: GGUF export of gemma2 with "
                 "query_pre_attn_scalar 8 (llama.cpp's gemma2 takes 16, head_dim");
    export_fails("gemma3_text", "qpas3", NULL, "not supported yet: GGUF export of gemma3_text "
                 "with query_pre_attn_scalar 8");
    /* a layer pattern no period gives */
    export_fails("gemma3_text", "pattern", "{\"query_pre_attn_scalar\": 16, \"layer_types\": "
                 "[\"full_attention\", \"sliding_attention\", \"sliding_attention\"]}",
                 "not supported yet: GGUF export of gemma3_text with these layer_types");
    export_fails("gemma2", "softcap", "{\"query_pre_attn_scalar\": 16, "
                 "\"attn_logit_softcapping\": null}",
                 "not supported yet: GGUF export of gemma2 without attention and final logit "
                 "softcapping");
    export_fails("gemma3_text", "localrope", "{\"query_pre_attn_scalar\": 16, "
                 "\"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\", "
                 "\"rope_theta\": 1000000.0}, \"sliding_attention\": {\"rope_type\": \"linear\", "
                 "\"factor\": 2.0, \"rope_theta\": 10000.0}}}",
                 "not supported yet: GGUF export of gemma3_text with scaled RoPE on sliding layers");
    /* a sliding window llama.cpp's llama and qwen2 would not apply */
    export_fails("mistral", "swa", "{\"sliding_window\": 8}",
                 "not supported yet: GGUF export of mistral with a sliding window of 8 tokens "
                 "(llama.cpp's llama attends to the whole context of 4096)");
    export_fails("qwen2", "swa2", "{\"sliding_window\": 8, \"layer_types\": "
                 "[\"full_attention\", \"sliding_attention\", \"full_attention\"]}",
                 "not supported yet: GGUF export of qwen2 with a sliding window of 8 tokens");
    export_fails("gemma", "act", "{\"hidden_activation\": \"gelu\"}",
                 "not supported yet: GGUF export of gemma with an activation other than "
                 "gelu_pytorch_tanh");
}

int main(void) {
    const char *root = getenv("HEARTH_ROOT");
    snprintf(g_root, sizeof g_root, "%s/tests/fixtures/models", root ? root : ".");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hearth-ggufmodel-XXXXXX");
    if (!mkdtemp(g_tmp))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_norms_as_is),
        cmocka_unit_test(test_derived),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_eog),
        cmocka_unit_test(test_export_errors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd))
        rc = 1;
    return rc;
}
