/* GGUF v3 writer (layout: llama.cpp ggml/docs/gguf.md). */
#include "io/gguf_write.h"
#include "core/error.h"
#include "io/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ALIGN 32

typedef struct buf {
    unsigned char *p;
    size_t n, cap;
} buf;

typedef struct wtensor {
    char *name;
    uint32_t type;
    int n_dims;
    uint64_t ne[4];
    const void *data;
    size_t nbytes;
    hr_gguf_fill_fn fill; /* or made at write time */
    void *ctx;
} wtensor;

struct hr_gguf_w {
    buf kv;
    uint64_t n_kv;
    wtensor *t;
    size_t n_t, cap_t;
    int oom;
};

static int put(hr_gguf_w *w, const void *src, size_t n) {
    buf *b = &w->kv;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            w->oom = 1;
            return HR_ENOMEM;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

static int put_u32(hr_gguf_w *w, uint32_t v) { return put(w, &v, 4); }
static int put_u64(hr_gguf_w *w, uint64_t v) { return put(w, &v, 8); }
static int put_str(hr_gguf_w *w, const char *s) {
    uint64_t n = strlen(s);
    return put_u64(w, n) || put(w, s, n) ? HR_ENOMEM : 0;
}
static int key(hr_gguf_w *w, const char *k, hr_gguf_type t) {
    w->n_kv++;
    return put_str(w, k) || put_u32(w, (uint32_t)t) ? HR_ENOMEM : 0;
}

hr_gguf_w *hr_gguf_w_new(void) { return calloc(1, sizeof(hr_gguf_w)); }

void hr_gguf_w_free(hr_gguf_w *w) {
    if (!w)
        return;
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->kv.p);
    free(w);
}

int hr_gguf_w_str(hr_gguf_w *w, const char *k, const char *v) {
    return key(w, k, HR_GGUF_STRING) || put_str(w, v) ? HR_ENOMEM : 0;
}
int hr_gguf_w_u32(hr_gguf_w *w, const char *k, uint32_t v) {
    return key(w, k, HR_GGUF_UINT32) || put_u32(w, v) ? HR_ENOMEM : 0;
}
int hr_gguf_w_i32(hr_gguf_w *w, const char *k, int32_t v) {
    return key(w, k, HR_GGUF_INT32) || put(w, &v, 4) ? HR_ENOMEM : 0;
}
int hr_gguf_w_f32(hr_gguf_w *w, const char *k, float v) {
    return key(w, k, HR_GGUF_FLOAT32) || put(w, &v, 4) ? HR_ENOMEM : 0;
}
int hr_gguf_w_bool(hr_gguf_w *w, const char *k, int v) {
    uint8_t b = v != 0;
    return key(w, k, HR_GGUF_BOOL) || put(w, &b, 1) ? HR_ENOMEM : 0;
}
int hr_gguf_w_arr_str(hr_gguf_w *w, const char *k, const char *const *v, size_t n) {
    if (key(w, k, HR_GGUF_ARRAY) || put_u32(w, HR_GGUF_STRING) || put_u64(w, n))
        return HR_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (put_str(w, v[i]))
            return HR_ENOMEM;
    return 0;
}
int hr_gguf_w_arr_f32(hr_gguf_w *w, const char *k, const float *v, size_t n) {
    return key(w, k, HR_GGUF_ARRAY) || put_u32(w, HR_GGUF_FLOAT32) || put_u64(w, n) ||
                   put(w, v, 4 * n)
               ? HR_ENOMEM
               : 0;
}
int hr_gguf_w_arr_i32(hr_gguf_w *w, const char *k, const int32_t *v, size_t n) {
    return key(w, k, HR_GGUF_ARRAY) || put_u32(w, HR_GGUF_INT32) || put_u64(w, n) ||
                   put(w, v, 4 * n)
               ? HR_ENOMEM
               : 0;
}

int hr_gguf_w_tensor(hr_gguf_w *w, const char *name, uint32_t type, int n_dims,
                     const uint64_t *ne, const void *data, size_t nbytes) {
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) {
            w->oom = 1;
            return HR_ENOMEM;
        }
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) {
        w->oom = 1;
        return HR_ENOMEM;
    }
    t->type = type;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims && i < 4; i++)
        t->ne[i] = ne[i];
    t->data = data;
    t->nbytes = nbytes;
    w->n_t++;
    return 0;
}

int hr_gguf_w_tensor_fill(hr_gguf_w *w, const char *name, uint32_t type, int n_dims,
                          const uint64_t *ne, size_t nbytes, hr_gguf_fill_fn fill, void *ctx) {
    int rc = hr_gguf_w_tensor(w, name, type, n_dims, ne, NULL, nbytes);
    if (!rc) {
        w->t[w->n_t - 1].fill = fill;
        w->t[w->n_t - 1].ctx = ctx;
    }
    return rc;
}

static size_t pad(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

int hr_gguf_w_write(hr_gguf_w *w, const char *path, hr_error *err) {
    if (w->oom)
        return hr_err(err, HR_ENOMEM, "out of memory building %s", path);
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path) >= (int)sizeof tmp)
        return hr_err(err, HR_ERANGE, "%s: path too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return hr_err(err, HR_EIO, "%s: %s", tmp, strerror(errno));
    fchmod(fd, 0644); /* mkstemp makes 0600 */
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        return hr_err(err, HR_EIO, "%s: %s", tmp, strerror(errno));
    }
    uint32_t version = 3;
    uint64_t nt = w->n_t, off = 0;
    int ok = fwrite("GGUF", 1, 4, f) == 4 && fwrite(&version, 4, 1, f) == 1 &&
             fwrite(&nt, 8, 1, f) == 1 && fwrite(&w->n_kv, 8, 1, f) == 1 &&
             fwrite(w->kv.p, 1, w->kv.n, f) == w->kv.n;
    size_t hdr = 24 + w->kv.n;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t len = strlen(t->name);
        uint32_t nd = (uint32_t)t->n_dims;
        ok = fwrite(&len, 8, 1, f) == 1 && fwrite(t->name, 1, len, f) == len &&
             fwrite(&nd, 4, 1, f) == 1 && fwrite(t->ne, 8, nd, f) == nd &&
             fwrite(&t->type, 4, 1, f) == 1 && fwrite(&off, 8, 1, f) == 1;
        hdr += 8 + len + 4 + 8 * nd + 4 + 8;
        off += pad(t->nbytes);
    }
    static const unsigned char zeros[ALIGN];
    if (ok)
        ok = fwrite(zeros, 1, pad(hdr) - hdr, f) == pad(hdr) - hdr;
    int frc = 0; /* a fill's error */
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        void *made = NULL;
        if (t->fill) {
            if (!(made = malloc(t->nbytes ? t->nbytes : 1)))
                frc = hr_err(err, HR_ENOMEM, "out of memory making tensor '%s'", t->name);
            else
                frc = t->fill(t->ctx, made, t->nbytes, err);
            ok = !frc;
        }
        ok = ok && fwrite(made ? made : t->data, 1, t->nbytes, f) == t->nbytes &&
             fwrite(zeros, 1, pad(t->nbytes) - t->nbytes, f) == pad(t->nbytes) - t->nbytes;
        free(made);
    }
    if (frc) {
        fclose(f);
        unlink(tmp);
        return frc;
    }
    if (ok)
        ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return hr_err(err, HR_EIO, "%s: write failed: %s", path, strerror(e));
    }
    return 0;
}
