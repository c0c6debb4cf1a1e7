/* config.json in transformers 4.x and 5.x spellings; model directories that
 * are broken in every way a user's download can be. */
#include "core/error.h"
#include "core/file.h"
#include "model/config.h"
#include "model/model.h"
#include "model/rope.h"
#include "io/safetensors.h"
#include "kernels/cpu/cpu.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int parse(hr_hparams *hp, const char *text, hr_error *err) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    assert_non_null(j);
    int rc = hr_hparams_from_json(hp, j, NULL, err);
    json_decref(j);
    return rc;
}

#define BASE "\"vocab_size\": 100, \"hidden_size\": 64, \"num_hidden_layers\": 2, " \
             "\"num_attention_heads\": 4, \"intermediate_size\": 128"

static void test_config_4x_and_5x(void **state) {
    (void)state;
    hr_hparams a, b;
    hr_error err;
    assert_int_equal(parse(&a, "{\"model_type\": \"llama\", " BASE ", \"rope_theta\": 500000.0,"
                               " \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}}", &err), 0);
    assert_int_equal(parse(&b, "{\"model_type\": \"llama\", " BASE ", \"rope_parameters\":"
                               " {\"rope_type\": \"linear\", \"factor\": 2.0, \"rope_theta\": 500000.0}}",
                           &err), 0);
    assert_int_equal(a.rope.type, HR_ROPE_LINEAR);
    assert_int_equal(b.rope.type, HR_ROPE_LINEAR);
    assert_true(a.rope.theta == 500000.0 && b.rope.theta == 500000.0);
    assert_int_equal(a.n_kv_heads, 4); /* defaults to num_attention_heads */
    assert_int_equal(a.head_dim, 16);
    hr_hparams_deinit(&a);
    hr_hparams_deinit(&b);

    /* gemma3 5.x: one rope dict per layer type; 4.x: rope_local_base_freq */
    hr_hparams g;
    assert_int_equal(parse(&g, "{\"model_type\": \"gemma3_text\", " BASE ", \"sliding_window\": 8,"
                               " \"layer_types\": [\"sliding_attention\", \"full_attention\"],"
                               " \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\","
                               " \"factor\": 8.0, \"rope_theta\": 1000000.0}, \"sliding_attention\":"
                               " {\"rope_type\": \"default\", \"rope_theta\": 10000.0}}}", &err), 0);
    assert_true(g.layer_sliding[0] && !g.layer_sliding[1]);
    assert_true(g.has_rope_local && g.rope_local.theta == 10000.0 && g.rope.factor == 8.0);
    hr_hparams_deinit(&g);
    assert_int_equal(parse(&g, "{\"model_type\": \"gemma3_text\", " BASE ", \"sliding_window\": 8,"
                               " \"sliding_window_pattern\": 6, \"rope_local_base_freq\": 10000.0}", &err), 0);
    assert_true(g.layer_sliding[0] && g.layer_sliding[1] && g.has_rope_local);
    hr_hparams_deinit(&g);
}

/* Gemma-3 4B's config.json as the hub has it (Gemma3ForConditionalGeneration,
 * written by transformers 4.50): its text_config holds only what differs
 * from Gemma3TextConfig's defaults, which the arch row supplies. */
static void test_config_nested_defaults(void **state) {
    (void)state;
    hr_hparams g;
    hr_error err = {0};
    assert_int_equal(parse(&g, "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], "
                               "\"boi_token_index\": 255999, \"eoi_token_index\": 256000, "
                               "\"eos_token_id\": [1, 106], \"image_token_index\": 262144, "
                               "\"mm_tokens_per_image\": 256, \"model_type\": \"gemma3\", "
                               "\"text_config\": {\"hidden_size\": 2560, \"intermediate_size\": 10240, "
                               "\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 34, "
                               "\"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}, "
                               "\"sliding_window\": 1024}, \"vision_config\": {\"hidden_size\": 1152, "
                               "\"image_size\": 896, \"intermediate_size\": 4304, "
                               "\"model_type\": \"siglip_vision_model\", \"num_attention_heads\": 16, "
                               "\"num_hidden_layers\": 27, \"patch_size\": 14, \"vision_use_head\": false}}",
                           &err), 0);
    assert_int_equal(g.n_vocab, 262208);
    assert_int_equal(g.d_model, 2560);
    assert_int_equal(g.n_heads, 8);
    assert_int_equal(g.n_kv_heads, 4);
    assert_int_equal(g.head_dim, 256);
    assert_int_equal(g.max_pos, 131072);
    assert_true(g.norm_eps == 1e-6f && g.tie_embeddings && g.act == HR_ACT_GELU_TANH);
    assert_true(g.attn_scale == 1.0f / 16.0f); /* query_pre_attn_scalar 256 */
    assert_true(g.rope.type == HR_ROPE_LINEAR && g.rope.factor == 8.0 && g.rope.theta == 1e6);
    assert_true(g.has_rope_local && g.rope_local.type == HR_ROPE_DEFAULT &&
                g.rope_local.theta == 10000.0);
    assert_int_equal(g.sliding_window, 1024);
    for (int i = 0; i < g.n_layers; i++) /* sliding_window_pattern 6: every sixth is global */
        assert_int_equal(g.layer_sliding[i], (i + 1) % 6 != 0);
    assert_true(g.n_eos == 2 && g.eos_ids[0] == 1 && g.eos_ids[1] == 106);
    hr_hparams_deinit(&g);
    /* what the config gives wins over the defaults */
    assert_int_equal(parse(&g, "{\"model_type\": \"gemma3\", \"text_config\": {" BASE ", "
                               "\"rope_theta\": 5.0, \"tie_word_embeddings\": false, "
                               "\"sliding_window_pattern\": 2}}", &err), 0);
    assert_true(g.n_vocab == 100 && g.rope.theta == 5.0 && !g.tie_embeddings);
    assert_true(g.layer_sliding[0] && !g.layer_sliding[1]);
    hr_hparams_deinit(&g);
}

static void expect_config_error(const char *text, int code, const char *needle) {
    hr_hparams hp;
    hr_error err = {0};
    int rc = parse(&hp, text, &err);
    if (rc != code || !strstr(err.msg, needle))
        fail_msg("%s: got %d '%s', want %d with '%s'", text, rc, err.msg, code, needle);
    hr_hparams_deinit(&hp);
}

static void test_config_errors(void **state) {
    (void)state;
    expect_config_error("{\"model_type\": \"t5\"}", HR_EUNSUPPORTED, "model_type 't5'");
    /* bert is supported (an encoder): its fields are checked like any family's */
    expect_config_error("{\"model_type\": \"bert\"}", HR_EFORMAT, "vocab_size");
    expect_config_error("{\"model_type\": \"bert\", \"vocab_size\": 30, \"hidden_size\": 8, "
                        "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
                        "\"intermediate_size\": 16, \"position_embedding_type\": \"relative_key\"}",
                        HR_EUNSUPPORTED, "not supported yet: position_embedding_type 'relative_key'");
    expect_config_error("{" BASE "}", HR_EUNSUPPORTED, "(missing)");
    expect_config_error("{\"model_type\": \"llama\", \"hidden_size\": 64}", HR_EFORMAT, "vocab_size");
    expect_config_error("{\"model_type\": \"llama\", " BASE ", \"rms_norm_eps\": \"x\"}", HR_EFORMAT,
                        "'rms_norm_eps' must be a number");
    expect_config_error("{\"model_type\": \"llama\", " BASE ", \"num_key_value_heads\": 3}",
                        HR_EFORMAT, "inconsistent heads");
    expect_config_error("{\"model_type\": \"llama\", " BASE ", \"head_dim\": 2048}",
                        HR_EUNSUPPORTED, "head_dim 2048 (max 1024)");
    expect_config_error("{\"model_type\": \"llama\", " BASE ", \"hidden_act\": \"relu2\"}",
                        HR_EUNSUPPORTED, "activation 'relu2'");
    expect_config_error("{\"model_type\": \"llama\", " BASE ", \"rope_scaling\": {\"type\": \"mrope\"}}",
                        HR_EUNSUPPORTED, "rope type 'mrope'");
    /* M-RoPE's sections must split the rotated half (head_dim 16: 8) */
    expect_config_error("{\"model_type\": \"qwen2_5_vl\", " BASE ", \"rope_scaling\": {\"type\": "
                        "\"mrope\", \"mrope_section\": [2, 3, 2]}}", HR_EFORMAT, "mrope_section");
    expect_config_error("{\"model_type\": \"llama\", " BASE ", \"rope_scaling\": {\"type\": \"longrope\","
                        " \"short_factor\": [1.0]}}", HR_EFORMAT, "short_factor");
    expect_config_error("{\"model_type\": \"llama\", " BASE ", \"layer_types\": [\"full_attention\"]}",
                        HR_EFORMAT, "layer_types");
    expect_config_error("{\"model_type\": \"llama\", " BASE ", \"layer_types\": [\"sliding_attention\","
                        " \"full_attention\"]}", HR_EFORMAT, "no 'sliding_window'");
}

/* ---- model directories ------------------------------------------------------ */

static char fixture[4096];

static void copy_fixture(char *dir) {
    strcpy(dir, "/tmp/hearth_model_XXXXXX");
    assert_non_null(mkdtemp(dir));
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/model.safetensors %s/", fixture, fixture, dir);
    assert_int_equal(system(cmd), 0);
}

static void remove_dir(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void expect_load_error(const char *dir, int code, const char *needle) {
    hr_model *m = NULL;
    hr_error err = {0};
    int rc = hr_model_open(&m, dir, &err);
    if (rc != code || !strstr(err.msg, needle))
        fail_msg("%s: got %d '%s', want %d with '%s'", dir, rc, err.msg, code, needle);
    assert_null(m);
    assert_null(strchr(err.msg, '\n'));
}

static void test_model_errors(void **state) {
    (void)state;
    char dir[64], cmd[8192];
    expect_load_error("/nonexistent", HR_ENOTFOUND, "no such model directory");

    copy_fixture(dir); /* truncated weights */
    snprintf(cmd, sizeof cmd, "truncate -s 100000 %s/model.safetensors", dir);
    assert_int_equal(system(cmd), 0);
    expect_load_error(dir, HR_EFORMAT, "truncated");
    remove_dir(dir);

    copy_fixture(dir); /* config says more layers than the weights hold */
    snprintf(cmd, sizeof cmd, "sed -i 's/\"num_hidden_layers\": 3/\"num_hidden_layers\": 4/' %s/config.json", dir);
    assert_int_equal(system(cmd), 0);
    expect_load_error(dir, HR_EFORMAT, "missing tensor 'model.layers.3.");
    remove_dir(dir);

    copy_fixture(dir); /* wrong shapes */
    snprintf(cmd, sizeof cmd, "sed -i 's/\"intermediate_size\": 128/\"intermediate_size\": 96/' %s/config.json", dir);
    assert_int_equal(system(cmd), 0);
    expect_load_error(dir, HR_EFORMAT, "model.safetensors: tensor 'model.layers.0.mlp.");
    remove_dir(dir);

    copy_fixture(dir); /* broken JSON */
    snprintf(cmd, sizeof cmd, "echo '{\"model_type\": ' > %s/config.json", dir);
    assert_int_equal(system(cmd), 0);
    expect_load_error(dir, HR_EFORMAT, "config.json");
    remove_dir(dir);

    copy_fixture(dir); /* no weights */
    snprintf(cmd, sizeof cmd, "rm %s/model.safetensors", dir);
    assert_int_equal(system(cmd), 0);
    expect_load_error(dir, HR_ENOTFOUND, "no *.safetensors");
    remove_dir(dir);

    copy_fixture(dir); /* an index naming a tensor its shard lacks */
    snprintf(cmd, sizeof cmd, "echo '{\"weight_map\": {\"model.norm.weight\": \"model.safetensors\","
             " \"extra.weight\": \"model.safetensors\"}}' > %s/model.safetensors.index.json", dir);
    assert_int_equal(system(cmd), 0);
    expect_load_error(dir, HR_EFORMAT, "'extra.weight' is listed but missing");
    snprintf(cmd, sizeof cmd, "echo '{\"weight_map\": {\"a\": \"../x.safetensors\"}}' > "
             "%s/model.safetensors.index.json", dir);
    assert_int_equal(system(cmd), 0);
    expect_load_error(dir, HR_EFORMAT, "bad shard name");
    remove_dir(dir);
}

static void test_sharded(void **state) {
    (void)state;
    /* the same weights split across two files load through the index */
    hr_model *m = NULL;
    hr_error err;
    assert_int_equal(hr_model_open(&m, fixture, &err), 0);
    char dir[64];
    strcpy(dir, "/tmp/hearth_shard_XXXXXX");
    assert_non_null(mkdtemp(dir));
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp %s/config.json %s/", fixture, dir);
    assert_int_equal(system(cmd), 0);
    /* shard 1: embeddings; shard 2: the rest */
    const hr_tensor *all[256];
    size_t n = 0;
    const char *names[] = {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"};
    for (size_t i = 0; i < 3; i++)
        all[n++] = hr_weights_find(m->weights, names[i]);
    hr_tensor s1[1] = {*all[0]}, s2[256];
    size_t n2 = 0;
    s2[n2++] = *all[1];
    s2[n2++] = *all[2];
    for (int l = 0; l < m->hp.n_layers; l++) {
        const char *parts[] = {"input_layernorm.weight", "post_attention_layernorm.weight",
                               "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                               "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                               "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
        for (size_t p = 0; p < 9; p++) {
            char nm[128];
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, parts[p]);
            s2[n2++] = *hr_weights_find(m->weights, nm);
        }
    }
    char p1[128], p2[128];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    assert_int_equal(hr_st_write(p1, s1, 1, NULL, 0, &err), 0);
    assert_int_equal(hr_st_write(p2, s2, n2, NULL, 0, &err), 0);
    FILE *f = fopen(strcat(strcpy(cmd, dir), "/model.safetensors.index.json"), "w");
    fprintf(f, "{\"metadata\": {}, \"weight_map\": {\"%s\": \"model-00001-of-00002.safetensors\"",
            s1[0].name);
    for (size_t i = 0; i < n2; i++)
        fprintf(f, ", \"%s\": \"model-00002-of-00002.safetensors\"", s2[i].name);
    fprintf(f, "}}\n");
    fclose(f);
    hr_model *m2 = NULL;
    if (hr_model_open(&m2, dir, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(m2->weight_bytes, m->weight_bytes);
    hr_model_free(m2);
    hr_model_free(m);
    remove_dir(dir);
}

/* The SSD tier's key names the math too: the same weights loaded with
 * another quant_act (a different pass over quantized weights) get another
 * fingerprint; loaded again the same way, the same one. */
static void test_fingerprint_math(void **state) {
    (void)state;
    hr_model *a = NULL, *b = NULL, *c = NULL;
    hr_error err;
    hr_model_opts def = {.quant_act = "default"}, f32 = {.quant_act = "f32"};
    assert_int_equal(hr_model_open_with(&a, fixture, &def, &err), 0);
    assert_int_equal(hr_model_open_with(&b, fixture, &def, &err), 0);
    assert_int_equal(hr_model_open_with(&c, fixture, &f32, &err), 0);
    assert_true(a->fingerprint == b->fingerprint);
    assert_true(a->fingerprint != c->fingerprint);
    /* and the CPU's kernel tables, whose bits differ, each their own */
    assert_int_not_equal(hr__cpu_scalar.math, hr__cpu_avx2.math);
    assert_int_not_equal(hr__cpu_scalar.math, hr__cpu_avx512.math);
    assert_int_not_equal(hr__cpu_avx2.math, hr__cpu_avx512.math);
    hr_model_free(a);
    hr_model_free(b);
    hr_model_free(c);
}

int main(void) {
    const char *root = getenv("HEARTH_ROOT");
    snprintf(fixture, sizeof fixture, "%s/tests/fixtures/models/llama", root ? root : ".");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_4x_and_5x),
        cmocka_unit_test(test_config_nested_defaults),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_model_errors),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_fingerprint_math),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
