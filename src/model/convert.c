/* hr_convert: model directory -> mlx-lm directory (MLX affine) or GGUF. */
#include "model/convert.h"
#include "model/fuse.h"
#include "core/error.h"
#include "core/file.h"
#include "io/safetensors.h"
#include "kernels/cpu/quant.h"
#include "model/gguf_model.h"
#include "model/weights.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

double hr_affine_bpw(int bits, int group, int sbytes) {
    return bits + 2.0 * 8.0 * sbytes / group;
}

/* ---- temp directory ------------------------------------------------------ */

static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            !hr_path_join(p, sizeof p, dir, e->d_name))
            unlink(p);
    closedir(d);
    rmdir(dir);
}

/* Copy every regular file of src except weights and config.json. */
static int copy_side_files(const char *src, const char *dst, hr_error *err) {
    DIR *d = opendir(src);
    if (!d)
        return hr_err(err, HR_EIO, "%s: cannot open directory", src);
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        const char *n = e->d_name;
        size_t len = strlen(n);
        if (n[0] == '.' || !strcmp(n, "config.json") ||
            (len > 12 && !strcmp(n + len - 12, ".safetensors")) ||
            (len > 11 && !strcmp(n + len - 11, ".index.json")))
            continue;
        char from[4096], to[4096];
        struct stat st;
        if (hr_path_join(from, sizeof from, src, n) || hr_path_join(to, sizeof to, dst, n) ||
            stat(from, &st) || !S_ISREG(st.st_mode))
            continue;
        char *buf;
        size_t blen;
        if (!(rc = hr_file_read(from, &buf, &blen, err))) {
            rc = hr_file_write_atomic(to, buf, blen, err);
            free(buf);
        }
    }
    closedir(d);
    return rc;
}

/* ---- planning ------------------------------------------------------------- */

typedef struct item {
    const hr_tensor *t;
    int bits; /* 0: not quantized */
    int prio; /* lower = more sensitive */
} item;

static int layer_of(const char *name) {
    const char *p = strstr(name, "layers.");
    return p ? atoi(p + 7) : -1;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static bool is_float(hr_dtype t) {
    return t == HR_DTYPE_F32 || t == HR_DTYPE_F16 || t == HR_DTYPE_BF16;
}

/* What mlx-lm quantizes: Linear and Embedding weights (2-D ".weight")
 * whose rows split into whole groups. */
static bool quantizable(const hr_tensor *t, int group) {
    return ends_with(t->name, ".weight") && t->ndim == 2 && is_float(t->dtype) &&
           t->shape[1] % group == 0;
}

/* Sensitivity classes (llama.cpp's *_M recipes and mlx-lm's mixed_* keep
 * these higher): embeddings/lm_head, then v_proj and down_proj (outer
 * layers first), then the rest. */
static int priority(const char *name, int n_layers) {
    int l = layer_of(name), edge = l < 0 ? 0 : (l < n_layers - 1 - l ? l : n_layers - 1 - l);
    if (strstr(name, "embed_tokens") || strstr(name, "lm_head"))
        return 0;
    if (strstr(name, "v_proj") || strstr(name, "qkv_proj"))
        return 1000 + edge;
    if (strstr(name, "down_proj"))
        return 2000 + edge;
    if (strstr(name, "o_proj") || strstr(name, "q_proj") || strstr(name, "k_proj"))
        return 3000 + edge;
    return 4000 + edge;
}

static int cmp_prio(const void *a, const void *b) {
    const item *x = *(item *const *)a, *y = *(item *const *)b;
    return (x->prio > y->prio) - (x->prio < y->prio);
}

static const int LEVELS[] = {2, 3, 4, 5, 6, 8};
enum { N_LEVELS = 6 };

/* Pick per-tensor bits for a bits-per-weight budget: every quantized
 * tensor at the largest level that fits, then the most sensitive ones
 * raised two levels while the total stays within the budget. */
static int plan_bpw(item *it, size_t n, const hr_convert_opts *o, int sbytes, int n_layers,
                    int *base_bits, hr_error *err) {
    double total_w = 0;
    for (size_t i = 0; i < n; i++)
        if (it[i].bits)
            total_w += (double)hr_tensor_numel(it[i].t);
    int base = -1;
    for (int l = 0; l < N_LEVELS; l++)
        if (hr_affine_bpw(LEVELS[l], o->group, sbytes) <= o->target_bpw + 1e-9)
            base = l;
    if (base < 0)
        return hr_err(err, HR_EINVAL, "--target-bpw %.2f is below the smallest choice "
                      "(%.2f: 2-bit, group %d)", o->target_bpw,
                      hr_affine_bpw(2, o->group, sbytes), o->group);
    *base_bits = LEVELS[base];
    double bits_used = hr_affine_bpw(LEVELS[base], o->group, sbytes) * total_w;
    double budget = o->target_bpw * total_w;
    int hi = base + 2 < N_LEVELS ? base + 2 : N_LEVELS - 1;
    item **order = malloc(n * sizeof *order);
    if (!order)
        return hr_err(err, HR_ENOMEM, "out of memory");
    size_t nq = 0;
    for (size_t i = 0; i < n; i++)
        if (it[i].bits) {
            it[i].bits = LEVELS[base];
            it[i].prio = priority(it[i].t->name, n_layers);
            order[nq++] = &it[i];
        }
    qsort(order, nq, sizeof *order, cmp_prio);
    for (size_t i = 0; i < nq && hi > base; i++) {
        double w = (double)hr_tensor_numel(order[i]->t);
        double extra = (hr_affine_bpw(LEVELS[hi], o->group, sbytes) -
                        hr_affine_bpw(LEVELS[base], o->group, sbytes)) * w;
        if (bits_used + extra <= budget) {
            order[i]->bits = LEVELS[hi];
            bits_used += extra;
        }
    }
    free(order);
    if (o->report) {
        int count[9] = {0};
        for (size_t i = 0; i < n; i++)
            if (it[i].bits)
                count[it[i].bits]++;
        fprintf(o->report, "target %.2f bpw -> %.3f bpw over %zu quantized matrices (group %d):",
                o->target_bpw, bits_used / total_w, nq, o->group);
        for (int b = 2; b <= 8; b++)
            if (count[b])
                fprintf(o->report, " %d at %d-bit", count[b], b);
        fprintf(o->report, "\n");
        for (size_t i = 0; i < n; i++)
            if (it[i].bits && it[i].bits != LEVELS[base])
                fprintf(o->report, "  %d-bit %s\n", it[i].bits, it[i].t->name);
    }
    return 0;
}

/* ---- tensor conversion ---------------------------------------------------- */

static float round_to(float v, hr_dtype t) {
    if (t == HR_DTYPE_BF16)
        return hr_bf16_to_f32(hr_f32_to_bf16(v));
    if (t == HR_DTYPE_F16)
        return hr_f16_to_f32(hr_f32_to_f16(v));
    return v;
}

static void store(void *p, size_t i, float v, hr_dtype t) {
    if (t == HR_DTYPE_BF16)
        ((uint16_t *)p)[i] = hr_f32_to_bf16(v);
    else if (t == HR_DTYPE_F16)
        ((uint16_t *)p)[i] = hr_f32_to_f16(v);
    else
        memcpy((float *)p + i, &v, 4);
}

/* The output tensors, declared with their shapes and made while the file
 * is written (make_out), one at a time: a model larger than memory streams
 * through. A quantized weight is followed by its scales and biases, made
 * with it and kept until they are written. */
enum { OUT_COPY, OUT_QWEIGHT, OUT_SCALES, OUT_BIASES };

typedef struct outjob {
    const hr_tensor *src;
    int kind, bits, group;
    hr_dtype dt;  /* a copy's dtype; the scales' */
    void *side;   /* OUT_SCALES/BIASES: made with the weight, not yet written */
} outjob;

typedef struct outlist {
    hr_tensor *t;
    outjob *job;
    size_t n, cap;
    const hr_weights *w;
} outlist;

static int out_add(outlist *l, const char *name, hr_dtype dt, int ndim, int64_t d0,
                   int64_t d1, size_t nbytes, outjob job) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        hr_tensor *g = realloc(l->t, cap * sizeof *g);
        if (g)
            l->t = g;
        outjob *j = g ? realloc(l->job, cap * sizeof *j) : NULL;
        if (!j)
            return HR_ENOMEM;
        l->job = j;
        l->cap = cap;
    }
    char *nm = strdup(name);
    if (!nm)
        return HR_ENOMEM;
    l->t[l->n] = (hr_tensor){.name = nm, .dtype = dt, .ndim = ndim, .shape = {d0, d1},
                             .nbytes = nbytes};
    l->job[l->n++] = job;
    return 0;
}

static void out_free(outlist *l) {
    for (size_t i = 0; i < l->n; i++) {
        free((void *)l->t[i].name);
        free(l->job[i].side);
    }
    free(l->t);
    free(l->job);
}

/* weight -> name.weight (U32), name.scales, name.biases */
static int quantize_one(outlist *l, const hr_tensor *t, int bits, int group, hr_dtype dt) {
    int64_t rows = t->shape[0], cols = t->shape[1], ng = cols / group;
    char base[512], nm[600];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(t->name) - 7), t->name);
    outjob j = {.src = t, .kind = OUT_QWEIGHT, .bits = bits, .group = group, .dt = dt};
    snprintf(nm, sizeof nm, "%s.weight", base);
    int rc = out_add(l, nm, HR_DTYPE_U32, 2, rows, cols * bits / 32,
                     (size_t)rows * (size_t)cols * bits / 8, j);
    snprintf(nm, sizeof nm, "%s.scales", base);
    j.kind = OUT_SCALES;
    rc = rc ? rc : out_add(l, nm, dt, 2, rows, ng, (size_t)(rows * ng) * hr_dtype_size(dt), j);
    snprintf(nm, sizeof nm, "%s.biases", base);
    j.kind = OUT_BIASES;
    return rc ? rc : out_add(l, nm, dt, 2, rows, ng, (size_t)(rows * ng) * hr_dtype_size(dt), j);
}

static int copy_one(outlist *l, const hr_tensor *t, hr_dtype dt) {
    if (!is_float(t->dtype))
        dt = t->dtype;
    size_t nbytes = dt == t->dtype ? t->nbytes : (size_t)hr_tensor_numel(t) * hr_dtype_size(dt);
    int rc = out_add(l, t->name, dt, t->ndim, t->shape[0], t->shape[1], nbytes,
                     (outjob){.src = t, .kind = OUT_COPY, .dt = dt});
    if (!rc)
        for (int d = 0; d < t->ndim; d++)
            l->t[l->n - 1].shape[d] = t->shape[d];
    return rc;
}

/* out tensor i's bytes into dst (hr_st_fill_fn) */
static int make_out(void *ctx, size_t i, void *dst, hr_error *err) {
    outlist *l = ctx;
    outjob *j = &l->job[i];
    if (j->kind == OUT_SCALES || j->kind == OUT_BIASES) {
        if (!j->side)
            return hr_err(err, HR_EINVAL, "'%s' made out of order", l->t[i].name);
        memcpy(dst, j->side, l->t[i].nbytes);
        free(j->side);
        j->side = NULL;
        return 0;
    }
    const hr_tensor *t = j->src;
    const void *data;
    void *owned;
    int rc = hr_weights_load(l->w, t, &data, &owned, err);
    if (rc)
        return rc;
    hr_tensor src = *t;
    src.data = data;
    if (j->kind == OUT_COPY && (!is_float(t->dtype) || j->dt == t->dtype)) {
        memcpy(dst, data, t->nbytes);
    } else if (j->kind == OUT_COPY) {
        int64_t n = hr_tensor_numel(t);
        hr_tensor flat = src;
        flat.ndim = 2;
        flat.shape[0] = 1;
        flat.shape[1] = n;
        float buf[1024];
        for (int64_t k = 0; k < n; k += 1024) {
            int64_t len = n - k < 1024 ? n - k : 1024;
            hr_dequant_range(&flat, 0, k, len, buf);
            for (int64_t m = 0; m < len; m++)
                store(dst, (size_t)(k + m), buf[m], j->dt);
        }
    } else { /* OUT_QWEIGHT, then its scales and biases */
        int64_t rows = t->shape[0], cols = t->shape[1], ng = cols / j->group;
        outjob *sj = &l->job[i + 1], *bj = &l->job[i + 2];
        float *x = malloc((size_t)cols * sizeof *x), *sc = malloc((size_t)ng * sizeof *sc),
              *bi = malloc((size_t)ng * sizeof *bi);
        sj->side = malloc(l->t[i + 1].nbytes);
        bj->side = malloc(l->t[i + 2].nbytes);
        if (!x || !sc || !bi || !sj->side || !bj->side)
            rc = hr_err(err, HR_ENOMEM, "out of memory converting '%s'", t->name);
        for (int64_t r = 0; !rc && r < rows; r++) {
            hr_dequant_range(&src, r, 0, cols, x);
            for (int64_t c = 0; c < cols; c++)
                x[c] = round_to(x[c], j->dt); /* mlx-lm casts to the dtype, then quantizes */
            hr_quant_affine_row(x, cols, j->bits, j->group,
                                (uint8_t *)dst + (size_t)r * (size_t)cols * j->bits / 8, sc, bi);
            for (int64_t g = 0; g < ng; g++) {
                store(sj->side, (size_t)(r * ng + g), sc[g], j->dt);
                store(bj->side, (size_t)(r * ng + g), bi[g], j->dt);
            }
        }
        free(x);
        free(sc);
        free(bi);
    }
    if (owned)
        free(owned);
    else /* read once: its pages may leave memory */
        hr_weights_drop(l->w, data, t->nbytes);
    return rc;
}

/* ---- a fused quantized base ------------------------------------------------- */

/* The bits and group of quantized weight `name` (".weight") from config.json's
 * "quantization" block (a per-module entry first); false when it has none. */
static bool quant_of(const json_t *cfg, const char *name, int *bits, int *group) {
    const json_t *q = json_object_get(cfg, "quantization");
    if (!json_is_object(q))
        return false;
    char mod[512];
    snprintf(mod, sizeof mod, "%.*s", (int)(strlen(name) - 7), name);
    const json_t *m = json_object_get(q, mod);
    const json_t *src = json_is_object(m) ? m : q;
    const json_t *b = json_object_get(src, "bits"), *g = json_object_get(src, "group_size");
    if (!json_is_integer(b) || !json_is_integer(g))
        return false;
    *bits = (int)json_integer_value(b);
    *group = (int)json_integer_value(g);
    return true;
}

/* hearth fuse on an MLX-quantized base: every tensor as it is, except the
 * fused weights (w's overrides, f32), quantized again with their
 * module's bits and group and the scales' dtype (mlx_lm.fuse without
 * --dequantize); the config (its quantization block) is kept. */
static int requant_copy(hr_weights *w, const json_t *cfg, outlist *out, hr_error *err) {
    size_t n = hr_weights_count(w);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const hr_tensor *t = hr_weights_at(w, i);
        char base[512], nm[600];
        bool fused = t->dtype == HR_DTYPE_F32 && ends_with(t->name, ".weight");
        snprintf(base, sizeof base, "%.*s", (int)(strlen(t->name) - 7), t->name);
        if (fused) {
            snprintf(nm, sizeof nm, "%s.scales", base);
            const hr_tensor *sc = hr_weights_find(w, nm);
            int bits, group;
            if (!sc) { /* a float weight of the quantized model: f32, as fused */
                rc = copy_one(out, t, t->dtype);
                continue;
            }
            if (!quant_of(cfg, t->name, &bits, &group))
                return hr_err(err, HR_EFORMAT, "config.json: no quantization for '%s'", t->name);
            rc = quantize_one(out, t, bits, group, sc->dtype);
            continue;
        }
        /* a fused weight's old scales and biases are replaced */
        bool old = false;
        if (ends_with(t->name, ".scales") || ends_with(t->name, ".biases")) {
            snprintf(nm, sizeof nm, "%.*s.weight", (int)(strlen(t->name) - 7), t->name);
            const hr_tensor *wt = hr_weights_find(w, nm);
            old = wt && wt->dtype == HR_DTYPE_F32;
        }
        if (!old)
            rc = copy_one(out, t, t->dtype);
    }
    return rc == HR_ENOMEM ? hr_err(err, HR_ENOMEM, "out of memory") : rc;
}

/* ---- MLX directory ---------------------------------------------------------- */

static const char *dtype_torch(hr_dtype t) {
    return t == HR_DTYPE_BF16 ? "bfloat16" : t == HR_DTYPE_F16 ? "float16" : "float32";
}

static int convert_mlx(const hr_convert_opts *o, hr_weights *w, json_t *cfg, hr_dtype dt,
                       const char *tmp, hr_error *err) {
    size_t n = hr_weights_count(w);
    item *it = calloc(n ? n : 1, sizeof *it);
    outlist out = {.w = w};
    int rc = 0, base_bits = o->bits;
    if (!it)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int sbytes = (int)hr_dtype_size(dt);
    json_t *nl = json_object_get(cfg, "num_hidden_layers");
    int n_layers = json_is_integer(nl) ? (int)json_integer_value(nl) : 0;
    if (o->adapter && json_is_object(json_object_get(cfg, "quantization"))) {
        rc = requant_copy(w, cfg, &out, err); /* hearth fuse on a quantized base */
        goto write;
    }
    for (size_t i = 0; i < n; i++) {
        it[i].t = hr_weights_at(w, i);
        if (it[i].t->dtype == HR_DTYPE_U32 && ends_with(it[i].t->name, ".weight")) {
            rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s is already quantized "
                        "('%s'); convert from a float model", o->src, it[i].t->name);
            goto done;
        }
        if (o->quantize && quantizable(it[i].t, o->group))
            it[i].bits = o->bits;
    }
    if (o->quantize && o->target_bpw > 0 &&
        (rc = plan_bpw(it, n, o, sbytes, n_layers, &base_bits, err)))
        goto done;
    json_t *q = json_object();
    json_object_set_new(q, "group_size", json_integer(o->group));
    json_object_set_new(q, "bits", json_integer(base_bits));
    json_object_set_new(q, "mode", json_string("affine"));
    for (size_t i = 0; i < n && !rc; i++) {
        const hr_tensor *t = it[i].t;
        if (it[i].bits) {
            rc = quantize_one(&out, t, it[i].bits, o->group, dt);
            if (it[i].bits != base_bits) {
                char path[512];
                snprintf(path, sizeof path, "%.*s", (int)(strlen(t->name) - 7), t->name);
                json_object_set_new(q, path, json_pack("{s:i,s:i}", "group_size", o->group,
                                                       "bits", it[i].bits));
            }
        } else {
            rc = copy_one(&out, t, dt);
        }
        if (rc == HR_ENOMEM)
            rc = hr_err(err, HR_ENOMEM, "out of memory converting '%s'", t->name);
    }
    if (o->quantize) {
        json_object_set(cfg, "quantization", q);
        json_object_set(cfg, "quantization_config", q);
    }
    json_decref(q);
    if (dt != HR_DTYPE_COUNT) {
        json_object_set_new(cfg, "torch_dtype", json_string(dtype_torch(dt)));
        if (json_object_get(cfg, "dtype"))
            json_object_set_new(cfg, "dtype", json_string(dtype_torch(dt)));
    }
write:;
    char path[4096];
    const char *meta[] = {"format", "mlx"};
    if (!rc && hr_path_join(path, sizeof path, tmp, "model.safetensors"))
        rc = hr_err(err, HR_ERANGE, "%s: path too long", tmp);
    if (!rc)
        rc = hr_st_write_fill(path, out.t, out.n, meta, 1, make_out, &out, err);
    if (!rc) {
        char *text = json_dumps(cfg, JSON_INDENT(4) | JSON_SORT_KEYS);
        if (hr_path_join(path, sizeof path, tmp, "config.json") || !text)
            rc = hr_err(err, HR_ENOMEM, "cannot write config.json");
        else
            rc = hr_file_write_atomic(path, text, strlen(text), err);
        free(text);
    }
    if (!rc && o->src) /* hearth synth's weights: none */
        rc = copy_side_files(o->src, tmp, err);
done:
    out_free(&out);
    free(it);
    return rc;
}

/* ---- fuse ------------------------------------------------------------------- */

/* The adapter's fused matrices in place of the base's in w (the model and
 * adapter stay open while w is read). */
static int fuse_into(const hr_convert_opts *o, hr_weights *w, hr_model **m, hr_adapter **a,
                     hr_fused *fused, hr_error *err) {
    for (size_t i = 0; i < hr_weights_count(w); i++)
        if (hr_weights_at(w, i)->dtype == HR_DTYPE_U32 && (o->dequantize || o->gguf != HR_DTYPE_COUNT || o->quantize))
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet: fusing into a quantized "
                          "base (%s) with --de-quantize, --gguf or -q (a quantized base is "
                          "fused and quantized again as it was)", o->src);
    int rc;
    if ((rc = hr_model_open(m, o->src, err)) ||
        (rc = hr_adapter_open(a, *m, o->adapter, o->adapter, err)) ||
        (rc = hr_fuse(fused, *m, *a, err)))
        return rc;
    for (size_t i = 0; i < fused->n && !rc; i++)
        rc = hr_weights_override(w, &fused->t[i], err);
    if (!rc && o->report)
        fprintf(o->report, "fused %zu projections of %s (%s, rank %d%s)\n", fused->n,
                o->adapter, (*a)->format, (*a)->max_rank, (*a)->dora ? ", DoRA" : "");
    return rc;
}

/* ---- entry ------------------------------------------------------------------ */

static int check_opts(const hr_convert_opts *o, hr_error *err) {
    if (o->quantize && o->bits != 2 && o->bits != 3 && o->bits != 4 && o->bits != 5 &&
        o->bits != 6 && o->bits != 8)
        return hr_err(err, HR_EINVAL, "--q-bits must be 2, 3, 4, 5, 6 or 8 (got %d)", o->bits);
    if (o->quantize && o->group != 32 && o->group != 64 && o->group != 128)
        return hr_err(err, HR_EINVAL, "--q-group-size must be 32, 64 or 128 (got %d)", o->group);
    if (o->target_bpw > 0 && !o->quantize)
        return hr_err(err, HR_EINVAL, "--target-bpw needs -q");
    if (o->quantize && o->gguf != HR_DTYPE_COUNT)
        return hr_err(err, HR_EINVAL, "-q writes MLX affine weights; --gguf takes its own type");
    struct stat st;
    if (!stat(o->out, &st))
        return hr_err(err, HR_EINVAL, "%s already exists", o->out);
    return 0;
}

int hr_convert_weights(const hr_convert_opts *o, json_t *cfg, hr_weights *w, hr_error *err) {
    int rc = check_opts(o, err);
    if (rc)
        return rc;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", o->out) >= (int)sizeof tmp)
        return hr_err(err, HR_ERANGE, "%s: path too long", o->out);
    hr_dtype dt = o->dtype;
    if (dt == HR_DTYPE_COUNT) { /* keep: the dtype of the first float matrix */
        for (size_t i = 0; i < hr_weights_count(w) && dt == HR_DTYPE_COUNT; i++)
            if (is_float(hr_weights_at(w, i)->dtype) && hr_weights_at(w, i)->ndim == 2)
                dt = hr_weights_at(w, i)->dtype;
        if (dt == HR_DTYPE_COUNT)
            dt = HR_DTYPE_F32;
    }
    if (o->gguf != HR_DTYPE_COUNT) /* one file: temp beside it, renamed by the writer */
        return hr_gguf_export(o->src, cfg, w, o->gguf, o->gguf_km, o->out, o->report, err);
    if (!mkdtemp(tmp))
        return hr_err(err, HR_EIO, "%s: cannot create a temporary directory: %s", tmp,
                      strerror(errno));
    chmod(tmp, 0755); /* mkdtemp makes 0700 */
    rc = convert_mlx(o, w, cfg, dt, tmp, err);
    if (!rc && rename(tmp, o->out))
        rc = hr_err(err, HR_EIO, "rename %s -> %s: %s", tmp, o->out, strerror(errno));
    if (rc)
        rm_tree(tmp);
    return rc;
}

int hr_convert(const hr_convert_opts *o, hr_error *err) {
    int rc = check_opts(o, err);
    if (rc)
        return rc;
    char cfg_path[4096];
    if (hr_path_join(cfg_path, sizeof cfg_path, o->src, "config.json"))
        return hr_err(err, HR_ERANGE, "%s: path too long", o->src);
    if (!hr_dir_exists(o->src) || !hr_file_exists(cfg_path))
        return hr_err(err, HR_ENOTFOUND, "%s: not a model directory (no config.json)", o->src);
    json_error_t je;
    json_t *cfg = json_load_file(cfg_path, 0, &je);
    if (!cfg)
        return hr_err(err, HR_EFORMAT, "%s: %s (line %d)", cfg_path, je.text, je.line);
    hr_weights *w = NULL;
    hr_model *fm = NULL;
    hr_adapter *fa = NULL;
    hr_fused fused = {0};
    if (!(rc = hr_weights_open(&w, o->src, err)) &&
        !(o->adapter && (rc = fuse_into(o, w, &fm, &fa, &fused, err))))
        rc = hr_convert_weights(o, cfg, w, err);
    hr_weights_close(w);
    hr_fused_free(&fused);
    hr_adapter_unref(fa);
    hr_model_free(fm);
    json_decref(cfg);
    return rc;
}
