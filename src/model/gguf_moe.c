/* Mixture-of-experts GGUF files (gguf_model.h): the {arch}.expert_* keys
 * as llama.cpp's convert_hf_to_gguf.py writes them, both ways, and the
 * names of stacked experts. */
#include "core/error.h"
#include "io/gguf_write.h"
#include "model/config.h"
#include "model/gguf_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool key_count(const hr_gguf *g, const char *arch, const char *suffix, int64_t *v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    return !hr_gguf_key_int(g, k, v) && *v >= 0 && *v <= (1 << 30);
}

int hr__gguf_moe_config(const hr_gguf *g, const char *arch, json_t *cfg, hr_error *err) {
    int64_t n_exp = 0, used = 0, ff = 0, shff = 0, nl = 0;
    if (!key_count(g, arch, "expert_count", &n_exp) || n_exp == 0)
        return 0;
    if (!key_count(g, arch, "expert_used_count", &used) || used == 0)
        return hr_err(err, HR_EFORMAT, "%s: missing key '%s.expert_used_count'",
                      hr_gguf_path(g), arch);
    bool llama = !strcmp(arch, "llama");
    if (llama)
        json_object_set_new(cfg, "model_type", json_string("mixtral"));
    json_object_set_new(cfg, "num_experts", json_integer(n_exp));
    json_object_set_new(cfg, "num_experts_per_tok", json_integer(used));
    if (key_count(g, arch, "expert_feed_forward_length", &ff) && ff > 0)
        json_object_set_new(cfg, "moe_intermediate_size", json_integer(ff));
    if (key_count(g, arch, "expert_shared_feed_forward_length", &shff) && shff > 0)
        json_object_set_new(cfg, "shared_expert_intermediate_size", json_integer(shff));
    /* llama.cpp renormalises the top k for qwen3moe (and mixtral: fixed by
     * the arch), not for qwen2moe and olmoe, unless the file says */
    char k[128];
    snprintf(k, sizeof k, "%s.expert_weights_norm", arch);
    int64_t i = hr_gguf_find(g, k), nv;
    bool norm = !strcmp(arch, "qwen3moe");
    if (i >= 0 && !hr_gguf_get_int(g, i, &nv))
        norm = nv != 0;
    json_object_set_new(cfg, "norm_topk_prob", json_boolean(norm));
    /* layers without a router are dense */
    json_t *dense = json_array();
    key_count(g, arch, "block_count", &nl);
    for (int64_t l = 0; l < nl && l < HR_MAX_LAYERS; l++) {
        snprintf(k, sizeof k, "blk.%lld.ffn_gate_inp.weight", (long long)l);
        if (!hr_gguf_find_tensor(g, k))
            json_array_append_new(dense, json_integer(l));
    }
    json_object_set_new(cfg, "mlp_only_layers", dense);
    return 0;
}

int hr__gguf_moe_keys(hr_gguf_w *g, const char *arch, const hr_hparams *hp, hr_error *err) {
    if (!hp->n_experts)
        return 0;
    const hr_arch_moe *mo = &hp->arch->moe;
    if (mo->router != HR_ROUTER_SOFTMAX_TOPK || mo->layout != HR_EXPERTS_SPLIT)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of %s",
                      hp->arch->model_type);
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
    hr_gguf_w_u32(g, KEY("expert_count"), (uint32_t)hp->n_experts);
    hr_gguf_w_u32(g, KEY("expert_used_count"), (uint32_t)hp->n_experts_used);
    hr_gguf_w_u32(g, KEY("expert_feed_forward_length"), (uint32_t)hp->d_ff_expert);
    if (hp->d_ff_shared)
        hr_gguf_w_u32(g, KEY("expert_shared_feed_forward_length"), (uint32_t)hp->d_ff_shared);
    if (strcmp(arch, "llama")) /* mixtral always renormalises */
        hr_gguf_w_bool(g, KEY("expert_weights_norm"), hp->norm_topk);
#undef KEY
    return 0;
}

int hr__gguf_expert_of(const hr_hparams *hp, const char *name, char *buf, size_t n) {
    const hr_arch_moe *mo = &hp->arch->moe;
    if (!hp->n_experts || mo->layout != HR_EXPERTS_SPLIT)
        return -1;
    int layer, e, used = 0;
    char block[32];
    if (sscanf(name, "model.layers.%d.%31[a-z_].experts.%d.%n", &layer, block, &e, &used) != 3 ||
        !used || strcmp(block, mo->block))
        return -1;
    const char *part = name + used, *parts[3] = {mo->e_gate, mo->e_up, mo->e_down};
    static const char *const stacked[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(parts[i]);
        if (!strncmp(part, parts[i], len) && !strcmp(part + len, ".weight")) {
            snprintf(buf, n, "model.layers.%d.%s.switch_mlp.%s.weight", layer, mo->block,
                     stacked[i]);
            return e;
        }
    }
    return -1;
}

/* The n experts' tensors of which t is expert 0's (".experts.0."), every
 * one of t's shape and dtype (malloc'd; NULL and *rc on error). */
const hr_tensor **hr__gguf_experts_of(const hr_weights *w, const hr_tensor *t, int n, int *rc,
                                    hr_error *err) {
    const hr_tensor **p = malloc((size_t)n * sizeof *p);
    const char *at = strstr(t->name, ".experts.0.");
    if (!p || !at) {
        free(p);
        *rc = hr_err(err, HR_ENOMEM, "out of memory");
        return NULL;
    }
    for (int e = 0; e < n; e++) {
        char nm[256];
        snprintf(nm, sizeof nm, "%.*s.experts.%d.%s", (int)(at - t->name), t->name, e,
                 at + strlen(".experts.0."));
        p[e] = hr_weights_find(w, nm);
        if (!p[e] || p[e]->dtype != t->dtype || p[e]->ndim != 2 ||
            p[e]->shape[0] != t->shape[0] || p[e]->shape[1] != t->shape[1]) {
            *rc = hr_err(err, HR_EFORMAT, "tensor '%s' is missing or unlike expert 0's", nm);
            free(p);
            return NULL;
        }
    }
    return p;
}
