/* LoRA adapters: the two layouts (peft, mlx-lm) into per-projection f32
 * matrices (adapter.h). Reading a directory: config, then every tensor's
 * name -> (layer, projection, part), then shapes against the base, then
 * the copies (transposed / permuted as the base needs) and DoRA's factors. */
#include "model/adapter.h"
#include "core/error.h"
#include "core/file.h"
#include "io/safetensors.h"
#include "kernels/cpu/quant.h"
#include "model/gguf_model.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- names ------------------------------------------------------------------- */

static const struct {
    const char *path; /* inside model.layers.N */
    const char *leaf; /* its last component (peft target_modules) */
} MODULES[HR_LORA_SLOTS] = {
    [HR_LORA_Q] = {"self_attn.q_proj", "q_proj"},
    [HR_LORA_K] = {"self_attn.k_proj", "k_proj"},
    [HR_LORA_V] = {"self_attn.v_proj", "v_proj"},
    [HR_LORA_O] = {"self_attn.o_proj", "o_proj"},
    [HR_LORA_GATE] = {"mlp.gate_proj", "gate_proj"},
    [HR_LORA_UP] = {"mlp.up_proj", "up_proj"},
    [HR_LORA_DOWN] = {"mlp.down_proj", "down_proj"},
};

#define KNOWN "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj and down_proj of dense layers"

enum { PART_A, PART_B, PART_M, PARTS };

static const struct {
    const char *suffix;
    int part;
} LEAVES[] = {
    {".lora_A.weight", PART_A}, {".lora_B.weight", PART_B},
    {".lora_magnitude_vector.weight", PART_M}, {".lora_magnitude_vector", PART_M},
    {".lora_a", PART_A}, {".lora_b", PART_B}, {".m", PART_M},
};

static int slot_of_path(const char *path, size_t n) {
    for (int s = 0; s < HR_LORA_SLOTS; s++)
        if (strlen(MODULES[s].path) == n && !memcmp(MODULES[s].path, path, n))
            return s;
    return -1;
}

const hr_tensor *hr_adapter_base(const hr_model *m, int il, int slot) {
    const hr_layer *L = &m->layers[il];
    const hr_tensor *t[HR_LORA_SLOTS] = {&L->wq, &L->wk, &L->wv, &L->wo,
                                         &L->w_gate, &L->w_up, &L->w_down};
    return t[slot]->data ? t[slot] : NULL;
}

/* One tensor name -> layer, projection, part. The peft prefix
 * "base_model.model." is optional. */
static int parse_name(const hr_model *m, const char *file, const char *name, int *layer,
                      int *slot, int *part, hr_error *err) {
    const char *p = name;
    if (!strncmp(p, "base_model.model.", 17))
        p += 17;
    size_t len = strlen(p);
    *part = -1;
    for (size_t i = 0; i < sizeof LEAVES / sizeof *LEAVES && *part < 0; i++) {
        size_t sl = strlen(LEAVES[i].suffix);
        if (len > sl && !strcmp(p + len - sl, LEAVES[i].suffix)) {
            *part = LEAVES[i].part;
            len -= sl;
        }
    }
    if (*part < 0)
        return hr_err(err, HR_EUNSUPPORTED, "%s: tensor '%s' is not a LoRA matrix (not "
                      "supported yet: adapters that train embeddings, biases or whole modules)",
                      file, name);
    char *end;
    if (strncmp(p, "model.layers.", 13) || (*layer = (int)strtol(p + 13, &end, 10), end == p + 13) ||
        *end != '.')
        return hr_err(err, HR_EUNSUPPORTED, "%s: '%.*s' is an unknown target module (hearth "
                      "adapts " KNOWN ")", file, (int)len, p);
    end++;
    *slot = slot_of_path(end, (size_t)(p + len - end));
    if (*slot < 0)
        return hr_err(err, HR_EUNSUPPORTED, "%s: '%.*s' is an unknown target module (hearth "
                      "adapts " KNOWN ")", file, (int)len, p);
    const hr_hparams *hp = &m->hp;
    if (*layer < 0 || *layer >= hp->n_layers)
        return hr_err(err, HR_EINVAL, "%s: tensor '%s' names layer %d; the model has %d",
                      file, name, *layer, hp->n_layers);
    bool attn = *slot <= HR_LORA_O;
    if ((attn && hp->layer_linear[*layer]) || (!attn && hp->layer_moe[*layer]) ||
        (*slot == HR_LORA_Q && hp->arch->attn_out_gate) ||
        !hr_adapter_base(m, *layer, *slot))
        return hr_err(err, HR_EUNSUPPORTED, "%s: '%.*s': the model (%s) has no such dense "
                      "projection in layer %d (not supported yet: adapters on experts, "
                      "linear-attention or fused projections)", file, (int)len, p,
                      hp->arch->model_type, *layer);
    return 0;
}

/* ---- config ------------------------------------------------------------------ */

typedef struct cfg {
    bool mlx, dora, rslora;
    int r;                  /* peft r / mlx rank */
    double alpha;           /* peft lora_alpha */
    double scale;           /* mlx scale */
    int num_layers;         /* mlx; -1: all */
    bool keys[HR_LORA_SLOTS]; /* mlx lora_parameters.keys, all true without */
    const json_t *rank_pattern, *alpha_pattern; /* peft (borrowed from root) */
} cfg;

static bool module_known(const char *t) {
    for (int s = 0; s < HR_LORA_SLOTS; s++) {
        size_t n = strlen(t), pl = strlen(MODULES[s].path);
        if (!strcmp(t, MODULES[s].leaf) || !strcmp(t, MODULES[s].path) ||
            (n > pl && !strcmp(t + n - pl, MODULES[s].path) && t[n - pl - 1] == '.'))
            return true;
    }
    return false;
}

static int num_of(const json_t *o, const char *key, double dflt, double *out, const char *file,
                  hr_error *err) {
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v))
        return hr_err(err, HR_EFORMAT, "%s: '%s' must be a number", file, key);
    *out = json_number_value(v);
    return 0;
}

static int peft_config(const json_t *root, cfg *c, const char *file, hr_error *err) {
    const json_t *t = json_object_get(root, "peft_type");
    if (t && !json_is_string(t))
        return hr_err(err, HR_EFORMAT, "%s: 'peft_type' must be a string", file);
    if (t && strcmp(json_string_value(t), "LORA"))
        return hr_err(err, HR_EUNSUPPORTED, "%s: unsupported adapter type %s (hearth loads "
                      "LoRA adapters: peft_type LORA)", file, json_string_value(t));
    double r, alpha;
    int rc;
    if ((rc = num_of(root, "r", 8, &r, file, err)) ||
        (rc = num_of(root, "lora_alpha", 8, &alpha, file, err)))
        return rc;
    c->r = (int)r;
    c->alpha = alpha;
    c->rslora = json_is_true(json_object_get(root, "use_rslora"));
    c->dora = json_is_true(json_object_get(root, "use_dora"));
    const json_t *bias = json_object_get(root, "bias");
    if (bias && json_is_string(bias) && strcmp(json_string_value(bias), "none"))
        return hr_err(err, HR_EUNSUPPORTED, "%s: not supported yet: adapters that train biases "
                      "(bias \"%s\")", file, json_string_value(bias));
    const json_t *mts = json_object_get(root, "modules_to_save");
    if (mts && json_is_array(mts) && json_array_size(mts) > 0)
        return hr_err(err, HR_EUNSUPPORTED, "%s: not supported yet: modules_to_save (whole "
                      "modules trained beside the adapter)", file);
    if (json_is_true(json_object_get(root, "fan_in_fan_out")))
        return hr_err(err, HR_EUNSUPPORTED, "%s: not supported yet: fan_in_fan_out (Conv1D "
                      "bases)", file);
    const json_t *tm = json_object_get(root, "target_modules");
    if (json_is_array(tm)) {
        size_t i;
        const json_t *v;
        json_array_foreach(tm, i, v) {
            if (!json_is_string(v))
                return hr_err(err, HR_EFORMAT, "%s: target_modules must be strings", file);
            if (!module_known(json_string_value(v)))
                return hr_err(err, HR_EUNSUPPORTED, "%s: '%s' is an unknown target module "
                              "(hearth adapts " KNOWN ")", file, json_string_value(v));
        }
    }
    c->rank_pattern = json_object_get(root, "rank_pattern");
    c->alpha_pattern = json_object_get(root, "alpha_pattern");
    if ((c->rank_pattern && !json_is_object(c->rank_pattern) && !json_is_null(c->rank_pattern)) ||
        (c->alpha_pattern && !json_is_object(c->alpha_pattern) &&
         !json_is_null(c->alpha_pattern)))
        return hr_err(err, HR_EFORMAT, "%s: rank_pattern / alpha_pattern must be objects", file);
    return 0;
}

static int mlx_config(const json_t *root, cfg *c, const char *file, hr_error *err) {
    c->mlx = true;
    const json_t *t = json_object_get(root, "fine_tune_type");
    const char *ft = t && json_is_string(t) ? json_string_value(t) : "lora";
    if (!strcmp(ft, "dora"))
        c->dora = true;
    else if (strcmp(ft, "lora"))
        return hr_err(err, HR_EUNSUPPORTED, "%s: unsupported adapter type %s (hearth loads "
                      "fine_tune_type lora and dora%s)", file, ft,
                      !strcmp(ft, "full") ? "; a full fine-tune is a model: serve it as one" : "");
    double nl, rank, scale;
    int rc;
    if ((rc = num_of(root, "num_layers", -1, &nl, file, err)))
        return rc;
    c->num_layers = (int)nl;
    const json_t *lp = json_object_get(root, "lora_parameters");
    if (lp && !json_is_object(lp))
        return hr_err(err, HR_EFORMAT, "%s: 'lora_parameters' must be an object", file);
    if ((rc = num_of(lp, "rank", 8, &rank, file, err)) ||
        (rc = num_of(lp, "scale", 20, &scale, file, err)))
        return rc;
    c->r = (int)rank;
    c->scale = scale;
    const json_t *keys = json_object_get(lp, "keys");
    for (int s = 0; s < HR_LORA_SLOTS; s++)
        c->keys[s] = !keys || json_is_null(keys);
    if (keys && json_is_array(keys)) {
        size_t i;
        const json_t *v;
        json_array_foreach(keys, i, v) {
            const char *k = json_is_string(v) ? json_string_value(v) : "";
            int s = slot_of_path(k, strlen(k));
            if (s < 0)
                return hr_err(err, HR_EUNSUPPORTED, "%s: '%s' is an unknown target module "
                              "(hearth adapts " KNOWN ")", file, k);
            c->keys[s] = true;
        }
    }
    return 0;
}

/* peft's get_pattern_key: the first key k (in file order) with
 * re.match(r"(.*\.)?(k)$", module); NULL when none. */
static const json_t *pattern_value(const json_t *pat, const char *module, const char *file,
                                   int *rc, hr_error *err) {
    const char *key;
    const json_t *v;
    if (!pat || !json_is_object(pat))
        return NULL;
    json_object_foreach((json_t *)pat, key, v) {
        char re[512];
        snprintf(re, sizeof re, "(?:.*\\.)?(?:%s)$", key);
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_ANCHORED,
                                         &ec, &eo, NULL);
        if (!code) {
            *rc = hr_err(err, HR_EFORMAT, "%s: pattern '%s' is not a regular expression", file,
                         key);
            return NULL;
        }
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
        int hit = md ? pcre2_match(code, (PCRE2_SPTR)module, strlen(module), 0, 0, md, NULL) : -1;
        pcre2_match_data_free(md);
        pcre2_code_free(code);
        if (hit >= 0)
            return v;
    }
    return NULL;
}

/* ---- tensors ----------------------------------------------------------------- */

/* element i as f32 (memcpy: a safetensors data section need not be aligned) */
static float elem(const hr_tensor *t, size_t i) {
    float f;
    uint16_t h;
    switch (t->dtype) {
    case HR_DTYPE_F32:
        memcpy(&f, (const char *)t->data + 4 * i, 4);
        return f;
    case HR_DTYPE_F16:
        memcpy(&h, (const char *)t->data + 2 * i, 2);
        return hr_f16_to_f32(h);
    case HR_DTYPE_BF16:
        memcpy(&h, (const char *)t->data + 2 * i, 2);
        return hr_bf16_to_f32(h);
    default: return 0;
    }
}

typedef struct found {
    const hr_tensor *part[PARTS];
} found;

/* the shapes of one projection's tensors against the base; *r its rank */
static int check_shapes(const hr_model *m, const cfg *c, const found *f, int il, int s,
                        const char *file, int *r, hr_error *err) {
    const hr_tensor *w = hr_adapter_base(m, il, s);
    int64_t in = w->shape[1], out = w->shape[0];
    const hr_tensor *A = f->part[PART_A], *B = f->part[PART_B], *M = f->part[PART_M];
    const char *mod = MODULES[s].path;
    if (!A || !B)
        return hr_err(err, HR_EFORMAT, "%s: layer %d %s has lora_%s but not lora_%s", file, il,
                      mod, A ? (c->mlx ? "a" : "A") : (c->mlx ? "b" : "B"),
                      A ? (c->mlx ? "b" : "B") : (c->mlx ? "a" : "A"));
    const hr_tensor *all[] = {A, B, M};
    for (int i = 0; i < 3; i++)
        if (all[i] && (all[i]->dtype != HR_DTYPE_F32 && all[i]->dtype != HR_DTYPE_F16 &&
                       all[i]->dtype != HR_DTYPE_BF16))
            return hr_err(err, HR_EUNSUPPORTED, "%s: tensor '%s' is %s (adapters are F32, F16 "
                          "or BF16)", file, all[i]->name, hr_dtype_name(all[i]->dtype));
    if (A->ndim != 2 || B->ndim != 2)
        return hr_err(err, HR_EFORMAT, "%s: layer %d %s: LoRA matrices must be 2-D", file, il,
                      mod);
    /* peft: A (r, in), B (out, r); mlx: a (in, r), b (r, out) */
    int64_t ar = c->mlx ? A->shape[1] : A->shape[0], ain = c->mlx ? A->shape[0] : A->shape[1];
    int64_t br = c->mlx ? B->shape[0] : B->shape[1], bout = c->mlx ? B->shape[1] : B->shape[0];
    if (ain != in || bout != out || ar != br)
        return hr_err(err, HR_EINVAL, "%s: layer %d %s: shape mismatch with the base: A is "
                      "[%lld, %lld], B [%lld, %lld], the base weight [%lld out, %lld in]", file,
                      il, mod, (long long)A->shape[0], (long long)A->shape[1],
                      (long long)B->shape[0], (long long)B->shape[1], (long long)out,
                      (long long)in);
    if (ar < 1 || ar > HR_LORA_MAX_RANK)
        return hr_err(err, HR_EUNSUPPORTED, "%s: layer %d %s: rank %lld (not supported yet "
                      "above %d)", file, il, mod, (long long)ar, HR_LORA_MAX_RANK);
    if (c->dora != (M != NULL))
        return hr_err(err, HR_EFORMAT, "%s: layer %d %s: %s", file, il, mod,
                      c->dora ? "DoRA without a magnitude vector"
                              : "a magnitude vector, but the config is not DoRA");
    if (M && hr_tensor_numel(M) != out)
        return hr_err(err, HR_EINVAL, "%s: layer %d %s: shape mismatch with the base: the "
                      "magnitude has %lld entries, the base %lld rows", file, il, mod,
                      (long long)hr_tensor_numel(M), (long long)out);
    *r = (int)ar;
    return 0;
}

/* the scale of projection (il, s) of rank r */
static int scale_of(const cfg *c, int il, int s, int r, const char *file, float *out,
                    hr_error *err) {
    if (c->mlx) {
        if (r != c->r)
            return hr_err(err, HR_EINVAL, "%s: layer %d %s has rank %d; lora_parameters.rank "
                          "is %d", file, il, MODULES[s].path, r, c->r);
        *out = (float)c->scale;
        return 0;
    }
    char module[128];
    snprintf(module, sizeof module, "model.layers.%d.%s", il, MODULES[s].path);
    int rc = 0;
    int want = c->r;
    double alpha = c->alpha;
    const json_t *v = pattern_value(c->rank_pattern, module, file, &rc, err);
    if (rc)
        return rc;
    if (v && json_is_number(v))
        want = (int)json_number_value(v);
    if ((v = pattern_value(c->alpha_pattern, module, file, &rc, err)) && json_is_number(v))
        alpha = json_number_value(v);
    if (rc)
        return rc;
    if (r != want)
        return hr_err(err, HR_EINVAL, "%s: %s has rank %d; the config says %d (r / "
                      "rank_pattern)", file, module, r, want);
    *out = (float)(c->rslora ? alpha / sqrt((double)r) : alpha / r);
    return 0;
}

/* Copy one projection's matrices (a (r, in), bt (r, out) in the base's row
 * order) and, for DoRA, dora[j] = m[j] / ||W_j + scale (B A)_j||. */
static void fill(const hr_model *m, const cfg *c, const found *f, int il, int s,
                 hr_lora_mat *mm, float *a, float *bt, float *dora) {
    const hr_tensor *w = hr_adapter_base(m, il, s);
    int64_t in = w->shape[1], out = w->shape[0];
    int r = mm->r;
    bool perm = m->qk_permuted && (s == HR_LORA_Q || s == HR_LORA_K);
    for (int k = 0; k < r; k++)
        for (int64_t i = 0; i < in; i++)
            a[(size_t)k * in + i] = elem(f->part[PART_A], c->mlx ? (size_t)i * r + k
                                                                 : (size_t)k * in + i);
    for (int64_t j = 0; j < out; j++) {
        int64_t src = perm ? hr_gguf_unpermute_row(j, m->hp.head_dim) : j;
        for (int k = 0; k < r; k++)
            bt[(size_t)k * out + j] = elem(f->part[PART_B], c->mlx ? (size_t)k * out + src
                                                                   : (size_t)src * r + k);
    }
    mm->a = a;
    mm->bt = bt;
    if (!dora)
        return;
    float *row = malloc((size_t)in * sizeof *row);
    for (int64_t j = 0; row && j < out; j++) {
        int64_t src = perm ? hr_gguf_unpermute_row(j, m->hp.head_dim) : j;
        hr_dequant_range(w, j, 0, in, row);
        double ss = 0;
        for (int64_t i = 0; i < in; i++) {
            double v = row[i];
            for (int k = 0; k < r; k++)
                v += (double)mm->scale * bt[(size_t)k * out + j] * a[(size_t)k * in + i];
            ss += v * v;
        }
        dora[j] = (float)(elem(f->part[PART_M], (size_t)src) / sqrt(ss));
    }
    free(row);
    mm->dora = dora;
}

/* ---- open -------------------------------------------------------------------- */

/* The adapter from its parsed config (root) and weights (st); cfg_path and
 * st_path name them in errors. */
static int build(hr_adapter *ad, const hr_model *m, const json_t *root, bool peft,
                 const hr_st_file *st, const char *cfg_path, const char *st_path,
                 hr_error *err) {
    if (m->be->ops->lora == NULL)
        return hr_err(err, HR_EUNSUPPORTED, "adapters are not supported yet on %s (the CPU "
                      "backend runs them)", m->be->name);
    if (!json_is_object(root))
        return hr_err(err, HR_EFORMAT, "%s: not an object", cfg_path);
    cfg c = {0};
    int rc = peft ? peft_config(root, &c, cfg_path, err) : mlx_config(root, &c, cfg_path, err);
    int L = m->hp.n_layers;
    found *fd = calloc((size_t)L * HR_LORA_SLOTS, sizeof *fd);
    ad->mats = calloc((size_t)L * HR_LORA_SLOTS, sizeof *ad->mats);
    if (!rc && (!fd || !ad->mats))
        rc = hr_err(err, HR_ENOMEM, "out of memory");
    if (rc)
        goto done;
    for (size_t i = 0; i < hr_st_count(st); i++) {
        const hr_tensor *t = hr_st_tensor(st, i);
        int il = 0, s = 0, part = 0;
        if ((rc = parse_name(m, st_path, t->name, &il, &s, &part, err)))
            goto done;
        if (c.mlx && ((c.num_layers >= 0 && il < L - c.num_layers) || !c.keys[s])) {
            rc = hr_err(err, HR_EINVAL, "%s: tensor '%s' is outside the adapter's num_layers "
                        "(%d) or lora_parameters.keys", st_path, t->name, c.num_layers);
            goto done;
        }
        fd[(size_t)il * HR_LORA_SLOTS + s].part[part] = t;
    }
    size_t floats = 0;
    for (int il = 0; il < L; il++)
        for (int s = 0; s < HR_LORA_SLOTS; s++) {
            const found *f = &fd[(size_t)il * HR_LORA_SLOTS + s];
            if (!f->part[PART_A] && !f->part[PART_B] && !f->part[PART_M])
                continue;
            hr_lora_mat *mm = &ad->mats[(size_t)il * HR_LORA_SLOTS + s];
            if ((rc = check_shapes(m, &c, f, il, s, st_path, &mm->r, err)) ||
                (rc = scale_of(&c, il, s, mm->r, cfg_path, &mm->scale, err)))
                goto done;
            const hr_tensor *w = hr_adapter_base(m, il, s);
            floats += (size_t)mm->r * (size_t)(w->shape[0] + w->shape[1]) +
                      (c.dora ? (size_t)w->shape[0] : 0);
            ad->n_mats++;
            if (mm->r > ad->max_rank)
                ad->max_rank = mm->r;
        }
    if (ad->n_mats == 0) {
        rc = hr_err(err, HR_EFORMAT, "%s: no LoRA matrices", st_path);
        goto done;
    }
    ad->n_floats = floats;
    if (!(ad->mem = malloc(floats * sizeof(float)))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory (%zu MiB for the adapter)", floats >> 18);
        goto done;
    }
    float *p = ad->mem;
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0x6c6f726100000001ull);
    for (int il = 0; il < L; il++)
        for (int s = 0; s < HR_LORA_SLOTS; s++) {
            hr_lora_mat *mm = &ad->mats[(size_t)il * HR_LORA_SLOTS + s];
            if (!mm->r)
                continue;
            const hr_tensor *w = hr_adapter_base(m, il, s);
            size_t in = (size_t)w->shape[1], out = (size_t)w->shape[0];
            float *a = p, *bt = a + (size_t)mm->r * in, *dora = c.dora ? bt + mm->r * out : NULL;
            fill(m, &c, &fd[(size_t)il * HR_LORA_SLOTS + s], il, s, mm, a, bt, dora);
            p = bt + mm->r * out + (dora ? out : 0);
            int32_t id[3] = {il, s, mm->r};
            if (h) {
                XXH64_update(h, id, sizeof id);
                XXH64_update(h, &mm->scale, sizeof mm->scale);
            }
        }
    if (h) {
        XXH64_update(h, ad->mem, floats * sizeof(float));
        ad->fingerprint = XXH64_digest(h);
        XXH64_freeState(h);
    }
    ad->fingerprint |= 1; /* never 0: 0 seeds the base model's prompt cache */
    ad->format = c.mlx ? "mlx" : "peft";
    ad->dora = c.dora;
done:
    free(fd);
    return rc;
}

static int load(hr_adapter *ad, const hr_model *m, const char *dir, hr_error *err) {
    char cfg_path[4096], st_path[4096];
    hr_path_join(cfg_path, sizeof cfg_path, dir, "adapter_config.json");
    if (!hr_dir_exists(dir))
        return hr_err(err, HR_ENOTFOUND, "adapter directory %s does not exist", dir);
    bool peft = hr_path_join(st_path, sizeof st_path, dir, "adapter_model.safetensors") == 0 &&
                hr_file_exists(st_path);
    if (!peft) {
        hr_path_join(st_path, sizeof st_path, dir, "adapters.safetensors");
        if (!hr_file_exists(st_path))
            return hr_err(err, HR_ENOTFOUND, "%s holds no adapter (adapter_model.safetensors "
                          "of peft or adapters.safetensors of mlx-lm)", dir);
    }
    if (!hr_file_exists(cfg_path))
        return hr_err(err, HR_ENOTFOUND, "%s has no adapter_config.json", dir);
    json_error_t je;
    json_t *root = json_load_file(cfg_path, 0, &je);
    if (!root)
        return hr_err(err, HR_EFORMAT, "%s: %s", cfg_path, je.text);
    hr_st_file *st = NULL;
    int rc = hr_st_open(&st, st_path, err);
    if (!rc)
        rc = build(ad, m, root, peft, st, cfg_path, st_path, err);
    hr_st_close(st);
    json_decref(root);
    return rc;
}

int hr_adapter_open(hr_adapter **out, const hr_model *m, const char *dir, const char *name,
                    hr_error *err) {
    *out = NULL;
    hr_adapter *ad = calloc(1, sizeof *ad);
    if (!ad || !(ad->path = strdup(dir)) || !(ad->name = strdup(name ? name : dir))) {
        hr_adapter_unref(ad);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    atomic_init(&ad->refs, 1);
    ad->model = m;
    int rc = load(ad, m, dir, err);
    if (rc) {
        hr_adapter_unref(ad);
        return rc;
    }
    *out = ad;
    return 0;
}

void hr_adapter_ref(hr_adapter *a) { atomic_fetch_add(&a->refs, 1); }

void hr_adapter_unref(hr_adapter *a) {
    if (!a || atomic_fetch_sub(&a->refs, 1) > 1)
        return;
    free(a->name);
    free(a->path);
    free(a->mats);
    free(a->mem);
    free(a);
}

int hr_adapter_parse(hr_adapter **out, const hr_model *m, const char *config, size_t config_len,
                     const void *st_image, size_t st_len, bool mlx, hr_error *err) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(config, config_len, 0, &je);
    if (!root)
        return hr_err(err, HR_EFORMAT, "adapter_config.json: %s", je.text);
    hr_st_file *st = NULL;
    hr_adapter *ad = calloc(1, sizeof *ad);
    int rc = !ad ? hr_err(err, HR_ENOMEM, "out of memory")
                 : hr_st_parse(&st, st_image, st_len, "adapter", err);
    if (!rc) {
        atomic_init(&ad->refs, 1);
        ad->model = m;
        rc = build(ad, m, root, !mlx, st, "adapter_config.json", "adapter", err);
    }
    hr_st_close(st);
    json_decref(root);
    if (rc) {
        hr_adapter_unref(ad);
        return rc;
    }
    *out = ad;
    return 0;
}
