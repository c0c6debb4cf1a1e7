#include "model/weights.h"
#include "core/error.h"
#include "core/file.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/gguf_model.h"

#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHARDS 4096

struct hr_weights {
    hr_st_file **files;
    size_t n_files;
    hr_gguf *gguf;   /* or one GGUF file: */
    hr_tensor *gt;   /* its tensors, HF names */
    size_t n_gt;
    hr_tensor *ov;   /* hr_weights_override's replacements */
    size_t n_ov;
    hr_weights_gen_fn gen; /* lazy: gt's bytes made on demand */
    void *gen_ctx;
};

/* the replacement of a tensor named name, or NULL */
static const hr_tensor *override_of(const hr_weights *w, const char *name) {
    for (size_t i = 0; i < w->n_ov; i++)
        if (!strcmp(w->ov[i].name, name))
            return &w->ov[i];
    return NULL;
}

int hr_weights_override(hr_weights *w, const hr_tensor *t, hr_error *err) {
    if (!hr_weights_find(w, t->name))
        return hr_err(err, HR_ENOTFOUND, "no tensor '%s' to replace", t->name);
    hr_tensor *n = realloc(w->ov, (w->n_ov + 1) * sizeof *n);
    if (!n)
        return hr_err(err, HR_ENOMEM, "out of memory");
    w->ov = n;
    w->ov[w->n_ov++] = *t;
    return 0;
}

static int add_file(hr_weights *w, const char *dir, const char *name, hr_error *err) {
    for (size_t i = 0; i < w->n_files; i++) {
        const char *p = hr_st_path(w->files[i]), *base = strrchr(p, '/');
        if (!strcmp(base ? base + 1 : p, name))
            return 0; /* already open */
    }
    if (w->n_files >= MAX_SHARDS)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: more than %d shards",
                      MAX_SHARDS);
    if (strchr(name, '/') || !strcmp(name, "..") || !name[0])
        return hr_err(err, HR_EFORMAT, "%s: bad shard name '%s'", dir, name);
    char path[4096];
    if (hr_path_join(path, sizeof path, dir, name))
        return hr_err(err, HR_ERANGE, "%s: path too long", dir);
    hr_st_file **nf = realloc(w->files, (w->n_files + 1) * sizeof *nf);
    if (!nf)
        return hr_err(err, HR_ENOMEM, "out of memory");
    w->files = nf;
    int rc = hr_st_open(&w->files[w->n_files], path, err);
    if (rc)
        return rc;
    w->n_files++;
    return 0;
}

static int open_index(hr_weights *w, const char *dir, const char *index, hr_error *err) {
    json_error_t je;
    json_t *root = json_load_file(index, 0, &je);
    if (!root)
        return hr_err(err, HR_EFORMAT, "%s: %s (line %d)", index, je.text, je.line);
    int rc = 0;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        rc = hr_err(err, HR_EFORMAT, "%s: missing 'weight_map' object", index);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        if (!json_is_string(v)) {
            rc = hr_err(err, HR_EFORMAT, "%s: weight_map['%s'] is not a file name",
                        index, key);
            goto done;
        }
        if ((rc = add_file(w, dir, json_string_value(v), err)))
            goto done;
    }
    /* every tensor the index names must be in its shard */
    json_object_foreach(map, key, v) {
        if (!hr_weights_find(w, key)) {
            rc = hr_err(err, HR_EFORMAT, "%s: tensor '%s' is listed but missing "
                        "from %s", index, key, json_string_value(v));
            goto done;
        }
    }
done:
    json_decref(root);
    return rc;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int open_glob(hr_weights *w, const char *dir, hr_error *err) {
    DIR *d = opendir(dir);
    if (!d)
        return hr_err(err, HR_EIO, "%s: cannot open directory", dir);
    char **names = NULL;
    size_t n = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 12 && !strcmp(e->d_name + len - 12, ".safetensors")) {
            char **nn = realloc(names, (n + 1) * sizeof *nn);
            if (!nn || !(nn[n] = strdup(e->d_name))) {
                names = nn ? nn : names;
                rc = hr_err(err, HR_ENOMEM, "out of memory");
                break;
            }
            names = nn;
            n++;
        }
    }
    closedir(d);
    if (!rc && n == 0)
        rc = hr_err(err, HR_ENOTFOUND, "%s: no *.safetensors weights found", dir);
    if (!rc)
        qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; !rc && i < n; i++)
        rc = add_file(w, dir, names[i], err);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int hr_weights_open(hr_weights **out, const char *dir, hr_error *err) {
    *out = NULL;
    hr_weights *w = calloc(1, sizeof *w);
    if (!w)
        return hr_err(err, HR_ENOMEM, "out of memory");
    char index[4096];
    int rc;
    if (hr_path_join(index, sizeof index, dir, "model.safetensors.index.json")) {
        rc = hr_err(err, HR_ERANGE, "%s: path too long", dir);
    } else if (hr_file_exists(index)) {
        rc = open_index(w, dir, index, err);
    } else {
        rc = open_glob(w, dir, err);
    }
    if (rc) {
        hr_weights_close(w);
        return rc;
    }
    *out = w;
    return 0;
}

int hr_weights_open_gguf(hr_weights **out, hr_gguf *g, hr_error *err) {
    *out = NULL;
    hr_weights *w = calloc(1, sizeof *w);
    int64_t n = hr_gguf_n_tensors(g);
    if (!w || !(w->gt = calloc((size_t)(n ? n : 1), sizeof *w->gt))) {
        free(w);
        hr_gguf_close(g);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    w->gguf = g;
    for (int64_t i = 0; i < n; i++) {
        const hr_gguf_tensor *gt = hr_gguf_tensor_at(g, i);
        char hf[256];
        const char *name = hr_gguf_hf_name(g, gt->name, hf, sizeof hf);
        int dt = hr_gguf_dtype(gt->type);
        if (dt < 0) {
            const char *tn = hr_gguf_type_name(gt->type);
            int rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: tensor '%s' has "
                            "type %s", hr_gguf_path(g), gt->name, tn ? tn : "unknown");
            hr_weights_close(w);
            return rc;
        }
        if (gt->n_dims > 3) { /* 3-D: stacked experts */
            int rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: %u-D tensor '%s'",
                            hr_gguf_path(g), gt->n_dims, gt->name);
            hr_weights_close(w);
            return rc;
        }
        hr_tensor *t = &w->gt[w->n_gt++];
        t->name = strdup(name ? name : gt->name);
        if (!t->name) {
            hr_weights_close(w);
            return hr_err(err, HR_ENOMEM, "out of memory");
        }
        t->dtype = (hr_dtype)dt;
        t->ndim = (int)gt->n_dims;
        for (uint32_t d = 0; d < gt->n_dims; d++) /* GGUF lists the fastest dim first */
            t->shape[d] = (int64_t)gt->ne[gt->n_dims - 1 - d];
        t->data = gt->data;
        t->nbytes = (size_t)gt->size;
    }
    *out = w;
    return 0;
}

int hr_weights_new_lazy(hr_weights **out, const hr_tensor *t, size_t n, hr_weights_gen_fn gen,
                        void *ctx, hr_error *err) {
    *out = NULL;
    hr_weights *w = calloc(1, sizeof *w);
    if (!w || !(w->gt = calloc(n ? n : 1, sizeof *w->gt))) {
        free(w);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    w->gen = gen;
    w->gen_ctx = ctx;
    for (size_t i = 0; i < n; i++) {
        w->gt[i] = t[i];
        w->gt[i].data = NULL;
        w->gt[i].name = strdup(t[i].name);
        if (!w->gt[i].name) {
            hr_weights_close(w);
            return hr_err(err, HR_ENOMEM, "out of memory");
        }
        w->n_gt++;
    }
    *out = w;
    return 0;
}

int hr_weights_is_lazy(const hr_weights *w) { return w->gen != NULL; }

int hr_weights_load(const hr_weights *w, const hr_tensor *t, const void **data, void **owned,
                    hr_error *err) {
    *owned = NULL;
    *data = t->data;
    if (t->data || !t->nbytes)
        return 0;
    if (!w->gen || t < w->gt || t >= w->gt + w->n_gt)
        return hr_err(err, HR_EINVAL, "tensor '%s' has no data", t->name);
    void *p = malloc(t->nbytes);
    if (!p)
        return hr_err(err, HR_ENOMEM, "out of memory making tensor '%s'", t->name);
    int rc = w->gen(w->gen_ctx, (size_t)(t - w->gt), p, err);
    if (rc) {
        free(p);
        return rc;
    }
    *data = *owned = p;
    return 0;
}

void hr_weights_close(hr_weights *w) {
    if (!w)
        return;
    for (size_t i = 0; i < w->n_gt; i++)
        free((void *)w->gt[i].name);
    free(w->gt);
    free(w->ov);
    hr_gguf_close(w->gguf);
    for (size_t i = 0; i < w->n_files; i++)
        hr_st_close(w->files[i]);
    free(w->files);
    free(w);
}

const hr_tensor *hr_weights_find(const hr_weights *w, const char *name) {
    const hr_tensor *o = override_of(w, name);
    if (o)
        return o;
    for (size_t i = 0; i < w->n_gt; i++)
        if (!strcmp(w->gt[i].name, name))
            return &w->gt[i];
    for (size_t i = 0; i < w->n_files; i++) {
        const hr_tensor *t = hr_st_find(w->files[i], name);
        if (t)
            return t;
    }
    return NULL;
}

const char *hr_weights_file_of(const hr_weights *w, const hr_tensor *t) {
    if (w->gguf)
        return hr_gguf_path(w->gguf);
    for (size_t i = 0; i < w->n_files; i++)
        for (size_t j = 0; j < hr_st_count(w->files[i]); j++)
            if (hr_st_tensor(w->files[i], j) == t)
                return hr_st_path(w->files[i]);
    return "?";
}

size_t hr_weights_bytes(const hr_weights *w) {
    size_t total = 0;
    for (size_t i = 0; i < w->n_gt; i++)
        total += w->gt[i].nbytes;
    for (size_t i = 0; i < w->n_files; i++)
        for (size_t j = 0; j < hr_st_count(w->files[i]); j++)
            total += hr_st_tensor(w->files[i], j)->nbytes;
    return total;
}

void hr_weights_drop(const hr_weights *w, const void *p, size_t n) {
    bool mapped = w->gguf && hr_gguf_maps(w->gguf, p, n);
    for (size_t i = 0; i < w->n_files && !mapped; i++)
        mapped = hr_st_maps(w->files[i], p, n);
    if (mapped)
        hr_mmap_drop(p, n);
}

size_t hr_weights_count(const hr_weights *w) {
    size_t n = w->n_gt;
    for (size_t i = 0; i < w->n_files; i++)
        n += hr_st_count(w->files[i]);
    return n;
}

static const hr_tensor *at(const hr_weights *w, size_t i) {
    if (i < w->n_gt)
        return &w->gt[i];
    i -= w->n_gt;
    for (size_t f = 0; f < w->n_files; f++) {
        size_t c = hr_st_count(w->files[f]);
        if (i < c)
            return hr_st_tensor(w->files[f], i);
        i -= c;
    }
    return NULL;
}

const hr_tensor *hr_weights_at(const hr_weights *w, size_t i) {
    const hr_tensor *t = at(w, i), *o = t && w->n_ov ? override_of(w, t->name) : NULL;
    return o ? o : t;
}
