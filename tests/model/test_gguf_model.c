/* GGUF <-> Hugging Face for the gemma family (src/model/gguf_model.c):
 *  - what llama.cpp derives rather than reads, on hand-written files with
 *    llama.cpp's keys: attention scale (head_dim, or n_embd / n_head for the
 *    27B layer counts), sliding pattern (period 2 / 6, or the file's),
 *    local RoPE base, softcapping defaults, tied output, names. */
#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_write.h"
#include "model/config.h"
#include "model/gguf_model.h"

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
#include <unistd.h>

static char g_tmp[4096];

/* ---- what llama.cpp derives ---------------------------------------------------- */

typedef struct kv {
    const char *key; /* after "{arch}." */
    char type;       /* 'u' u32, 'f' f32, 's' string, 'a' an array (llama.cpp ignores) */
    double v;
    const char *s;
} kv;

/* A GGUF with llama.cpp's keys for arch (and the extra ones), a 2-row
 * token_embd; its config resolved into hp. */
static void derived(const char *arch, int n_layers, int d, int n_heads, int head_dim,
                    const kv *extra, size_t n_extra, bool output, hr_hparams *hp) {
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
    hr_error err = {0};
    assert_int_equal(hr_gguf_w_write(w, path, &err), 0);
    hr_gguf_w_free(w);
    hr_gguf *g = NULL;
    json_t *cfg = NULL;
    bool permuted = true;
    assert_int_equal(hr_gguf_open(&g, path, &err), 0);
    if (hr_gguf_config(g, &cfg, &permuted, &err) || hr_hparams_from_json(hp, cfg, NULL, &err))
        fail_msg("%s: %s", arch, err.msg);
    assert_false(permuted);
    json_decref(cfg);
    hr_gguf_close(g);
    unlink(path);
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

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hearth-ggufmodel-XXXXXX");
    if (!mkdtemp(g_tmp))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_derived),
        cmocka_unit_test(test_names),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[8300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd))
        rc = 1;
    return rc;
}
