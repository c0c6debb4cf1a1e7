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
    bool kv_given = false; /* granitehybrid's array, in extra */
    for (size_t i = 0; i < n_extra; i++)
        kv_given |= !strcmp(extra[i].key, "attention.head_count_kv");
    if (!kv_given)
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
        assert_int_equal(permuted, !strcmp(arch, "llama") || !strncmp(arch, "granite", 7));
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

/* gemma4: the sliding layers' head size is config head_dim, the flags per
 * layer, q.k unscaled, a final softcap of 30 unless the file gives one (as
 * llama.cpp reads it), V = K where the full layers have no attn_v; per-layer
 * inputs, KV sharing and another head size on the full layers are refused
 * naming the config field */
static void test_gemma4_derived(void **state) {
    (void)state;
    hr_hparams hp;
    kv g4[] = {{"attention.sliding_window_pattern", 'a', 0, NULL},
               {"attention.key_length_swa", 'u', 32, NULL},
               {"attention.sliding_window", 'u', 64, NULL}, {"rope.freq_base", 'f', 1e6, NULL},
               {"rope.freq_base_swa", 'f', 1e4, NULL}};
    derived("gemma4", 4, 256, 4, 32, g4, 5, false, &hp);
    assert_sliding(&hp, "SFSF");
    assert_true(hp.head_dim == 32 && hp.sliding_window == 64 && hp.attn_scale == 1.0f);
    assert_true(hp.final_softcap == 30.0f && hp.tie_embeddings && hp.k_eq_v);
    assert_true(hp.rope.theta == 1e6 && hp.has_rope_local && hp.rope_local.theta == 1e4);
    assert_true(hp.n_experts == 0 && hp.act == HR_ACT_GELU_TANH);
    hr_hparams_deinit(&hp);
    kv nocap[] = {{"attention.sliding_window_pattern", 'a', 0, NULL},
                  {"attention.sliding_window", 'u', 64, NULL},
                  {"final_logit_softcapping", 'f', 0, NULL}};
    derived("gemma4", 4, 256, 4, 32, nocap, 3, false, &hp);
    assert_true(hp.final_softcap == 0);
    hr_hparams_deinit(&hp);
    static const struct {
        kv k;
        const char *msg;
    } bad[] = {
        {{"attention.key_length_swa", 'u', 16, NULL}, "global_head_dim 32"},
        {{"attention.shared_kv_layers", 'u', 2, NULL}, "num_kv_shared_layers 2"},
        {{"embedding_length_per_layer_input", 'u', 256, NULL}, "hidden_size_per_layer_input 256"},
        {{"rope.dimension_count_swa", 'u', 16, NULL}, "rope.dimension_count_swa 16"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kv x[3] = {{"attention.sliding_window_pattern", 'a', 0, NULL},
                   {"attention.sliding_window", 'u', 64, NULL}, bad[i].k};
        hr_error err = {0};
        if (hand_config("gemma4", 4, 256, 4, 32, x, 3, false, &hp, &err) != HR_EUNSUPPORTED ||
            !strstr(err.msg, "not supported yet") || !strstr(err.msg, bad[i].msg))
            fail_msg("gemma4 %s: '%s', want '%s'", bad[i].k.key, err.msg, bad[i].msg);
    }
    hr_error err = {0};
    assert_int_equal(hand_config("gemma4", 4, 256, 4, 32, NULL, 0, false, &hp, &err),
                     HR_EFORMAT);
    assert_non_null(strstr(err.msg, "sliding_window_pattern"));
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
        {"granitehybrid", "blk.0.ssm_a", "model.layers.0.mamba.A"},
        {"granitehybrid", "blk.0.ssm_dt.bias", "model.layers.0.mamba.dt_bias"},
        {"granitehybrid", "blk.2.ffn_gate_shexp.weight", "model.layers.2.shared_mlp.gate_proj.weight"},
        {"granitehybrid", "blk.2.ffn_down_shexp.weight",
         "model.layers.2.shared_mlp.output_linear.weight"},
        {"granitemoe", "blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight"},
        {"granitemoe", "blk.1.ffn_gate_inp.weight", "model.layers.1.block_sparse_moe.router.layer.weight"},
        {"qwen3next", "blk.0.ssm_a", "model.layers.0.linear_attn.A"},
        {"qwen3next", "blk.0.attn_gate.weight", "model.layers.0.linear_attn.in_proj_z.weight"},
        {"qwen3next", "blk.2.post_attention_norm.weight",
         "model.layers.2.post_attention_layernorm.weight"},
        {"qwen3next", "blk.1.ffn_norm.weight", NULL},
        {"glm4moe", "blk.1.exp_probs_b.bias", "model.layers.1.mlp.gate.e_score_correction_bias"},
        {"glm4moe", "blk.1.ffn_up_shexp.weight", "model.layers.1.mlp.shared_experts.up_proj.weight"},
        {"qwen3moe", "blk.1.exp_probs_b.bias", NULL},
        {"gemma4", "blk.1.ffn_norm.weight", "model.layers.1.pre_feedforward_layernorm.weight"},
        {"gemma4", "blk.1.post_ffw_norm_1.weight",
         "model.layers.1.post_feedforward_layernorm_1.weight"},
        {"gemma4", "blk.1.ffn_gate_up_exps.weight", "model.layers.1.experts.gate_up_proj"},
        {"gemma4", "blk.1.ffn_down_exps.scale", "model.layers.1.router.per_expert_scale"},
        {"gemma4", "blk.1.ffn_gate_inp.scale", "model.layers.1.router.scale"},
        {"gemma4", "blk.1.layer_output_scale.weight", "model.layers.1.layer_scalar"},
        {"gemma3", "blk.1.layer_output_scale.weight", NULL},
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

/* ---- MoE and hybrid families in llama.cpp's layout ------------------------------ */

/* Tensor name of g with dims ne (fastest first; trailing 0s: fewer dims),
 * as f32 data. */
static const float *dims(const hr_gguf *g, const char *name, uint64_t ne0, uint64_t ne1,
                         uint64_t ne2) {
    const hr_gguf_tensor *t = hr_gguf_find_tensor(g, name);
    if (!t)
        fail_msg("%s: missing", name);
    uint64_t want[3] = {ne0, ne1, ne2};
    uint32_t nd = ne2 ? 3 : ne1 ? 2 : 1;
    if (t->n_dims != nd)
        fail_msg("%s: %u dims, want %u", name, t->n_dims, nd);
    for (uint32_t d = 0; d < nd; d++)
        if (t->ne[d] != want[d])
            fail_msg("%s: ne[%u] = %llu, want %llu", name, d, (unsigned long long)t->ne[d],
                     (unsigned long long)want[d]);
    return t->type == 0 ? t->data : NULL;
}

static double key_num(const hr_gguf *g, const char *key) {
    int64_t i = hr_gguf_find(g, key), v;
    double f;
    int b;
    if (i < 0)
        fail_msg("key %s: missing", key);
    if (!hr_gguf_get_int(g, i, &v))
        return (double)v;
    if (!hr_gguf_get_bool(g, i, &b))
        return b;
    assert_int_equal(hr_gguf_get_float(g, i, &f), 0);
    return f;
}

/* Row r of an f32 GGUF matrix (cols wide) equals row s of HF tensor t. */
static void same_row(const float *gd, int64_t r, const hr_tensor *t, int64_t s, int64_t cols,
                     const char *what) {
    assert_int_equal(t->dtype, HR_DTYPE_F32);
    if (memcmp(gd + r * cols, (const float *)t->data + s * cols, (size_t)cols * 4))
        fail_msg("%s: GGUF row %lld is not HF row %lld", what, (long long)r, (long long)s);
}

/* An exported fixture: its GGUF and its safetensors open. */
static void export_open(const char *src, const char *out, hr_gguf **g, hr_weights **w) {
    char path[8300];
    snprintf(path, sizeof path, "%s/%s.gguf", g_tmp, out);
    hr_error err = {0};
    if (export_f32(src, path, &err) || hr_gguf_open(g, path, &err) ||
        hr_weights_open(w, src, &err))
        fail_msg("%s: %s", out, err.msg);
    unlink(path); /* mapped */
}

static void test_hybrid_layout(void **state) {
    (void)state;
    char src[8300];
    hr_gguf *g;
    hr_weights *w;
    /* qwen3next: in_proj_qkvz [q k v z] per key head -> attn_qkv + attn_gate;
     * ssm_a = -exp(A_log); (1 + w) norms + 1, the DeltaNet norm as is */
    snprintf(src, sizeof src, "%s/qwen3_next", g_root);
    export_open(src, "qnext", &g, &w);
    assert_true(key_num(g, "qwen3next.full_attention_interval") == 3);
    assert_true(key_num(g, "qwen3next.ssm.state_size") == 16);
    assert_true(key_num(g, "qwen3next.ssm.group_count") == 2);
    assert_true(key_num(g, "qwen3next.ssm.time_step_rank") == 4);
    assert_true(key_num(g, "qwen3next.ssm.inner_size") == 64);
    assert_true(key_num(g, "qwen3next.ssm.conv_kernel") == 4);
    assert_true(key_num(g, "qwen3next.rope.dimension_count") == 4);
    assert_true(key_num(g, "qwen3next.expert_shared_feed_forward_length") == 32);
    const float *qkv = dims(g, "blk.0.attn_qkv.weight", 64, 128, 0);
    const float *z = dims(g, "blk.0.attn_gate.weight", 64, 64, 0);
    const hr_tensor *hf = hr_weights_find(w, "model.layers.0.linear_attn.in_proj_qkvz.weight");
    /* per key head (dk 16, rv 32): W = 96 rows [q 16 | k 16 | v 32 | z 32] */
    same_row(qkv, 0, hf, 0, 64, "q of head 0");
    same_row(qkv, 17, hf, 96 + 1, 64, "q of head 1");
    same_row(qkv, 32, hf, 16, 64, "k of head 0");
    same_row(qkv, 64 + 32, hf, 96 + 32, 64, "v of head 1");
    same_row(z, 31, hf, 32 + 32 + 31, 64, "z of head 0");
    same_row(z, 32, hf, 96 + 64, 64, "z of head 1");
    dims(g, "blk.0.ssm_ba.weight", 64, 8, 0);
    dims(g, "blk.0.ssm_conv1d.weight", 4, 128, 0);
    dims(g, "blk.0.ssm_dt.bias", 4, 0, 0);
    dims(g, "blk.0.ssm_out.weight", 64, 64, 0);
    dims(g, "blk.0.ffn_gate_exps.weight", 64, 32, 8);
    dims(g, "blk.0.ffn_gate_inp_shexp.weight", 64, 0, 0);
    dims(g, "blk.2.attn_q.weight", 64, 128, 0);
    const float *a = dims(g, "blk.0.ssm_a", 4, 0, 0);
    const float *alog = hr_weights_find(w, "model.layers.0.linear_attn.A_log")->data;
    for (int i = 0; i < 4; i++)
        assert_true(a[i] == -expf(alog[i]));
    const float *nw = dims(g, "blk.0.ssm_norm.weight", 16, 0, 0);
    assert_memory_equal(nw, hr_weights_find(w, "model.layers.0.linear_attn.norm.weight")->data, 64);
    check_shifted(g, w, "blk.2.post_attention_norm.weight",
                  "model.layers.2.post_attention_layernorm.weight");
    check_shifted(g, w, "blk.2.attn_q_norm.weight", "model.layers.2.self_attn.q_norm.weight");
    hr_weights_close(w);
    hr_gguf_close(g);

    /* granitehybrid: head_count_kv per layer (0: Mamba-2), experts and the
     * shared MLP split, q/k rows permuted as llama's, llama.cpp's shapes */
    snprintf(src, sizeof src, "%s/granitemoehybrid", g_root);
    export_open(src, "gh", &g, &w);
    int64_t ki = hr_gguf_find(g, "granitehybrid.attention.head_count_kv"), kv;
    hr_gguf_type et;
    uint64_t n;
    assert_int_equal(hr_gguf_get_arr(g, ki, &et, &n), 0);
    assert_int_equal((int)n, 3);
    for (uint64_t i = 0; i < 3; i++) {
        assert_int_equal(hr_gguf_arr_int(g, ki, i, &kv), 0);
        assert_int_equal(kv, i == 1 ? 2 : 0);
    }
    assert_true(key_num(g, "granitehybrid.rope.scaling.finetuned") == 0); /* nope */
    assert_true(key_num(g, "granitehybrid.ssm.inner_size") == 128);
    assert_true(key_num(g, "granitehybrid.ssm.time_step_rank") == 8);
    assert_true(key_num(g, "granitehybrid.attention.scale") == 0.2f);
    assert_true(key_num(g, "granitehybrid.logit_scale") == 0.8f);
    assert_true(key_num(g, "granitehybrid.expert_shared_feed_forward_length") == 64);
    dims(g, "blk.0.ssm_a", 1, 8, 0);
    dims(g, "blk.0.ssm_d", 1, 8, 0);
    dims(g, "blk.0.ssm_norm.weight", 128, 1, 0);
    dims(g, "blk.0.ssm_conv1d.weight", 4, 160, 0);
    dims(g, "blk.0.ssm_conv1d.bias", 160, 0, 0);
    dims(g, "blk.0.ssm_in.weight", 64, 296, 0);
    const float *ge = dims(g, "blk.0.ffn_gate_exps.weight", 64, 32, 4);
    const float *ue = dims(g, "blk.0.ffn_up_exps.weight", 64, 32, 4);
    dims(g, "blk.0.ffn_down_exps.weight", 32, 64, 4);
    const float *gs = dims(g, "blk.0.ffn_gate_shexp.weight", 64, 64, 0);
    const float *us = dims(g, "blk.0.ffn_up_shexp.weight", 64, 64, 0);
    hf = hr_weights_find(w, "model.layers.0.block_sparse_moe.input_linear.weight");
    same_row(ge, 32 + 5, hf, 64 + 5, 64, "expert 1's gate row 5");
    same_row(ue, 32 + 5, hf, 64 + 32 + 5, 64, "expert 1's up row 5");
    hf = hr_weights_find(w, "model.layers.0.shared_mlp.input_linear.weight");
    same_row(gs, 3, hf, 3, 64, "shared gate row 3");
    same_row(us, 3, hf, 64 + 3, 64, "shared up row 3");
    const float *q = dims(g, "blk.1.attn_q.weight", 64, 64, 0);
    hf = hr_weights_find(w, "model.layers.1.self_attn.q_proj.weight");
    for (int r = 0; r < 16; r++)
        same_row(q, r, hf, hr_gguf_unpermute_row(r, 16), 64, "permuted q");
    hr_weights_close(w);
    hr_gguf_close(g);

    /* glm4moe (without expert groups): the first layer dense, sigmoid routing */
    char dir[8300];
    fixture_copy("glm4_moe", "glm", "{\"n_group\": 1, \"topk_group\": 1}", dir, sizeof dir);
    export_open(dir, "glm", &g, &w);
    assert_true(key_num(g, "glm4moe.leading_dense_block_count") == 1);
    assert_true(key_num(g, "glm4moe.expert_gating_func") == 2);
    assert_true(key_num(g, "glm4moe.expert_shared_count") == 1);
    assert_true(key_num(g, "glm4moe.expert_weights_scale") == 2.5);
    assert_true(key_num(g, "glm4moe.expert_weights_norm") == 1);
    assert_true(key_num(g, "glm4moe.rope.dimension_count") == 8);
    dims(g, "blk.0.ffn_gate.weight", 64, 128, 0);
    dims(g, "blk.1.exp_probs_b.bias", 8, 0, 0);
    dims(g, "blk.1.ffn_gate_shexp.weight", 64, 32, 0);
    dims(g, "blk.1.post_attention_norm.weight", 64, 0, 0);
    hr_weights_close(w);
    hr_gguf_close(g);
}

/* What llama.cpp derives for them: glm4moe's multi-token prediction layers
 * (counted in block_count) left out, qwen3next's full attention every 4th
 * layer unless the file says, granitehybrid's layers from head_count_kv. */
static void test_hybrid_derived(void **state) {
    (void)state;
    hr_hparams hp;
    kv glm[] = {{"expert_count", 'u', 4, NULL}, {"expert_used_count", 'u', 2, NULL},
                {"nextn_predict_layers", 'u', 1, NULL},
                {"leading_dense_block_count", 'u', 1, NULL}, {"expert_shared_count", 'u', 1, NULL}};
    derived("glm4moe", 3, 64, 4, 16, glm, 5, true, &hp);
    assert_int_equal(hp.n_layers, 2);
    assert_true(hp.layer_moe[0] == false);
    hr_hparams_deinit(&hp);
    kv qn[] = {{"expert_count", 'u', 4, NULL}, {"expert_used_count", 'u', 2, NULL},
               {"ssm.conv_kernel", 'u', 4, NULL}, {"ssm.state_size", 'u', 16, NULL},
               {"ssm.group_count", 'u', 2, NULL}, {"ssm.time_step_rank", 'u', 4, NULL},
               {"ssm.inner_size", 'u', 64, NULL}, {"rope.dimension_count", 'u', 8, NULL},
               {"expert_shared_feed_forward_length", 'u', 32, NULL}};
    derived("qwen3next", 8, 64, 4, 32, qn, 9, true, &hp);
    for (int i = 0; i < 8; i++)
        assert_int_equal(hp.layer_linear[i], (i + 1) % 4 != 0);
    assert_int_equal(hp.rot_dim, 8);
    assert_true(hp.norm_topk && hp.ln_v_dim == 16 && hp.ln_v_heads == 4 && hp.ln_k_heads == 2);
    hr_hparams_deinit(&hp);
    kv gh[] = {{"expert_count", 'u', 4, NULL}, {"expert_used_count", 'u', 2, NULL},
               {"ssm.conv_kernel", 'u', 4, NULL}, {"ssm.state_size", 'u', 16, NULL},
               {"ssm.group_count", 'u', 1, NULL}, {"ssm.time_step_rank", 'u', 8, NULL},
               {"ssm.inner_size", 'u', 128, NULL}, {"attention.head_count_kv", 'a', 0, NULL},
               {"attention.scale", 'f', 0.25, NULL},
               {"expert_shared_feed_forward_length", 'u', 64, NULL}};
    derived("granitehybrid", 4, 64, 4, 16, gh, 10, true, &hp);
    for (int i = 0; i < 4; i++) /* head_count_kv {1, 0, 1, 0} */
        assert_int_equal(hp.layer_linear[i], i % 2 == 1);
    assert_true(hp.mb_heads == 8 && hp.mb_head_dim == 16 && hp.mb_inner == 128);
    assert_true(hp.attn_scale == 0.25f && hp.n_kv_heads == 1);
    assert_true(hp.layer_rope[0]); /* no rope.scaling.finetuned: llama.cpp's default, on */
    hr_hparams_deinit(&hp);
    /* a block_count past HR_MAX_LAYERS is refused before anything is built
     * per layer (fuzz_gguf_model: 2^31 layers made 14M JSON strings) */
    struct { const char *arch; const kv *extra; size_t n; } big[] = {
        {"qwen3next", qn, 9}, {"granitehybrid", gh, 10}, {"glm4moe", glm, 5}};
    for (size_t a = 0; a < 3; a++) {
        hr_error err = {0};
        int rc = hand_config(big[a].arch, 1 << 30, 64, 4, 16, big[a].extra, big[a].n, true, &hp,
                             &err);
        if (rc != HR_EFORMAT || !strstr(err.msg, "block_count 1073741824 is not 1..512"))
            fail_msg("%s: %s", big[a].arch, err.msg);
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
    /* gemma4: llama.cpp's full layers take rope_freqs (written as ones), not a linear factor */
    export_fails("gemma4_moe", "g4rope", "{\"rope_parameters\": {\"full_attention\": "
                 "{\"rope_type\": \"linear\", \"factor\": 2.0, \"rope_theta\": 1e6}, "
                 "\"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1e4}}}",
                 "not supported yet: GGUF export of gemma4_text with scaled RoPE");
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
    /* what llama.cpp's glm4moe and qwen3next would run otherwise */
    export_fails("glm4_moe", "groups", NULL, "not supported yet: GGUF export of glm4_moe with "
                 "expert groups (n_group 2, topk_group 1");
    export_fails("qwen3_next", "interval", "{\"layer_types\": [\"full_attention\", "
                 "\"linear_attention\", \"linear_attention\"]}",
                 "not supported yet: GGUF export of qwen3_next with these layer_types");
    export_fails("qwen3_next", "renorm", "{\"norm_topk_prob\": false}",
                 "not supported yet: GGUF export of qwen3_next with norm_topk_prob false");
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
        cmocka_unit_test(test_gemma4_derived),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_eog),
        cmocka_unit_test(test_export_errors),
        cmocka_unit_test(test_hybrid_layout),
        cmocka_unit_test(test_hybrid_derived),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd))
        rc = 1;
    return rc;
}
