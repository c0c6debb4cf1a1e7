#include "io/safetensors.h"
#include "core/error.h"
#include "core/file.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_HEADER (100u << 20) /* as the reference implementation */

struct hr_st_file {
    hr_mmap map;       /* zeroed when parsed from memory */
    char *path;
    hr_tensor *tensors;
    char **names;
    size_t n;
};

/* ---- reading ----------------------------------------------------------- */

static int parse_shape(json_t *js, hr_tensor *t, const char *file,
                       const char *name, hr_error *err) {
    if (!json_is_array(js))
        return hr_err(err, HR_EFORMAT, "%s: tensor '%s': shape is not an array",
                      file, name);
    size_t nd = json_array_size(js);
    if (nd > HR_MAX_DIMS)
        return hr_err(err, HR_EUNSUPPORTED,
                      "not supported yet: %s: tensor '%s' has %zu dimensions",
                      file, name, nd);
    t->ndim = (int)nd;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return hr_err(err, HR_EFORMAT, "%s: tensor '%s': bad dimension %zu",
                          file, name, i);
        t->shape[i] = json_integer_value(d);
    }
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const hr_tensor *x = *(const hr_tensor *const *)a, *y = *(const hr_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

static int parse_entry(hr_st_file *f, const char *name, json_t *v,
                       const unsigned char *data, uint64_t data_size,
                       hr_error *err) {
    const char *file = f->path;
    if (!json_is_object(v))
        return hr_err(err, HR_EFORMAT, "%s: tensor '%s': entry is not an object",
                      file, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return hr_err(err, HR_EFORMAT, "%s: tensor '%s': missing dtype", file, name);
    int dt = hr_dtype_from_name(json_string_value(jd));
    if (dt < 0)
        return hr_err(err, HR_EUNSUPPORTED,
                      "not supported yet: %s: tensor '%s' has dtype %s", file,
                      name, json_string_value(jd));
    hr_tensor *t = &f->tensors[f->n];
    memset(t, 0, sizeof *t);
    t->dtype = (hr_dtype)dt;
    int rc = parse_shape(js, t, file, name, err);
    if (rc)
        return rc;
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return hr_err(err, HR_EFORMAT, "%s: tensor '%s': bad data_offsets", file,
                      name);
    json_int_t b = json_integer_value(json_array_get(jo, 0));
    json_int_t e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < b || (uint64_t)e > data_size)
        return hr_err(err, HR_EFORMAT,
                      "%s: tensor '%s': data_offsets [%lld, %lld] outside the "
                      "%llu-byte data section (truncated file?)",
                      file, name, (long long)b, (long long)e,
                      (unsigned long long)data_size);
    /* dtype x shape must equal the byte size, without overflow */
    unsigned __int128 bytes = hr_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++) {
        bytes *= (uint64_t)t->shape[i];
        if (bytes > (unsigned __int128)data_size)
            break;
    }
    if (bytes != (unsigned __int128)(e - b))
        return hr_err(err, HR_EFORMAT,
                      "%s: tensor '%s': %s shape needs a different byte size "
                      "than data_offsets give (%lld)",
                      file, name, hr_dtype_name(t->dtype), (long long)(e - b));
    char *nm = strdup(name);
    if (!nm)
        return hr_err(err, HR_ENOMEM, "out of memory");
    f->names[f->n] = nm;
    t->name = nm;
    t->data = data + b;
    t->nbytes = (size_t)(e - b);
    f->n++;
    return 0;
}

int hr_st_parse(hr_st_file **out, const void *data, size_t size,
                const char *name, hr_error *err) {
    *out = NULL;
    int rc = HR_ENOMEM;
    json_t *root = NULL;
    hr_tensor **order = NULL;
    hr_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name ? name : "<memory>")))
        goto fail_oom;
    if (size < 8) {
        rc = hr_err(err, HR_EFORMAT, "%s: file too short for a safetensors "
                    "header (%zu bytes)", f->path, size);
        goto fail;
    }
    const unsigned char *p = data;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    if (hlen > MAX_HEADER || hlen > size - 8) {
        rc = hr_err(err, HR_EFORMAT, "%s: header length %llu exceeds the file "
                    "(%zu bytes; truncated or not safetensors)", f->path,
                    (unsigned long long)hlen, size);
        goto fail;
    }
    json_error_t je;
    root = json_loadb((const char *)p + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        rc = hr_err(err, HR_EFORMAT, "%s: header is not a JSON object: %s",
                    f->path, root ? "wrong type" : je.text);
        if (err && !root)
            err->pos = 8 + je.position;
        goto fail;
    }
    size_t cap = json_object_size(root);
    f->tensors = calloc(cap ? cap : 1, sizeof *f->tensors);
    f->names = calloc(cap ? cap : 1, sizeof *f->names);
    if (!f->tensors || !f->names)
        goto fail_oom;
    const unsigned char *body = p + 8 + hlen;
    uint64_t body_size = size - 8 - hlen;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v)) {
                rc = hr_err(err, HR_EFORMAT, "%s: __metadata__ is not an object",
                            f->path);
                goto fail;
            }
            continue;
        }
        if ((rc = parse_entry(f, key, v, body, body_size, err)))
            goto fail;
    }
    /* no two tensors may share bytes */
    order = malloc((f->n ? f->n : 1) * sizeof *order);
    if (!order)
        goto fail_oom;
    for (size_t i = 0; i < f->n; i++)
        order[i] = &f->tensors[i];
    qsort(order, f->n, sizeof *order, cmp_by_offset);
    for (size_t i = 1; i < f->n; i++) {
        const unsigned char *prev_end =
            (const unsigned char *)order[i - 1]->data + order[i - 1]->nbytes;
        if ((const unsigned char *)order[i]->data < prev_end) {
            rc = hr_err(err, HR_EFORMAT, "%s: tensors '%s' and '%s' overlap",
                        f->path, order[i - 1]->name, order[i]->name);
            goto fail;
        }
    }
    free(order);
    json_decref(root);
    *out = f;
    return 0;
fail_oom:
    rc = hr_err(err, HR_ENOMEM, "%s: out of memory", name ? name : "safetensors");
fail:
    free(order);
    json_decref(root);
    hr_st_close(f);
    return rc;
}

int hr_st_open(hr_st_file **out, const char *path, hr_error *err) {
    *out = NULL;
    hr_mmap m;
    int rc = hr_mmap_open(&m, path, err);
    if (rc)
        return rc;
    hr_st_file *f;
    rc = hr_st_parse(&f, m.data, m.size, path, err);
    if (rc) {
        hr_mmap_close(&m);
        return rc;
    }
    f->map = m;
    *out = f;
    return 0;
}

void hr_st_close(hr_st_file *f) {
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++)
        free(f->names[i]);
    free(f->names);
    free(f->tensors);
    free(f->path);
    hr_mmap_close(&f->map);
    free(f);
}

size_t hr_st_count(const hr_st_file *f) { return f->n; }
const hr_tensor *hr_st_tensor(const hr_st_file *f, size_t i) {
    return i < f->n ? &f->tensors[i] : NULL;
}
int hr_st_maps(const hr_st_file *f, const void *p, size_t n) {
    const unsigned char *b = f->map.data, *q = p;
    return b && q >= b && n <= f->map.size && (size_t)(q - b) <= f->map.size - n;
}

const char *hr_st_path(const hr_st_file *f) { return f->path; }

const hr_tensor *hr_st_find(const hr_st_file *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

/* ---- writing ----------------------------------------------------------- */

static int write_all(FILE *fp, const void *p, size_t n) {
    return fwrite(p, 1, n, fp) == n ? 0 : -1;
}

int hr_st_write(const char *path, const hr_tensor *tensors, size_t n,
                const char *const *metadata, size_t n_meta, hr_error *err) {
    return hr_st_write_fill(path, tensors, n, metadata, n_meta, NULL, NULL, err);
}

int hr_st_write_fill(const char *path, const hr_tensor *tensors, size_t n,
                     const char *const *metadata, size_t n_meta, hr_st_fill_fn fill, void *ctx,
                     hr_error *err) {
    int rc = HR_ENOMEM;
    char *hdr = NULL, tmp[4096];
    FILE *fp = NULL;
    json_t *root = json_object();
    if (!root)
        goto fail_oom;
    if (n_meta) {
        json_t *meta = json_object();
        for (size_t i = 0; meta && i < n_meta; i++)
            json_object_set_new(meta, metadata[2 * i], json_string(metadata[2 * i + 1]));
        json_object_set_new(root, "__metadata__", meta);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const hr_tensor *t = &tensors[i];
        json_t *e = json_object(), *shape = json_array();
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(e, "dtype", json_string(hr_dtype_name(t->dtype)));
        json_object_set_new(e, "shape", shape);
        json_t *offs = json_array();
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes)));
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, t->name, e))
            goto fail_oom;
        off += t->nbytes;
    }
    hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!hdr)
        goto fail_oom;
    size_t hlen = strlen(hdr), padded = (hlen + 7) & ~(size_t)7;
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    fp = fopen(tmp, "wb");
    if (!fp) {
        rc = hr_err(err, HR_EIO, "%s: %s", tmp, strerror(errno));
        goto fail;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int bad = write_all(fp, len8, 8) || write_all(fp, hdr, hlen) ||
              write_all(fp, "        ", padded - hlen);
    for (size_t i = 0; !bad && i < n; i++) {
        const hr_tensor *t = &tensors[i];
        void *made = NULL;
        if (!t->data && t->nbytes) {
            if (!fill) {
                rc = hr_err(err, HR_EINVAL, "%s: tensor '%s' has no data", path, t->name);
                goto fail_unlink;
            }
            if (!(made = malloc(t->nbytes))) {
                rc = hr_err(err, HR_ENOMEM, "out of memory making tensor '%s'", t->name);
                goto fail_unlink;
            }
            if ((rc = fill(ctx, i, made, err))) {
                free(made);
                goto fail_unlink;
            }
        }
        bad = write_all(fp, made ? made : t->data, t->nbytes);
        free(made);
    }
    if (bad || fflush(fp) || fsync(fileno(fp))) {
        rc = hr_err(err, HR_EIO, "%s: write failed: %s", tmp, strerror(errno));
        goto fail_unlink;
    }
    fclose(fp);
    fp = NULL;
    if (rename(tmp, path)) {
        rc = hr_err(err, HR_EIO, "%s: rename: %s", path, strerror(errno));
        goto fail_unlink;
    }
    free(hdr);
    json_decref(root);
    return 0;
fail_oom:
    rc = hr_err(err, HR_ENOMEM, "%s: out of memory", path);
    goto fail;
fail_unlink:
    if (fp)
        fclose(fp);
    fp = NULL;
    unlink(tmp);
fail:
    if (fp)
        fclose(fp);
    free(hdr);
    json_decref(root);
    return rc;
}
