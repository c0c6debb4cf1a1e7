#include "train/lora_params.h"
#include "core/error.h"
#include "core/file.h"
#include "io/safetensors.h"
#include "model/gguf_model.h"
#include "sample/rng.h"
#include "train/backprop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const SLOT_PATH[HR_LORA_SLOTS] = {
    [HR_LORA_Q] = "self_attn.q_proj",  [HR_LORA_K] = "self_attn.k_proj",
    [HR_LORA_V] = "self_attn.v_proj",  [HR_LORA_O] = "self_attn.o_proj",
    [HR_LORA_GATE] = "mlp.gate_proj", [HR_LORA_UP] = "mlp.up_proj",
    [HR_LORA_DOWN] = "mlp.down_proj",
};

const char *hr_lora_slot_path(int slot) { return SLOT_PATH[slot]; }

/* ---- setup --------------------------------------------------------------------- */

int hr_lora_set_new(hr_lora_set **out, const hr_model *m, const hr_lora_cfg *cfg,
                    uint64_t seed, hr_error *err) {
    *out = NULL;
    int rc = hr_bp_supports(m, err);
    if (rc)
        return rc;
    const hr_hparams *hp = &m->hp;
    if (cfg->num_layers == 0 || cfg->num_layers < -1 || cfg->num_layers > hp->n_layers)
        return hr_err(err, HR_EINVAL, "requested to train %d layers but the model has %d "
                      "(-1: all)", cfg->num_layers, hp->n_layers);
    if (cfg->rank < 1 || cfg->rank > HR_LORA_MAX_RANK)
        return hr_err(err, HR_EINVAL, "LoRA rank %d (1..%d)", cfg->rank, HR_LORA_MAX_RANK);
    bool any = false;
    for (int s = 0; s < HR_LORA_SLOTS; s++)
        any |= cfg->keys[s];
    if (!any)
        return hr_err(err, HR_EINVAL, "no projection to adapt (lora_parameters.keys)");
    hr_lora_set *s = calloc(1, sizeof *s);
    if (!s)
        return hr_err(err, HR_ENOMEM, "out of memory");
    s->m = m;
    s->cfg = *cfg;
    s->first = cfg->num_layers < 0 ? 0 : hp->n_layers - cfg->num_layers;
    s->p = calloc((size_t)hp->n_layers * HR_LORA_SLOTS, sizeof *s->p);
    if (!s->p)
        goto oom;
    size_t n = 0;
    for (int il = s->first; il < hp->n_layers; il++)
        for (int k = 0; k < HR_LORA_SLOTS; k++) {
            const hr_tensor *w = hr_adapter_base(m, il, k);
            if (!cfg->keys[k] || !w)
                continue;
            hr_lora_param *p = &s->p[(size_t)il * HR_LORA_SLOTS + k];
            p->r = cfg->rank;
            p->in = (int)w->shape[1];
            p->out = (int)w->shape[0];
            p->scale = cfg->scale;
            n += (size_t)p->r * (p->in + p->out);
        }
    s->n = n;
    s->w = calloc(n ? n : 1, sizeof *s->w);
    s->g = calloc(n ? n : 1, sizeof *s->g);
    s->m1 = calloc(n ? n : 1, sizeof *s->m1);
    s->m2 = calloc(n ? n : 1, sizeof *s->m2);
    if (!s->w || !s->g || !s->m1 || !s->m2)
        goto oom;
    hr_rng rng;
    hr_rng_seed(&rng, seed);
    size_t off = 0;
    for (size_t i = 0; i < (size_t)hp->n_layers * HR_LORA_SLOTS; i++) {
        hr_lora_param *p = &s->p[i];
        if (!p->r)
            continue;
        p->a = s->w + off;
        p->ga = s->g + off;
        off += (size_t)p->r * p->in;
        p->bt = s->w + off;
        p->gbt = s->g + off;
        off += (size_t)p->r * p->out;
        /* mlx-lm: lora_a (in, r) uniform in +-1/sqrt(in), drawn in that
         * order; lora_b zero */
        double lim = 1.0 / sqrt((double)p->in);
        for (int i2 = 0; i2 < p->in; i2++)
            for (int r = 0; r < p->r; r++)
                p->a[(size_t)r * p->in + i2] = (float)((2 * hr_rng_uniform(&rng) - 1) * lim);
    }
    *out = s;
    return 0;
oom:
    hr_lora_set_free(s);
    return hr_err(err, HR_ENOMEM, "out of memory for the LoRA parameters");
}

void hr_lora_set_free(hr_lora_set *s) {
    if (!s)
        return;
    free(s->p);
    free(s->w);
    free(s->g);
    free(s->m1);
    free(s->m2);
    free(s);
}

void hr_lora_set_zero_grad(hr_lora_set *s) { memset(s->g, 0, s->n * sizeof *s->g); }

/* ---- optimizer ----------------------------------------------------------------- */

void hr_lora_set_div_grad(hr_lora_set *s, float d) {
    for (size_t i = 0; i < s->n; i++)
        s->g[i] /= d;
}

void hr_lora_set_adam(hr_lora_set *s, const hr_adam *o) {
    for (size_t i = 0; i < s->n; i++) {
        float w = s->w[i], g = s->g[i];
        if (o->wd > 0)
            w *= 1.0f - o->lr * o->wd;
        float m1 = o->b1 * s->m1[i] + (1.0f - o->b1) * g;
        float m2 = o->b2 * s->m2[i] + (1.0f - o->b2) * (g * g);
        s->m1[i] = m1;
        s->m2[i] = m2;
        s->w[i] = w - o->lr * m1 / (sqrtf(m2) + o->eps);
    }
}

/* ---- files --------------------------------------------------------------------- */

int hr_lora_set_save(const hr_lora_set *s, const char *path, hr_error *err) {
    const hr_hparams *hp = &s->m->hp;
    size_t cnt = 0, n_mats = 0;
    for (size_t i = 0; i < (size_t)hp->n_layers * HR_LORA_SLOTS; i++)
        n_mats += s->p[i].r != 0;
    hr_tensor *t = calloc(2 * n_mats + 1, sizeof *t);
    char *names = calloc(2 * n_mats + 1, 96);
    float *at = malloc((s->n ? s->n : 1) * sizeof *at); /* a^T, bt in the file's order */
    int rc = HR_ENOMEM;
    if (!t || !names || !at) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    size_t off = 0;
    for (int il = 0; il < hp->n_layers; il++)
        for (int k = 0; k < HR_LORA_SLOTS; k++) {
            const hr_lora_param *p = &s->p[(size_t)il * HR_LORA_SLOTS + k];
            if (!p->r)
                continue;
            float *a = at + off;
            for (int r = 0; r < p->r; r++)
                for (int i = 0; i < p->in; i++)
                    a[(size_t)i * p->r + r] = p->a[(size_t)r * p->in + i];
            off += (size_t)p->r * p->in;
            char *na = names + 96 * cnt;
            snprintf(na, 96, "model.layers.%d.%s.lora_a", il, SLOT_PATH[k]);
            t[cnt++] = (hr_tensor){.name = na, .dtype = HR_DTYPE_F32, .ndim = 2,
                                   .shape = {p->in, p->r}, .data = a,
                                   .nbytes = (size_t)p->in * p->r * sizeof(float)};
            /* a GGUF llama's q/k rows are permuted (model/gguf_model.h): the
             * file has Hugging Face's order, as model/adapter.c reads it */
            float *b = at + off;
            bool perm = s->m->qk_permuted && (k == HR_LORA_Q || k == HR_LORA_K);
            for (int r = 0; r < p->r; r++)
                for (int j = 0; j < p->out; j++) {
                    int64_t dst = perm ? hr_gguf_unpermute_row(j, s->m->hp.head_dim) : j;
                    b[(size_t)r * p->out + dst] = p->bt[(size_t)r * p->out + j];
                }
            off += (size_t)p->r * p->out;
            char *nb = names + 96 * cnt;
            snprintf(nb, 96, "model.layers.%d.%s.lora_b", il, SLOT_PATH[k]);
            t[cnt++] = (hr_tensor){.name = nb, .dtype = HR_DTYPE_F32, .ndim = 2,
                                   .shape = {p->r, p->out}, .data = b,
                                   .nbytes = (size_t)p->r * p->out * sizeof(float)};
        }
    rc = hr_st_write(path, t, cnt, NULL, 0, err);
done:
    free(t);
    free(names);
    free(at);
    return rc;
}

int hr_lora_set_write_config(const hr_lora_set *s, const char *path, const json_t *extra,
                             hr_error *err) {
    json_t *root = extra ? json_deep_copy(extra) : json_object();
    json_t *keys = json_array(), *lp = json_object();
    int rc = HR_ENOMEM;
    if (!root || !keys || !lp)
        goto done;
    for (int k = 0; k < HR_LORA_SLOTS; k++)
        if (s->cfg.keys[k])
            json_array_append_new(keys, json_string(SLOT_PATH[k]));
    json_object_set_new(lp, "rank", json_integer(s->cfg.rank));
    json_object_set_new(lp, "scale", json_real(s->cfg.scale));
    json_object_set_new(lp, "dropout", json_real(0.0));
    json_object_set(lp, "keys", keys);
    json_object_set_new(root, "fine_tune_type", json_string("lora"));
    json_object_set_new(root, "num_layers", json_integer(s->cfg.num_layers));
    json_object_set(root, "lora_parameters", lp);
    char *text = json_dumps(root, JSON_INDENT(4) | JSON_SORT_KEYS);
    if (!text)
        goto done;
    size_t len = strlen(text);
    rc = hr_file_write_atomic(path, text, len, err);
    free(text);
done:
    if (rc == HR_ENOMEM)
        hr_err(err, HR_ENOMEM, "out of memory");
    json_decref(keys);
    json_decref(lp);
    json_decref(root);
    return rc;
}

int hr_lora_set_load(hr_lora_set *s, const char *path, hr_error *err) {
    hr_st_file *f;
    int rc = hr_st_open(&f, path, err);
    if (rc)
        return rc;
    const hr_hparams *hp = &s->m->hp;
    bool *seen = calloc((size_t)hp->n_layers * HR_LORA_SLOTS * 2, sizeof *seen);
    if (!seen) {
        hr_st_close(f);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < hr_st_count(f) && !rc; i++) {
        const hr_tensor *t = hr_st_tensor(f, i);
        int il = -1, k = -1, part = -1, used = 0;
        char mod[64];
        if (sscanf(t->name, "model.layers.%d.%63[a-z_.]%n", &il, mod, &used) == 2 &&
            !t->name[used]) {
            size_t ml = strlen(mod);
            part = ml > 7 && !strcmp(mod + ml - 7, ".lora_a") ? 0
                   : ml > 7 && !strcmp(mod + ml - 7, ".lora_b") ? 1 : -1;
            if (part >= 0) {
                mod[ml - 7] = 0;
                for (int q = 0; q < HR_LORA_SLOTS; q++)
                    if (!strcmp(mod, SLOT_PATH[q]))
                        k = q;
            }
        }
        const hr_lora_param *p = il >= 0 && il < hp->n_layers && k >= 0
                                     ? &s->p[(size_t)il * HR_LORA_SLOTS + k] : NULL;
        if (!p || !p->r) {
            rc = hr_err(err, HR_EINVAL, "%s: tensor '%s' is not a LoRA matrix of this run "
                        "(its layers, keys and rank)", path, t->name);
            break;
        }
        int64_t r0 = part ? p->r : p->in, r1 = part ? p->out : p->r;
        if (t->dtype != HR_DTYPE_F32 && t->dtype != HR_DTYPE_BF16 && t->dtype != HR_DTYPE_F16) {
            rc = hr_err(err, HR_EFORMAT, "%s: tensor '%s' is %s (F32, F16 or BF16)", path,
                        t->name, hr_dtype_name(t->dtype));
            break;
        }
        if (t->ndim != 2 || t->shape[0] != r0 || t->shape[1] != r1) {
            rc = hr_err(err, HR_EINVAL, "%s: tensor '%s' has the wrong shape (expected "
                        "[%lld, %lld]: the run's rank and the model's)", path, t->name,
                        (long long)r0, (long long)r1);
            break;
        }
        size_t es = hr_dtype_size(t->dtype);
        bool perm = s->m->qk_permuted && (k == HR_LORA_Q || k == HR_LORA_K);
        for (int64_t a = 0; a < r0; a++)
            for (int64_t b = 0; b < r1; b++) {
                /* a GGUF llama's q/k rows: base row b is the file's row
                 * unpermute(b) (model/gguf_model.h) */
                int64_t sb = part && perm ? hr_gguf_unpermute_row(b, s->m->hp.head_dim) : b;
                const char *src = (const char *)t->data + (size_t)(a * r1 + sb) * es;
                float v;
                if (t->dtype == HR_DTYPE_F32)
                    memcpy(&v, src, 4);
                else {
                    uint16_t h;
                    memcpy(&h, src, 2);
                    v = t->dtype == HR_DTYPE_BF16 ? hr_bf16_to_f32(h) : hr_f16_to_f32(h);
                }
                if (part)
                    p->bt[a * r1 + b] = v;
                else
                    p->a[b * r0 + a] = v; /* lora_a (in, r) -> a (r, in) */
            }
        seen[((size_t)il * HR_LORA_SLOTS + k) * 2 + part] = true;
    }
    for (size_t i = 0; i < (size_t)hp->n_layers * HR_LORA_SLOTS && !rc; i++)
        if (s->p[i].r && (!seen[2 * i] || !seen[2 * i + 1]))
            rc = hr_err(err, HR_EINVAL, "%s: no model.layers.%zu.%s.lora_%s (the run adapts "
                        "it)", path, i / HR_LORA_SLOTS, SLOT_PATH[i % HR_LORA_SLOTS],
                        seen[2 * i] ? "b" : "a");
    free(seen);
    hr_st_close(f);
    return rc;
}
