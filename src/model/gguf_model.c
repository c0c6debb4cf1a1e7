/* A GGUF's metadata as a config.json (gguf_model.h): the common keys, the
 * values llama.cpp derives for gemma, experts and the hybrid families. The
 * names are gguf_names.c's, the writer gguf_export.c. */
#include "model/gguf_model.h"
#include "core/error.h"
#include "model/config.h"
#include "model/gguf_names.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- metadata readers ------------------------------------------------------- */

typedef struct meta {
    const hr_gguf *g;
    const char *arch;
    json_t *cfg;
    hr_error *err;
    int rc;
} meta;

static bool get_num(meta *m, const char *suffix, double *v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", m->arch, suffix);
    int64_t i = hr_gguf_find(m->g, k);
    if (i < 0)
        return false;
    int64_t iv;
    if (!hr_gguf_get_int(m->g, i, &iv)) {
        *v = (double)iv;
        return true;
    }
    if (!hr_gguf_get_float(m->g, i, v))
        return true;
    if (!m->rc)
        m->rc = hr_err(m->err, HR_EFORMAT, "%s: key '%s' is not a number",
                       hr_gguf_path(m->g), k);
    return false;
}

/* A count or size: a number in [0, 2^30] (else an error). */
static bool get_count(meta *m, const char *suffix, double *v) {
    if (!get_num(m, suffix, v))
        return false;
    if (*v >= 0 && *v <= (1 << 30))
        return true;
    if (!m->rc)
        m->rc = hr_err(m->err, HR_EFORMAT, "%s: key '%s.%s' is out of range",
                       hr_gguf_path(m->g), m->arch, suffix);
    return false;
}

static void set_int(meta *m, const char *suffix, const char *field, bool required) {
    double v;
    if (get_count(m, suffix, &v))
        json_object_set_new(m->cfg, field, json_integer((json_int_t)v));
    else if (required && !m->rc)
        m->rc = hr_err(m->err, HR_EFORMAT, "%s: missing key '%s.%s'", hr_gguf_path(m->g),
                       m->arch, suffix);
}

static void set_real(meta *m, const char *suffix, const char *field) {
    double v;
    if (get_num(m, suffix, &v))
        json_object_set_new(m->cfg, field, json_real(v));
}

static int cfg_int(const json_t *cfg, const char *key, int dflt) {
    const json_t *v = json_object_get(cfg, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

/* {arch}.attention.sliding_window_pattern: llama.cpp reads a scalar period
 * and ignores an array for gemma2/3. */
static int swa_pattern(meta *m, int dflt) {
    char k[128];
    snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", m->arch);
    int64_t i = hr_gguf_find(m->g, k), v;
    if (i < 0 || hr_gguf_kv_type(m->g, i) == HR_GGUF_ARRAY)
        return dflt;
    if (hr_gguf_get_int(m->g, i, &v) || v < 0 || v > HR_MAX_LAYERS) {
        if (!m->rc)
            m->rc = hr_err(m->err, HR_EFORMAT, "%s: key '%s' is not a layer period",
                           hr_gguf_path(m->g), k);
        return dflt;
    }
    return (int)v;
}

/* Rope per layer type: full layers as the metadata says (rope_scaling, if
 * set above), sliding layers at rope.freq_base_swa (default swa_theta, or
 * the global base when < 0), scaled like the full layers when swa_scaled
 * (gemma2), unscaled otherwise (gemma3). */
static void gemma_rope(meta *m, double swa_theta, bool swa_scaled) {
    double theta = 10000;
    get_num(m, "rope.freq_base", &theta);
    if (swa_theta < 0)
        swa_theta = theta;
    get_num(m, "rope.freq_base_swa", &swa_theta);
    json_t *sc = json_object_get(m->cfg, "rope_scaling");
    json_t *full = sc ? json_deep_copy(sc) : json_pack("{s:s}", "rope_type", "default");
    json_t *local = swa_scaled ? json_deep_copy(full) : json_pack("{s:s}", "rope_type", "default");
    json_object_set_new(full, "rope_theta", json_real(theta));
    json_object_set_new(local, "rope_theta", json_real(swa_theta));
    json_object_del(m->cfg, "rope_scaling");
    json_object_set_new(m->cfg, "rope_parameters", json_pack("{s:o,s:o}", "full_attention", full,
                                                             "sliding_attention", local));
}

/* The config.json fields a gemma GGUF implies (after the common ones). */
static void gemma_config(meta *m, hr__gguf_family f) {
    json_t *c = m->cfg;
    int nl = cfg_int(c, "num_hidden_layers", 0), d = cfg_int(c, "hidden_size", 0);
    int nh = cfg_int(c, "num_attention_heads", 1);
    int hd = cfg_int(c, "head_dim", nh > 0 ? d / nh : 0);
    json_object_set_new(c, "hidden_activation", json_string("gelu_pytorch_tanh"));
    if (f != FAM_GEMMA3) /* gemma, gemma2: token_embd is the output matrix */
        json_object_set_new(c, "tie_word_embeddings", json_true());
    if (f == FAM_GEMMA)
        return;
    if (nh > 0)
        json_object_set_new(c, "query_pre_attn_scalar",
                            json_integer(hr__gguf_gemma_qpas(f, nl, d, nh, hd)));
    double v;
    if (f == FAM_GEMMA2) { /* always capped; llama_hparams' defaults */
        json_object_set_new(c, "attn_logit_softcapping",
                            json_real(get_num(m, "attn_logit_softcapping", &v) ? v : 50.0));
        json_object_set_new(c, "final_logit_softcapping",
                            json_real(get_num(m, "final_logit_softcapping", &v) ? v : 30.0));
    } else if (get_num(m, "final_logit_softcapping", &v) && v != 0) {
        json_object_set_new(c, "final_logit_softcapping", json_real(v));
    }
    /* sliding layers: gemma2 always (window 4096 unless given), gemma3 when
     * the file gives a window */
    double window = f == FAM_GEMMA2 ? 4096 : 0;
    get_count(m, "attention.sliding_window", &window);
    bool swa = f == FAM_GEMMA2 || window > 0;
    int period = swa ? swa_pattern(m, hr__gguf_swa_default(f)) : 1;
    json_t *lt = json_array();
    for (int i = 0; i < nl && i < HR_MAX_LAYERS; i++)
        json_array_append_new(lt, json_string(swa && hr__gguf_swa_layer(period, i)
                                                  ? "sliding_attention"
                                                  : "full_attention"));
    json_object_set_new(c, "layer_types", lt);
    if (swa) {
        json_object_set_new(c, "sliding_window", json_integer((json_int_t)window));
        gemma_rope(m, f == FAM_GEMMA2 ? -1 : 10000.0, f == FAM_GEMMA2);
    }
}

/* ---- metadata -> config ----------------------------------------------------- */

/* End-of-generation ids, as llama.cpp collects them (llama-vocab.cpp): the
 * eos, eot, eom and FIM pad/repo/sep ids of the metadata, then every token
 * whose text is one of its end-of-generation texts -- so an instruct model
 * stops at its end of turn (<end_of_turn>, <|im_end|>, <|eot_id|>) even
 * when the file's eos is another token. When "<|return|>" and "<|call|>"
 * (or "<|calls|>" and "<|flush|>") exist, "<|end|>" is not one (llama.cpp's
 * exception for those chat formats). */
static const char *const EOG_TEXT[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
    "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
    "<|tool_response>", "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", /* DeepSeek */
    "[e~[",
};

static void add_id(json_t *ids, int64_t v) {
    for (size_t i = 0; i < json_array_size(ids); i++)
        if (json_integer_value(json_array_get(ids, i)) == v)
            return;
    json_array_append_new(ids, json_integer(v));
}

static json_t *eog_ids(const hr_gguf *g) {
    json_t *ids = json_array();
    static const char *const keys[] = {
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id", "tokenizer.ggml.fim_pad_token_id",
        "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"};
    int64_t v;
    for (size_t i = 0; i < COUNT(keys); i++)
        if (!hr_gguf_key_int(g, keys[i], &v) && v >= 0)
            add_id(ids, v);
    int64_t ti = hr_gguf_find(g, "tokenizer.ggml.tokens");
    hr_gguf_type et;
    uint64_t n = 0;
    if (ti < 0 || hr_gguf_get_arr(g, ti, &et, &n) || et != HR_GGUF_STRING)
        return ids;
    int64_t found[COUNT(EOG_TEXT)];
    for (size_t e = 0; e < COUNT(EOG_TEXT); e++)
        found[e] = -1;
    for (uint64_t j = 0; j < n; j++) {
        const char *s;
        size_t len;
        if (hr_gguf_arr_str(g, ti, j, &s, &len) || len < 3 || len > 32 ||
            (s[0] != '<' && s[0] != '[' && s[0] != '_'))
            continue;
        for (size_t e = 0; e < COUNT(EOG_TEXT); e++)
            if (found[e] < 0 && strlen(EOG_TEXT[e]) == len && !memcmp(s, EOG_TEXT[e], len))
                found[e] = (int64_t)j;
    }
    bool no_end = (found[3] >= 0 && found[4] >= 0) || (found[5] >= 0 && found[6] >= 0);
    for (size_t e = 0; e < COUNT(EOG_TEXT); e++)
        if (found[e] >= 0 && !(e == 2 && no_end))
            add_id(ids, found[e]);
    return ids;
}

int hr_gguf_config(const hr_gguf *g, json_t **out, bool *permuted_qk, hr_error *err) {
    *out = NULL;
    const char *a;
    size_t alen;
    if (hr_gguf_key_str(g, "general.architecture", &a, &alen))
        return hr_err(err, HR_EFORMAT, "%s: missing 'general.architecture'", hr_gguf_path(g));
    char arch[64];
    snprintf(arch, sizeof arch, "%.*s", (int)(alen < 63 ? alen : 63), a);
    int ai = hr__gguf_arch_index(a, alen);
    if (ai < 0)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: GGUF architecture '%s' "
                      "(llama, qwen2, qwen3, qwen2moe, qwen3moe, olmoe, gpt-oss, gemma, "
                      "gemma2, gemma3, gemma4, qwen3next, glm4moe, granitemoe, granitehybrid "
                      "are)",
                      hr_gguf_path(g), arch);
    hr__gguf_family fam = hr__gguf_archs[ai].fam;
    *permuted_qk = fam == FAM_LLAMA || fam == FAM_GRANITE || fam == FAM_GRANITEH;
    meta m = {g, arch, json_object(), err, 0};
    json_object_set_new(m.cfg, "model_type", json_string(hr__gguf_archs[ai].model_type));
    const hr_gguf_tensor *emb = hr_gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2) {
        json_decref(m.cfg);
        return hr_err(err, HR_EFORMAT, "%s: missing 2-D tensor 'token_embd.weight'",
                      hr_gguf_path(g));
    }
    json_object_set_new(m.cfg, "vocab_size", json_integer((json_int_t)emb->ne[1]));
    set_int(&m, "embedding_length", "hidden_size", true);
    set_int(&m, "block_count", "num_hidden_layers", true);
    set_int(&m, "feed_forward_length", "intermediate_size", true);
    set_int(&m, "attention.head_count", "num_attention_heads", true);
    char k[128];
    snprintf(k, sizeof k, "%s.attention.head_count_kv", arch);
    int64_t hkv = hr_gguf_find(g, k); /* granitehybrid: one per layer (gguf_hybrid.c) */
    if (hkv < 0 || hr_gguf_kv_type(g, hkv) != HR_GGUF_ARRAY ||
        (fam != FAM_GRANITEH && fam != FAM_GEMMA4)) /* gemma4: gguf_gemma4.c */
        set_int(&m, "attention.head_count_kv", "num_key_value_heads", false);
    set_int(&m, "attention.key_length", "head_dim", false);
    double kl, vl;
    if (get_num(&m, "attention.value_length", &vl) && get_num(&m, "attention.key_length", &kl) &&
        vl != kl && !m.rc)
        m.rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: value_length %g differs "
                      "from key_length %g", hr_gguf_path(g), vl, kl);
    /* these families rotate whole heads (qwen3next and glm4moe a part:
     * rope.dimension_count of them); a file that says otherwise would load
     * with the wrong RoPE */
    double rd, d_model, n_head, hd_k;
    bool partial = fam == FAM_QNEXT || fam == FAM_GLM4MOE;
    if (get_num(&m, "rope.dimension_count", &rd) && get_num(&m, "embedding_length", &d_model) &&
        get_num(&m, "attention.head_count", &n_head) && n_head > 0 && !m.rc) {
        double hd = get_num(&m, "attention.key_length", &hd_k) ? hd_k : d_model / n_head;
        if (partial && rd > 0 && rd <= hd) /* + 0.5: config.c truncates hd x factor */
            json_object_set_new(m.cfg, "partial_rotary_factor", json_real((rd + 0.5) / hd));
        else if (rd != hd)
            m.rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: rope.dimension_count "
                          "%g is not the head dimension (partial rotary)", hr_gguf_path(g), rd);
    }
    set_int(&m, "context_length", "max_position_embeddings", false);
    set_real(&m, "attention.layer_norm_rms_epsilon", "rms_norm_eps");
    set_real(&m, "rope.freq_base", "rope_theta");
    json_object_set_new(m.cfg, "tie_word_embeddings",
                        json_boolean(!hr_gguf_find_tensor(g, "output.weight")));
    int64_t v;
    if (!hr_gguf_key_int(g, "tokenizer.ggml.bos_token_id", &v))
        json_object_set_new(m.cfg, "bos_token_id", json_integer(v));
    json_t *eog = eog_ids(g);
    if (json_array_size(eog))
        json_object_set_new(m.cfg, "eos_token_id", eog);
    else
        json_decref(eog);
    /* rope scaling: linear by metadata; llama3 as per-frequency divisors in
     * rope_freqs.weight (expressed as longrope factors, equal short/long) */
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    const char *st;
    size_t sl;
    if (!m.rc && fam != FAM_GPTOSS && !hr_gguf_key_str(g, k, &st, &sl) &&
        !(sl == 4 && !memcmp(st, "none", 4))) {
        double f = 1;
        if (sl == 6 && !memcmp(st, "linear", 6) && get_num(&m, "rope.scaling.factor", &f))
            json_object_set_new(m.cfg, "rope_scaling",
                                json_pack("{s:s,s:f}", "rope_type", "linear", "factor", f));
        else
            m.rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: rope scaling '%.*s'",
                          hr_gguf_path(g), (int)sl, st);
    }
    const hr_gguf_tensor *rf = hr_gguf_find_tensor(g, "rope_freqs.weight");
    if (!m.rc && rf && fam != FAM_GEMMA4) { /* gemma4's: its full layers' (gguf_gemma4.c) */
        if (rf->type != 0 || rf->n_dims != 1) {
            m.rc = hr_err(err, HR_EFORMAT, "%s: 'rope_freqs.weight' must be 1-D F32",
                          hr_gguf_path(g));
        } else {
            json_t *f = json_array();
            for (uint64_t i = 0; i < rf->ne[0]; i++) {
                float x;
                memcpy(&x, (const float *)rf->data + i, 4);
                json_array_append_new(f, json_real(x));
            }
            double theta = 10000;
            get_num(&m, "rope.freq_base", &theta);
            json_object_set_new(m.cfg, "rope_scaling",
                                json_pack("{s:s,s:O,s:O,s:f,s:f}", "rope_type", "longrope",
                                          "short_factor", f, "long_factor", f,
                                          "attention_factor", 1.0, "rope_theta", theta));
            json_decref(f);
        }
    }
    if (!m.rc && hr__gguf_is_gemma(fam))
        gemma_config(&m, fam);
    if (!m.rc)
        m.rc = hr__gguf_moe_config(g, arch, m.cfg, err);
    if (!m.rc && fam == FAM_GEMMA4)
        m.rc = hr__gguf_gemma4_config(g, arch, m.cfg, err);
    if (!m.rc && fam == FAM_GPTOSS)
        m.rc = hr__gguf_gptoss_config(g, arch, m.cfg, err);
    if (!m.rc && hr__gguf_hybrid_arch(arch))
        m.rc = hr__gguf_hybrid_config(g, arch, m.cfg, err);
    if (m.rc) {
        json_decref(m.cfg);
        return m.rc;
    }
    *out = m.cfg;
    return 0;
}
