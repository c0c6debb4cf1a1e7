#include "model/config.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- json accessors: absent or null -> default; wrong type -> error ---- */

typedef struct reader {
    const json_t *obj;
    const char *where; /* "config.json" or "config.json rope_parameters" */
    hr_error *err;
    int rc;
} reader;

static const json_t *get(reader *r, const char *key) {
    const json_t *v = json_object_get(r->obj, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

static double num(reader *r, const char *key, double dflt) {
    const json_t *v = get(r, key);
    if (!v)
        return dflt;
    if (!json_is_number(v)) {
        if (!r->rc)
            r->rc = hr_err(r->err, HR_EFORMAT, "%s: '%s' must be a number",
                           r->where, key);
        return dflt;
    }
    return json_number_value(v);
}

static int integer(reader *r, const char *key, int dflt) {
    const json_t *v = get(r, key);
    if (!v)
        return dflt;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > (1 << 30)) {
        if (!r->rc)
            r->rc = hr_err(r->err, HR_EFORMAT,
                           "%s: '%s' must be a non-negative integer", r->where, key);
        return dflt;
    }
    return (int)json_integer_value(v);
}

static const char *string(reader *r, const char *key) {
    const json_t *v = get(r, key);
    if (v && !json_is_string(v)) {
        if (!r->rc)
            r->rc = hr_err(r->err, HR_EFORMAT, "%s: '%s' must be a string",
                           r->where, key);
        return NULL;
    }
    return v ? json_string_value(v) : NULL;
}

static bool boolean(reader *r, const char *key, bool dflt) {
    const json_t *v = get(r, key);
    if (!v)
        return dflt;
    if (!json_is_boolean(v)) {
        if (!r->rc)
            r->rc = hr_err(r->err, HR_EFORMAT, "%s: '%s' must be true or false",
                           r->where, key);
        return dflt;
    }
    return json_is_true(v);
}

static int require(reader *r, const char *key) {
    int v = integer(r, key, -1);
    if (v <= 0 && !r->rc)
        r->rc = hr_err(r->err, HR_EFORMAT, "%s: missing or zero '%s'", r->where, key);
    return v;
}

/* ---- rope -------------------------------------------------------------- */

static float *float_list(reader *r, const char *key, int want) {
    const json_t *v = get(r, key);
    if (!v)
        return NULL;
    if (!json_is_array(v) || (int)json_array_size(v) != want) {
        if (!r->rc)
            r->rc = hr_err(r->err, HR_EFORMAT,
                           "%s: '%s' must be a list of %d numbers", r->where, key, want);
        return NULL;
    }
    float *out = malloc((size_t)want * sizeof *out);
    if (!out) {
        r->rc = hr_err(r->err, HR_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < want; i++) {
        const json_t *x = json_array_get(v, (size_t)i);
        if (!json_is_number(x)) {
            free(out);
            if (!r->rc)
                r->rc = hr_err(r->err, HR_EFORMAT, "%s: '%s'[%d] is not a number",
                               r->where, key, i);
            return NULL;
        }
        out[i] = (float)json_number_value(x);
    }
    return out;
}

/* Fill rp from a rope dict (4.x rope_scaling or 5.x rope_parameters); theta
 * and the model-level fields come in through rp already. */
static void parse_rope_dict(reader *r, hr_rope_params *rp, int rot_dim) {
    const char *type = string(r, "rope_type");
    if (!type)
        type = string(r, "type");
    rp->theta = num(r, "rope_theta", rp->theta);
    rp->factor = num(r, "factor", 1.0);
    rp->original_max_pos = integer(r, "original_max_position_embeddings",
                                   rp->original_max_pos);
    if (type && !strcmp(type, "mrope") && !get(r, "mrope_section")) {
        if (!r->rc)
            r->rc = hr_err(r->err, HR_EUNSUPPORTED, "not supported yet: rope type 'mrope' "
                           "without mrope_section (%s)", r->where);
    } else if (!type || !strcmp(type, "default") || !strcmp(type, "mrope")) {
        rp->type = HR_ROPE_DEFAULT; /* 4.x's "mrope": default frequencies, sections */
    } else if (!strcmp(type, "linear")) {
        rp->type = HR_ROPE_LINEAR;
    } else if (!strcmp(type, "dynamic")) {
        rp->type = HR_ROPE_DYNAMIC;
    } else if (!strcmp(type, "llama3")) {
        rp->type = HR_ROPE_LLAMA3;
        rp->low_freq_factor = num(r, "low_freq_factor", 1.0);
        rp->high_freq_factor = num(r, "high_freq_factor", 4.0);
    } else if (!strcmp(type, "yarn")) {
        rp->type = HR_ROPE_YARN;
        rp->beta_fast = num(r, "beta_fast", 32.0);
        rp->beta_slow = num(r, "beta_slow", 1.0);
        rp->attention_factor = num(r, "attention_factor", 0.0);
        rp->mscale = num(r, "mscale", 0.0);
        rp->mscale_all_dim = num(r, "mscale_all_dim", 0.0);
        rp->truncate = boolean(r, "truncate", true);
    } else if (!strcmp(type, "longrope") || !strcmp(type, "su")) {
        rp->type = HR_ROPE_LONGROPE;
        rp->attention_factor = num(r, "attention_factor", 0.0);
        rp->short_factor = float_list(r, "short_factor", rot_dim / 2);
        rp->long_factor = float_list(r, "long_factor", rot_dim / 2);
        if (!r->rc && (!rp->short_factor || !rp->long_factor))
            r->rc = hr_err(r->err, HR_EFORMAT, "%s: longrope needs short_factor "
                           "and long_factor", r->where);
    } else if (!r->rc) {
        r->rc = hr_err(r->err, HR_EUNSUPPORTED,
                       "not supported yet: rope type '%s' (%s)", type, r->where);
    }
}

static void rope_params_free(hr_rope_params *rp) {
    free(rp->short_factor);
    free(rp->long_factor);
    rp->short_factor = rp->long_factor = NULL;
}

/* ---- layers ------------------------------------------------------------ */

static void parse_layer_types(reader *r, hr_hparams *hp) {
    const json_t *lt = get(r, "layer_types");
    if (lt) {
        if (!json_is_array(lt) || (int)json_array_size(lt) != hp->n_layers) {
            if (!r->rc)
                r->rc = hr_err(r->err, HR_EFORMAT, "%s: 'layer_types' must list "
                               "%d layers", r->where, hp->n_layers);
            return;
        }
        for (int i = 0; i < hp->n_layers; i++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)i));
            if (t && !strcmp(t, "sliding_attention"))
                hp->layer_sliding[i] = true;
            else if (t && !strcmp(t, "linear_attention") && hp->arch->linear_deltanet)
                hp->layer_linear[i] = true;
            else if (t && hp->arch->mamba2 &&
                     (!strcmp(t, "mamba") || !strcmp(t, "linear_attention")))
                hp->layer_linear[i] = true; /* 4.x's name, 5.x's */
            else if (!t || (strcmp(t, "full_attention") &&
                            !(hp->arch->mamba2 && !strcmp(t, "attention")))) {
                if (!r->rc)
                    r->rc = hr_err(r->err, HR_EUNSUPPORTED, "not supported yet: "
                                   "layer type '%s'", t ? t : "?");
                return;
            }
        }
    } else if (hp->sliding_window) {
        /* gemma3 configs of transformers 4 give the period */
        int period = hp->arch->sliding_period > 1
                         ? integer(r, "sliding_window_pattern", hp->arch->sliding_period)
                         : hp->arch->sliding_period;
        bool qwen_style = get(r, "use_sliding_window") != NULL;
        for (int i = 0; i < hp->n_layers; i++) {
            if (qwen_style)
                hp->layer_sliding[i] = boolean(r, "use_sliding_window", false) &&
                                       i >= integer(r, "max_window_layers", 0);
            else if (period == 1)
                hp->layer_sliding[i] = true;
            else if (period > 1)
                hp->layer_sliding[i] = (i + 1) % period != 0;
        }
    }
    if (hp->arch->last_layer_full && hp->n_layers > 0)
        hp->layer_sliding[hp->n_layers - 1] = false;
    if (!hp->sliding_window)
        for (int i = 0; i < hp->n_layers; i++)
            if (hp->layer_sliding[i] && !r->rc)
                r->rc = hr_err(r->err, HR_EFORMAT, "%s: sliding layers but no "
                               "'sliding_window'", r->where);

    /* smollm3: no_rope_layers[i] == 1 means layer i uses rope;
     * granitemoehybrid: position_embedding_type "rope", else none */
    const json_t *nr = get(r, "no_rope_layers");
    const char *pet = hp->arch->nope_default ? string(r, "position_embedding_type") : NULL;
    bool rope = !hp->arch->nope_default || (pet && !strcmp(pet, "rope"));
    for (int i = 0; i < hp->n_layers; i++)
        hp->layer_rope[i] = rope;
    if (nr) {
        if (!json_is_array(nr) || (int)json_array_size(nr) != hp->n_layers) {
            if (!r->rc)
                r->rc = hr_err(r->err, HR_EFORMAT, "%s: 'no_rope_layers' must list "
                               "%d layers", r->where, hp->n_layers);
            return;
        }
        for (int i = 0; i < hp->n_layers; i++)
            hp->layer_rope[i] = json_integer_value(json_array_get(nr, (size_t)i)) != 0;
    }
}

/* ---- mixture of experts ------------------------------------------------- */

/* Experts, k and which layers route, as transformers' MoE families read
 * them: layer i is sparse unless it is in mlp_only_layers or
 * (i + 1) % decoder_sparse_step != 0. */
static void parse_moe(reader *r, hr_hparams *hp) {
    const hr_arch_moe *moe = &hp->arch->moe;
    if (moe->router == HR_ROUTER_NONE || (moe->enable_field && !boolean(r, moe->enable_field, false)))
        return;
    hp->n_experts = integer(r, "num_experts", integer(r, "num_local_experts",
                                                      integer(r, "n_routed_experts", 0)));
    /* gemma4's class reads top_k_experts */
    hp->n_experts_used = integer(r, "top_k_experts", integer(r, "num_experts_per_tok", 0));
    if (!r->rc && hp->n_experts == 0 && hp->arch->mamba2) { /* granite-4.0-h-micro's shape */
        r->rc = hr_err(r->err, HR_EUNSUPPORTED, "not supported yet: %s without experts "
                       "('num_local_experts' 0)", hp->arch->model_type);
        return;
    }
    hp->d_ff_expert = integer(r, "moe_intermediate_size", hp->d_ff);
    const char *shared_field = moe->shared == HR_SHARED_GATED    ? "shared_expert_intermediate_size"
                               : moe->shared == HR_SHARED_PLAIN  ? "n_shared_experts"
                               : moe->shared == HR_SHARED_GRANITE ? "shared_intermediate_size"
                                                                 : NULL;
    hp->d_ff_shared = shared_field ? integer(r, shared_field, 0) : 0;
    if (moe->shared == HR_SHARED_PLAIN) /* a count of experts of the routed width */
        hp->d_ff_shared *= hp->d_ff_expert;
    hp->norm_topk = moe->norm_topk >= 0 ? moe->norm_topk == 1
                                        : boolean(r, "norm_topk_prob", moe->norm_topk == -2);
    hp->routed_scale = (float)num(r, "routed_scaling_factor", 1.0);
    hp->n_group = integer(r, "n_group", 1);
    hp->topk_group = integer(r, "topk_group", 1);
    hp->swiglu_alpha = 1.702f;
    hp->swiglu_limit = (float)num(r, "swiglu_limit", 7.0);
    int step = integer(r, "decoder_sparse_step", 1);
    if (r->rc)
        return;
    if (hp->n_experts <= 0 || hp->n_experts_used <= 0 || hp->n_experts_used > hp->n_experts ||
        hp->n_experts_used > HR_MAX_EXPERTS_USED || hp->d_ff_expert <= 0) {
        r->rc = hr_err(r->err, HR_EFORMAT, "%s: 'num_experts_per_tok' / 'top_k_experts' (%d) "
                       "must be 1..%d and at most the number of experts (%d)", r->where,
                       hp->n_experts_used,
                       HR_MAX_EXPERTS_USED, hp->n_experts);
        return;
    }
    if (shared_field && hp->d_ff_shared <= 0) {
        r->rc = hr_err(r->err, HR_EFORMAT, "%s: missing or zero '%s'", r->where, shared_field);
        return;
    }
    if (moe->router == HR_ROUTER_SIGMOID_GROUPED &&
        (hp->n_group <= 0 || hp->n_experts % hp->n_group || hp->topk_group <= 0 ||
         hp->n_experts > 1024 ||
         hp->topk_group > hp->n_group || hp->n_experts / hp->n_group < 2 ||
         hp->n_experts_used > hp->topk_group * (hp->n_experts / hp->n_group))) {
        r->rc = hr_err(r->err, HR_EFORMAT, "%s: 'n_group' (%d) must divide the %d experts "
                       "(at most 1024) into groups of 2 or more, and 'topk_group' (%d) of "
                       "them must hold 'num_experts_per_tok' (%d)", r->where, hp->n_group, hp->n_experts,
                       hp->topk_group, hp->n_experts_used);
        return;
    }
    if (step <= 0)
        step = 1;
    int first_dense = integer(r, "first_k_dense_replace", 0); /* glm4_moe */
    for (int i = 0; i < hp->n_layers; i++)
        hp->layer_moe[i] = (i + 1) % step == 0 && i >= first_dense;
    const json_t *only = get(r, "mlp_only_layers");
    if (only && !json_is_array(only)) {
        r->rc = hr_err(r->err, HR_EFORMAT, "%s: 'mlp_only_layers' must be a list", r->where);
        return;
    }
    for (size_t j = 0; only && j < json_array_size(only); j++) {
        const json_t *v = json_array_get(only, j);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= hp->n_layers) {
            r->rc = hr_err(r->err, HR_EFORMAT, "%s: 'mlp_only_layers'[%zu] is not a layer "
                           "index below %d", r->where, j, hp->n_layers);
            return;
        }
        hp->layer_moe[json_integer_value(v)] = false;
    }
}

/* Mamba-2 dimensions (transformers' GraniteMoeHybridConfig names) */
static void parse_mamba2(reader *r, hr_hparams *hp) {
    hp->mb_heads = require(r, "mamba_n_heads");
    hp->mb_groups = integer(r, "mamba_n_groups", 1);
    hp->mb_state = require(r, "mamba_d_state");
    hp->mb_conv = integer(r, "mamba_d_conv", 4);
    int expand = integer(r, "mamba_expand", 2);
    if (r->rc)
        return;
    hp->mb_inner = expand * hp->d_model;
    /* time_step_limit: transformers' (0, inf), written by 5.x as [0.0, {"__float__":
     * "Infinity"}]; a real clamp is not implemented */
    const json_t *tl = get(r, "time_step_limit");
    if (tl) {
        const json_t *lo = json_array_get(tl, 0), *hi = json_array_get(tl, 1);
        const char *inf = json_string_value(json_object_get(hi, "__float__"));
        bool open = json_is_number(lo) && json_number_value(lo) == 0 &&
                    ((inf && !strcmp(inf, "Infinity")) ||
                     (json_is_number(hi) && json_number_value(hi) >= 1e30));
        if (!json_is_array(tl) || json_array_size(tl) != 2 || !open) {
            r->rc = hr_err(r->err, HR_EUNSUPPORTED, "not supported yet: %s: "
                           "'time_step_limit' other than (0, inf)", r->where);
            return;
        }
    }
    const json_t *dh = get(r, "mamba_d_head");
    hp->mb_head_dim = json_is_integer(dh) ? (int)json_integer_value(dh)
                      : hp->mb_heads > 0  ? hp->mb_inner / hp->mb_heads
                                          : 0;
    if (hp->mb_heads <= 0 || hp->mb_groups <= 0 || hp->mb_heads % hp->mb_groups ||
        hp->mb_head_dim <= 0 || hp->mb_head_dim * hp->mb_heads != hp->mb_inner ||
        hp->mb_state <= 0 || hp->mb_state > 1024 || hp->mb_conv < 1 || hp->mb_conv > 16 ||
        hp->mb_inner + 2 * hp->mb_groups * hp->mb_state > 65536)
        r->rc = hr_err(r->err, HR_EFORMAT, "%s: Mamba-2 dimensions do not fit: "
                       "'mamba_n_heads' (%d) x 'mamba_d_head' (%d) must be 'mamba_expand' "
                       "x hidden_size (%d), a multiple of 'mamba_n_groups' (%d) heads, "
                       "'mamba_d_state' (%d) 1..1024, 'mamba_d_conv' (%d) 1..16",
                       r->where, hp->mb_heads, hp->mb_head_dim, hp->mb_inner, hp->mb_groups,
                       hp->mb_state, hp->mb_conv);
}

/* recurrent layers' dimensions, when layer_types names any */
static void parse_linear(reader *r, hr_hparams *hp) {
    for (int i = 0; i < hp->n_layers; i++)
        hp->n_linear += hp->layer_linear[i];
    if (!hp->n_linear)
        return;
    if (hp->arch->mamba2) {
        parse_mamba2(r, hp);
        return;
    }
    hp->ln_k_heads = require(r, "linear_num_key_heads");
    hp->ln_v_heads = require(r, "linear_num_value_heads");
    hp->ln_k_dim = require(r, "linear_key_head_dim");
    hp->ln_v_dim = require(r, "linear_value_head_dim");
    hp->ln_conv = require(r, "linear_conv_kernel_dim");
    if (!r->rc && (hp->ln_v_heads % hp->ln_k_heads || hp->ln_conv > 16 ||
                   hp->ln_v_dim > 1024 ||
                   2 * hp->ln_k_heads * hp->ln_k_dim + hp->ln_v_heads * hp->ln_v_dim > 16384))
        r->rc = hr_err(r->err, HR_EFORMAT, "%s: 'linear_num_value_heads' (%d) must be a "
                       "multiple of 'linear_num_key_heads' (%d), 'linear_conv_kernel_dim' "
                       "(%d) at most 16, value heads of up to 1024 and up to 16384 conv channels", r->where, hp->ln_v_heads, hp->ln_k_heads, hp->ln_conv);
}

/* ---- gemma4 -------------------------------------------------------------- */

/* Gemma-4's text config: what the one forward pass does not do is refused,
 * naming the field. Its full-attention layers may have a head size and KV
 * heads of their own (global_head_dim; num_global_key_value_heads with
 * attention_k_eq_v; transformers 5.15+ writes them as per_layer_config
 * overrides, and without per_layer_config takes global_head_dim, default
 * 512): only the layers' common values are supported. attention_k_eq_v
 * (the full layers' values are their key projection) is hp->k_eq_v. */
static void parse_gemma4(reader *r, hr_hparams *hp) {
    static const struct {
        const char *field, *what;
    } off[] = {
        {"hidden_size_per_layer_input", "per-layer inputs"},
        {"num_kv_shared_layers", "layers sharing another layer's KV"},
    };
    const char *mt = hp->arch->model_type;
    for (size_t i = 0; i < sizeof off / sizeof off[0] && !r->rc; i++)
        if (integer(r, off[i].field, 0) != 0 && !r->rc)
            r->rc = hr_err(r->err, HR_EUNSUPPORTED, "not supported yet: %s %s %d (%s)", mt,
                           off[i].field, integer(r, off[i].field, 0), off[i].what);
    const char *bidi = string(r, "use_bidirectional_attention");
    if (!r->rc && bidi && strcmp(bidi, "vision")) /* "vision": image tokens only */
        r->rc = hr_err(r->err, HR_EUNSUPPORTED, "not supported yet: %s "
                       "use_bidirectional_attention '%s'", mt, bidi);
    hp->k_eq_v = boolean(r, "attention_k_eq_v", false);
    const json_t *plc = get(r, "per_layer_config");
    int ghd = plc ? hp->head_dim : integer(r, "global_head_dim", 512);
    int gkv = hp->k_eq_v ? integer(r, "num_global_key_value_heads", hp->n_kv_heads)
                         : hp->n_kv_heads;
    if (r->rc)
        return;
    if (ghd != hp->head_dim)
        r->rc = hr_err(r->err, HR_EUNSUPPORTED, "not supported yet: %s global_head_dim %d "
                       "(the full-attention layers' head size) other than head_dim %d", mt,
                       ghd, hp->head_dim);
    else if (gkv != hp->n_kv_heads)
        r->rc = hr_err(r->err, HR_EUNSUPPORTED, "not supported yet: %s "
                       "num_global_key_value_heads %d (attention_k_eq_v) other than "
                       "num_key_value_heads %d", mt, gkv, hp->n_kv_heads);
    if (r->rc || !plc)
        return;
    if (!json_is_object(plc)) {
        r->rc = hr_err(r->err, HR_EFORMAT, "%s: 'per_layer_config' must be an object", r->where);
        return;
    }
    const char *key;
    const json_t *lc;
    json_object_foreach((json_t *)plc, key, lc) {
        const char *attr[] = {"head_dim", "num_key_value_heads", "num_attention_heads"};
        int want[] = {hp->head_dim, hp->n_kv_heads, hp->n_heads};
        reader lr = {lc, "config.json per_layer_config", r->err, 0};
        if (!json_is_object(lc)) {
            r->rc = hr_err(r->err, HR_EFORMAT, "%s: per_layer_config '%s' must be an object",
                           r->where, key);
            return;
        }
        for (int k = 0; k < 3; k++) {
            int v = integer(&lr, attr[k], want[k]);
            if ((r->rc = lr.rc))
                return;
            if (v != want[k]) {
                r->rc = hr_err(r->err, HR_EUNSUPPORTED, "not supported yet: %s "
                               "per_layer_config layer %s %s %d (the other layers' %d)", mt,
                               key, attr[k], v, want[k]);
                return;
            }
        }
    }
}

static int parse_act(reader *r, hr_hparams *hp) {
    const char *a = string(r, "hidden_activation");
    if (!a)
        a = string(r, "hidden_act");
    if (!a)
        a = hp->arch->default_act;
    if (!strcmp(a, "silu") || !strcmp(a, "swish"))
        hp->act = HR_ACT_SILU;
    else if (!strcmp(a, "gelu_pytorch_tanh") || !strcmp(a, "gelu_new") ||
             !strcmp(a, "gelu_fast"))
        hp->act = HR_ACT_GELU_TANH;
    else if (!strcmp(a, "gelu"))
        hp->act = HR_ACT_GELU;
    else
        return hr_err(r->err, HR_EUNSUPPORTED,
                      "not supported yet: activation '%s'", a);
    return 0;
}

static void parse_eos(hr_hparams *hp, const json_t *v) {
    if (json_is_integer(v) && hp->n_eos < 8)
        hp->eos_ids[hp->n_eos++] = (int)json_integer_value(v);
    else if (json_is_array(v))
        for (size_t i = 0; i < json_array_size(v); i++)
            parse_eos(hp, json_array_get(v, i));
}

/* The hyperparameters of cfg (the text model's object, its arch's config
 * defaults filled in) for arch; outer is config.json itself (bos/eos). */
static int parse(hr_hparams *hp, const json_t *cfg, const json_t *outer, const json_t *gen,
                 const char *where, hr_error *err) {
    reader r = {cfg, where, err, 0};

    hp->norm_offset = hp->arch->norm_offset;
    hp->rope_interleaved = hp->arch->rope_interleaved;
    hp->n_vocab = require(&r, "vocab_size");
    hp->d_model = require(&r, "hidden_size");
    hp->n_layers = require(&r, "num_hidden_layers");
    hp->n_heads = require(&r, "num_attention_heads");
    hp->n_kv_heads = integer(&r, "num_key_value_heads", hp->n_heads);
    hp->d_ff = require(&r, "intermediate_size");
    if (r.rc)
        return r.rc;
    hp->head_dim = integer(&r, "head_dim", hp->d_model / hp->n_heads);
    hp->max_pos = integer(&r, "max_position_embeddings", 4096);
    hp->norm_eps = (float)num(&r, "rms_norm_eps",
                              num(&r, "layer_norm_eps", num(&r, "norm_epsilon", 1e-6)));
    hp->tie_embeddings = boolean(&r, "tie_word_embeddings", false);
    if (r.rc)
        return r.rc;
    if (hp->n_layers > HR_MAX_LAYERS)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %d layers (max %d)",
                      hp->n_layers, HR_MAX_LAYERS);
    if (hp->n_kv_heads <= 0 || hp->n_heads % hp->n_kv_heads || hp->head_dim <= 0 ||
        hp->head_dim % 2)
        return hr_err(err, HR_EFORMAT, "config.json: inconsistent heads "
                      "(%d query heads, %d kv heads, head_dim %d)",
                      hp->n_heads, hp->n_kv_heads, hp->head_dim);
    if (hp->head_dim > HR_ATTN_MAX_HEAD_DIM)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: head_dim %d (max %d)",
                      hp->head_dim, HR_ATTN_MAX_HEAD_DIM);
    int rc = parse_act(&r, hp);
    if (rc)
        return rc;

    /* attention */
    double qpas = num(&r, "query_pre_attn_scalar", 0.0);
    hp->attn_scale = (float)num(&r, "attention_multiplier",
                                hp->arch->attn_scale > 0 ? hp->arch->attn_scale
                                : qpas > 0               ? 1.0 / sqrt(qpas)
                                                         : 1.0 / sqrt(hp->head_dim));
    hp->attn_softcap = (float)num(&r, "attn_logit_softcapping", 0.0);
    hp->final_softcap = (float)num(&r, "final_logit_softcapping", 0.0);
    hp->sliding_window = integer(&r, "sliding_window", 0);
    hp->embed_mult = (float)num(&r, "embedding_multiplier", 1.0);
    hp->residual_mult = (float)num(&r, "residual_multiplier", 1.0);
    hp->logit_div = (float)num(&r, "logits_scaling", 1.0);
    if (r.rc)
        return r.rc;
    parse_layer_types(&r, hp);
    if (hp->arch->gemma4_fields)
        parse_gemma4(&r, hp);
    parse_moe(&r, hp);
    parse_linear(&r, hp);
    if (r.rc)
        return r.rc;

    /* rope: 5.x rope_parameters (maybe one per layer type), else 4.x fields */
    const json_t *rpj = get(&r, "rope_parameters");
    double partial = num(&r, "partial_rotary_factor", 1.0);
    if (rpj && json_is_object(rpj))
        partial = num(&(reader){rpj, "config.json rope_parameters", err, 0},
                      "partial_rotary_factor", partial);
    hp->rot_dim = (int)(hp->head_dim * partial);
    hp->rot_dim -= hp->rot_dim % 2;
    hp->rope.theta = num(&r, "rope_theta", 10000.0);
    hp->rope.original_max_pos = integer(&r, "original_max_position_embeddings", 0);
    if (r.rc)
        return r.rc;
    hp->rope_local = hp->rope;
    const json_t *full = NULL, *local = NULL;
    if (rpj && !json_is_object(rpj))
        return hr_err(err, HR_EFORMAT, "config.json: 'rope_parameters' must be an object");
    if (rpj) {
        full = json_object_get(rpj, "full_attention");
        local = json_object_get(rpj, "sliding_attention");
        if (!full && !local)
            full = rpj;
    } else {
        full = get(&r, "rope_scaling");
    }
    if (full) {
        reader rr = {full, "config.json rope parameters", err, 0};
        if (!json_is_object(full))
            return hr_err(err, HR_EFORMAT, "%s: not an object", rr.where);
        parse_rope_dict(&rr, &hp->rope, hp->rot_dim);
        if (rr.rc)
            return rr.rc;
        const json_t *ms = json_object_get(full, "mrope_section");
        if (ms) {
            int sum = 0;
            bool ok = json_is_array(ms) && json_array_size(ms) == 3;
            for (int i = 0; ok && i < 3; i++) {
                const json_t *v = json_array_get(ms, (size_t)i);
                ok = json_is_integer(v) && json_integer_value(v) >= 0 &&
                     json_integer_value(v) <= 4096;
                hp->mrope_section[i] = ok ? (int)json_integer_value(v) : 0;
                sum += hp->mrope_section[i];
            }
            if (!ok || sum != hp->rot_dim / 2)
                return hr_err(err, HR_EFORMAT, "%s: mrope_section must be 3 counts that add "
                              "up to %d (half the rotated dims)", rr.where, hp->rot_dim / 2);
        }
    }
    double local_theta = num(&r, "rope_local_base_freq", 0.0);
    if (local) {
        reader rl = {local, "config.json rope_parameters.sliding_attention", err, 0};
        if (!json_is_object(local))
            return hr_err(err, HR_EFORMAT, "%s: not an object", rl.where);
        parse_rope_dict(&rl, &hp->rope_local, hp->rot_dim);
        if (rl.rc)
            return rl.rc;
        hp->has_rope_local = true;
    } else if (local_theta > 0) {
        hp->rope_local.type = HR_ROPE_DEFAULT;
        hp->rope_local.theta = local_theta;
        hp->has_rope_local = true;
    }
    if (r.rc)
        return r.rc;
    if (hp->arch->no_rope) {
        hp->rot_dim = 0;
        for (int i = 0; i < hp->n_layers; i++)
            hp->layer_rope[i] = false;
    }
    if (hp->arch->abs_positions) {
        const char *pet = string(&r, "position_embedding_type");
        hp->n_types = integer(&r, "type_vocab_size", 2);
        if (r.rc)
            return r.rc;
        if (pet && strcmp(pet, "absolute"))
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet: position_embedding_type "
                          "'%s' (absolute is)", pet);
        if (hp->n_types < 1)
            return hr_err(err, HR_EFORMAT, "config.json: type_vocab_size must be >= 1");
    }
    hp->ctx_max = hp->max_pos;
    if (hp->rope.type == HR_ROPE_DYNAMIC && hp->rope.factor > 1)
        hp->ctx_max = (int)(hp->max_pos * hp->rope.factor);

    /* generation_config.json, then config.json, for bos/eos */
    hp->bos_id = -1;
    if (gen && json_is_object(gen))
        parse_eos(hp, json_object_get(gen, "eos_token_id"));
    if (!hp->n_eos)
        parse_eos(hp, json_object_get(outer, "eos_token_id"));
    if (!hp->n_eos)
        parse_eos(hp, json_object_get(cfg, "eos_token_id"));
    const json_t *bos = gen ? json_object_get(gen, "bos_token_id") : NULL;
    if (!json_is_integer(bos))
        bos = json_object_get(outer, "bos_token_id");
    if (!json_is_integer(bos))
        bos = json_object_get(cfg, "bos_token_id");
    if (json_is_integer(bos))
        hp->bos_id = (int)json_integer_value(bos);
    return 0;
}

int hr_hparams_from_json(hr_hparams *hp, const json_t *cfg, const json_t *gen,
                         hr_error *err) {
    memset(hp, 0, sizeof *hp);
    if (!json_is_object(cfg))
        return hr_err(err, HR_EFORMAT, "config.json: not a JSON object");
    reader r = {cfg, "config.json", err, 0};
    const char *mt = string(&r, "model_type"), *where = "config.json";
    if (r.rc)
        return r.rc;
    /* Gemma3ForConditionalGeneration, Qwen2_5_VLForConditionalGeneration:
     * the text model's numbers are in text_config (the vision tower's:
     * model/vision.h); the Hub's Qwen2.5-VL configs keep them at the top */
    const json_t *text = cfg, *tc = json_object_get(cfg, "text_config");
    if (mt && !strcmp(mt, "gemma3") && json_is_object(tc)) {
        text = tc;
        where = "config.json text_config";
        mt = json_string_value(json_object_get(tc, "model_type"));
        if (!mt)
            mt = "gemma3_text";
    } else if (mt && !strcmp(mt, "qwen2_5_vl")) {
        if (json_is_object(tc)) {
            text = tc;
            where = "config.json text_config";
        }
        mt = "qwen2_5_vl_text";
    } else if (mt && !strcmp(mt, "qwen2_audio") && json_is_object(tc)) {
        text = tc; /* Qwen2AudioForConditionalGeneration: a qwen2 text model */
        where = "config.json text_config";
        mt = json_string_value(json_object_get(tc, "model_type"));
        if (!mt)
            mt = "qwen2";
    }
    hp->arch = hr_arch_find(mt);
    if (!hp->arch)
        return hr_err(err, HR_EUNSUPPORTED,
                      "not supported yet: model_type '%s' (supported: %s)",
                      mt ? mt : "(missing)", hr_arch_list());
    /* a top-level config.json has every key of its class (to_diff_dict
     * keeps them); a nested one lacks those equal to the class defaults */
    if (!hp->arch->config_defaults || text == cfg)
        return parse(hp, text, cfg, gen, where, err);
    json_t *merged = json_loads(hp->arch->config_defaults, 0, NULL);
    if (!merged || json_object_update(merged, (json_t *)text)) {
        json_decref(merged);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    int rc = parse(hp, merged, cfg, gen, where, err);
    json_decref(merged);
    return rc;
}

void hr_hparams_deinit(hr_hparams *hp) {
    if (!hp)
        return;
    rope_params_free(&hp->rope);
    rope_params_free(&hp->rope_local);
}
