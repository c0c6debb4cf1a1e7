/* GGUF reader: validate everything at open, then serve views. */
#include "io/gguf.h"
#include "core/error.h"
#include "core/file.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv {
    char *key;           /* NUL-terminated copy */
    hr_gguf_type type;
    uint64_t off;        /* offset of the value in the file */
    hr_gguf_type elem;   /* arrays */
    uint64_t n;          /* arrays: element count */
    uint64_t *str_off;   /* string arrays: offset of each element's length */
} kv;

struct hr_gguf {
    hr_mmap map;
    int owns_map;
    const unsigned char *p;
    size_t size;
    char *path;
    uint32_t version;
    kv *kv;
    int64_t n_kv;
    hr_gguf_tensor *t;
    int64_t n_t;
    uint64_t align, data_off;
};

/* ---- ggml types --------------------------------------------------------- */

static const struct { const char *name; uint32_t block, size; } TYPES[] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},
    [2] = {"Q4_0", 32, 18},     [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},     [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},   [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},  [15] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},  [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},  [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},        [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},       [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},       [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},      [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},  [39] = {"MXFP4", 32, 17},
};
enum { N_TYPES = sizeof TYPES / sizeof TYPES[0] };

const char *hr_gguf_type_name(uint32_t t) {
    return t < N_TYPES ? TYPES[t].name : NULL;
}

static const uint32_t SCALAR_SIZE[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* ---- cursor ------------------------------------------------------------- */

typedef struct cur {
    const hr_gguf *g;
    uint64_t pos;
    hr_error *err;
} cur;

static int need(cur *c, uint64_t n, const char *what) {
    if (n > c->g->size || c->pos > c->g->size - n)
        return hr_err(c->err, HR_EFORMAT, "%s: truncated at byte %llu reading %s",
                      c->g->path, (unsigned long long)c->pos, what);
    return 0;
}

static int rd(cur *c, void *dst, uint64_t n, const char *what) {
    if (need(c, n, what))
        return HR_EFORMAT;
    memcpy(dst, c->g->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int rd_u32(cur *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static int rd_u64(cur *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

/* A string: u64 length + bytes. *off gets the offset of the bytes. */
static int rd_str(cur *c, uint64_t *off, uint64_t *len, const char *what) {
    if (rd_u64(c, len, what) || need(c, *len, what))
        return HR_EFORMAT;
    *off = c->pos;
    c->pos += *len;
    return 0;
}

static char *dup_str(const hr_gguf *g, uint64_t off, uint64_t len) {
    char *s = malloc(len + 1);
    if (s) {
        memcpy(s, g->p + off, len);
        s[len] = 0;
    }
    return s;
}

/* ---- parsing ------------------------------------------------------------ */

static int skip_value(cur *c, kv *k) {
    if (k->type == HR_GGUF_STRING) {
        uint64_t o, l;
        return rd_str(c, &o, &l, "a string value");
    }
    if (k->type != HR_GGUF_ARRAY) {
        if ((uint32_t)k->type > HR_GGUF_FLOAT64)
            return hr_err(c->err, HR_EFORMAT, "%s: key '%s' has unknown type %u",
                          c->g->path, k->key, (unsigned)k->type);
        if (need(c, SCALAR_SIZE[k->type], "a value"))
            return HR_EFORMAT;
        c->pos += SCALAR_SIZE[k->type];
        return 0;
    }
    uint32_t et;
    if (rd_u32(c, &et, "an array type") || rd_u64(c, &k->n, "an array length"))
        return HR_EFORMAT;
    k->elem = (hr_gguf_type)et;
    k->off = c->pos;
    if (et == HR_GGUF_STRING) {
        if (k->n > (c->g->size - c->pos) / 8)
            return hr_err(c->err, HR_EFORMAT, "%s: key '%s': array of %llu strings exceeds the file",
                          c->g->path, k->key, (unsigned long long)k->n);
        k->str_off = malloc((k->n ? k->n : 1) * sizeof *k->str_off);
        if (!k->str_off)
            return hr_err(c->err, HR_ENOMEM, "out of memory");
        for (uint64_t j = 0; j < k->n; j++) {
            uint64_t o, l;
            k->str_off[j] = c->pos;
            if (rd_str(c, &o, &l, "an array string"))
                return HR_EFORMAT;
        }
        return 0;
    }
    if (et > HR_GGUF_FLOAT64 || et == HR_GGUF_ARRAY)
        return hr_err(c->err, HR_EFORMAT, "%s: key '%s': bad array element type %u",
                      c->g->path, k->key, et);
    uint64_t es = SCALAR_SIZE[et];
    if (k->n > (c->g->size - c->pos) / es)
        return hr_err(c->err, HR_EFORMAT, "%s: key '%s': array of %llu exceeds the file",
                      c->g->path, k->key, (unsigned long long)k->n);
    c->pos += k->n * es;
    return 0;
}

static int parse_tensor(cur *c, hr_gguf *g, hr_gguf_tensor *t) {
    uint64_t no, nl;
    if (rd_str(c, &no, &nl, "a tensor name"))
        return HR_EFORMAT;
    if (!(t->name = dup_str(g, no, nl)))
        return hr_err(c->err, HR_ENOMEM, "out of memory");
    if (rd_u32(c, &t->n_dims, "tensor dims"))
        return HR_EFORMAT;
    if (t->n_dims < 1 || t->n_dims > 4)
        return hr_err(c->err, HR_EFORMAT, "%s: tensor '%s': %u dims (1..4 allowed)",
                      g->path, t->name, t->n_dims);
    uint64_t nel = 1;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = 1;
        if ((uint32_t)d < t->n_dims && rd_u64(c, &t->ne[d], "a tensor dim"))
            return HR_EFORMAT;
        if (t->ne[d] > INT64_MAX || (t->ne[d] && nel > INT64_MAX / t->ne[d]))
            return hr_err(c->err, HR_EFORMAT, "%s: tensor '%s': dims overflow", g->path, t->name);
        nel *= t->ne[d];
    }
    if (rd_u32(c, &t->type, "a tensor type") || rd_u64(c, &t->offset, "a tensor offset"))
        return HR_EFORMAT;
    if (t->type >= N_TYPES || !TYPES[t->type].name)
        return hr_err(c->err, HR_EUNSUPPORTED, "%s: tensor '%s': not supported yet: ggml type %u",
                      g->path, t->name, t->type);
    uint32_t bs = TYPES[t->type].block;
    if (t->ne[0] % bs)
        return hr_err(c->err, HR_EFORMAT, "%s: tensor '%s': ne[0]=%llu is not a multiple of %u (%s)",
                      g->path, t->name, (unsigned long long)t->ne[0], bs, TYPES[t->type].name);
    uint64_t blocks = nel / bs;
    if (blocks > UINT64_MAX / TYPES[t->type].size)
        return hr_err(c->err, HR_EFORMAT, "%s: tensor '%s': size overflow", g->path, t->name);
    t->size = blocks * TYPES[t->type].size;
    return 0;
}

static int parse(hr_gguf *g, hr_error *err) {
    cur c = {g, 0, err};
    char magic[4];
    if (rd(&c, magic, 4, "the magic") || memcmp(magic, "GGUF", 4))
        return hr_err(err, HR_EFORMAT, "%s: not a GGUF file (bad magic)", g->path);
    uint64_t n_t, n_kv;
    if (rd_u32(&c, &g->version, "the version"))
        return HR_EFORMAT;
    if (g->version != 2 && g->version != 3)
        return hr_err(err, HR_EUNSUPPORTED, "%s: not supported yet: GGUF version %u",
                      g->path, g->version);
    if (rd_u64(&c, &n_t, "the tensor count") || rd_u64(&c, &n_kv, "the key count"))
        return HR_EFORMAT;
    /* a key takes >= 12 bytes, a tensor info >= 28: bound the counts */
    if (n_kv > g->size / 12 || n_t > g->size / 28)
        return hr_err(err, HR_EFORMAT, "%s: %llu keys / %llu tensors cannot fit in %zu bytes",
                      g->path, (unsigned long long)n_kv, (unsigned long long)n_t, g->size);
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->t = calloc(n_t ? n_t : 1, sizeof *g->t);
    if (!g->kv || !g->t)
        return hr_err(err, HR_ENOMEM, "out of memory");
    g->align = 32;
    for (uint64_t i = 0; i < n_kv; i++) {
        kv *k = &g->kv[i];
        uint64_t ko, kl;
        uint32_t type;
        if (rd_str(&c, &ko, &kl, "a key"))
            return HR_EFORMAT;
        if (!(k->key = dup_str(g, ko, kl)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        g->n_kv = (int64_t)i + 1;
        if (strlen(k->key) != kl)
            return hr_err(err, HR_EFORMAT, "%s: key %llu contains a NUL byte", g->path,
                          (unsigned long long)i);
        for (uint64_t j = 0; j < i; j++)
            if (!strcmp(g->kv[j].key, k->key))
                return hr_err(err, HR_EFORMAT, "%s: duplicate key '%s'", g->path, k->key);
        if (rd_u32(&c, &type, "a value type"))
            return HR_EFORMAT;
        k->type = (hr_gguf_type)type;
        k->off = c.pos;
        if (skip_value(&c, k))
            return err ? err->code : HR_EFORMAT;
        if (!strcmp(k->key, "general.alignment")) {
            int64_t a;
            if (hr_gguf_get_int(g, (int64_t)i, &a) || a <= 0 || a > (1 << 30) || (a & (a - 1)))
                return hr_err(err, HR_EFORMAT, "%s: bad general.alignment", g->path);
            g->align = (uint64_t)a;
        }
    }
    for (uint64_t i = 0; i < n_t; i++) {
        g->n_t = (int64_t)i + 1;
        int rc = parse_tensor(&c, g, &g->t[i]);
        if (rc)
            return rc;
    }
    uint64_t data = (c.pos + g->align - 1) / g->align * g->align;
    if (n_t && data > g->size)
        return hr_err(err, HR_EFORMAT, "%s: truncated before the tensor data", g->path);
    g->data_off = data;
    uint64_t avail = data <= g->size ? g->size - data : 0;
    for (int64_t i = 0; i < g->n_t; i++) {
        hr_gguf_tensor *t = &g->t[i];
        if (t->offset % g->align)
            return hr_err(err, HR_EFORMAT, "%s: tensor '%s': offset %llu not aligned to %llu",
                          g->path, t->name, (unsigned long long)t->offset,
                          (unsigned long long)g->align);
        if (t->offset > avail || t->size > avail - t->offset)
            return hr_err(err, HR_EFORMAT, "%s: tensor '%s': data [%llu, +%llu) outside the file",
                          g->path, t->name, (unsigned long long)t->offset,
                          (unsigned long long)t->size);
        t->data = g->p + data + t->offset;
        for (int64_t j = 0; j < i; j++)
            if (!strcmp(g->t[j].name, t->name))
                return hr_err(err, HR_EFORMAT, "%s: duplicate tensor '%s'", g->path, t->name);
    }
    return 0;
}

/* ---- open / close ------------------------------------------------------- */

static int open_common(hr_gguf *g, const char *name, hr_error *err) {
    if (!(g->path = strdup(name)))
        return hr_err(err, HR_ENOMEM, "out of memory");
    return parse(g, err);
}

int hr_gguf_open_mem(hr_gguf **out, const void *data, size_t size,
                     const char *name, hr_error *err) {
    *out = NULL;
    hr_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return hr_err(err, HR_ENOMEM, "out of memory");
    g->p = data;
    g->size = data ? size : 0;
    int rc = open_common(g, name ? name : "<memory>", err);
    if (rc) {
        hr_gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

int hr_gguf_open(hr_gguf **out, const char *path, hr_error *err) {
    *out = NULL;
    hr_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int rc = hr_mmap_open(&g->map, path, err);
    if (rc) {
        free(g);
        return rc;
    }
    g->owns_map = 1;
    g->p = g->map.data;
    g->size = g->map.size;
    rc = open_common(g, path, err);
    if (rc) {
        hr_gguf_close(g);
        return rc;
    }
    *out = g;
    return 0;
}

void hr_gguf_close(hr_gguf *g) {
    if (!g)
        return;
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].str_off);
    }
    for (int64_t i = 0; i < g->n_t; i++)
        free((char *)g->t[i].name);
    free(g->kv);
    free(g->t);
    free(g->path);
    if (g->owns_map)
        hr_mmap_close(&g->map);
    free(g);
}

/* ---- accessors ---------------------------------------------------------- */

uint32_t hr_gguf_version(const hr_gguf *g) { return g->version; }
int hr_gguf_maps(const hr_gguf *g, const void *p, size_t n) {
    const unsigned char *b = g->map.data, *q = p;
    return g->owns_map && b && q >= b && n <= g->map.size && (size_t)(q - b) <= g->map.size - n;
}

const char *hr_gguf_path(const hr_gguf *g) { return g->path; }
int64_t hr_gguf_n_kv(const hr_gguf *g) { return g->n_kv; }
int64_t hr_gguf_n_tensors(const hr_gguf *g) { return g->n_t; }

const char *hr_gguf_key(const hr_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

int64_t hr_gguf_find(const hr_gguf *g, const char *key) {
    for (int64_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kv[i].key, key))
            return i;
    return -1;
}

hr_gguf_type hr_gguf_kv_type(const hr_gguf *g, int64_t i) { return g->kv[i].type; }

static int scalar_int(const unsigned char *p, hr_gguf_type t, int64_t *v) {
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32;
            int32_t i32; uint64_t u64; int64_t i64; } x;
    switch (t) {
    case HR_GGUF_UINT8: case HR_GGUF_BOOL: memcpy(&x.u8, p, 1); *v = x.u8; return 0;
    case HR_GGUF_INT8: memcpy(&x.i8, p, 1); *v = x.i8; return 0;
    case HR_GGUF_UINT16: memcpy(&x.u16, p, 2); *v = x.u16; return 0;
    case HR_GGUF_INT16: memcpy(&x.i16, p, 2); *v = x.i16; return 0;
    case HR_GGUF_UINT32: memcpy(&x.u32, p, 4); *v = x.u32; return 0;
    case HR_GGUF_INT32: memcpy(&x.i32, p, 4); *v = x.i32; return 0;
    case HR_GGUF_INT64: memcpy(&x.i64, p, 8); *v = x.i64; return 0;
    case HR_GGUF_UINT64:
        memcpy(&x.u64, p, 8);
        if (x.u64 > INT64_MAX)
            return HR_ERANGE;
        *v = (int64_t)x.u64;
        return 0;
    default:
        return HR_EFORMAT;
    }
}

static int scalar_float(const unsigned char *p, hr_gguf_type t, double *v) {
    if (t == HR_GGUF_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        *v = f;
        return 0;
    }
    if (t == HR_GGUF_FLOAT64) {
        memcpy(v, p, 8);
        return 0;
    }
    return HR_EFORMAT;
}

int hr_gguf_get_int(const hr_gguf *g, int64_t i, int64_t *v) {
    return scalar_int(g->p + g->kv[i].off, g->kv[i].type, v);
}

int hr_gguf_get_float(const hr_gguf *g, int64_t i, double *v) {
    return scalar_float(g->p + g->kv[i].off, g->kv[i].type, v);
}

int hr_gguf_get_bool(const hr_gguf *g, int64_t i, int *v) {
    if (g->kv[i].type != HR_GGUF_BOOL)
        return HR_EFORMAT;
    *v = g->p[g->kv[i].off] != 0;
    return 0;
}

static void str_at(const hr_gguf *g, uint64_t off, const char **s, size_t *len) {
    uint64_t l;
    memcpy(&l, g->p + off, 8);
    *s = (const char *)g->p + off + 8;
    *len = (size_t)l;
}

int hr_gguf_get_str(const hr_gguf *g, int64_t i, const char **s, size_t *len) {
    if (g->kv[i].type != HR_GGUF_STRING)
        return HR_EFORMAT;
    str_at(g, g->kv[i].off, s, len);
    return 0;
}

int hr_gguf_get_arr(const hr_gguf *g, int64_t i, hr_gguf_type *elem, uint64_t *n) {
    if (g->kv[i].type != HR_GGUF_ARRAY)
        return HR_EFORMAT;
    *elem = g->kv[i].elem;
    *n = g->kv[i].n;
    return 0;
}

int hr_gguf_arr_str(const hr_gguf *g, int64_t i, uint64_t j, const char **s, size_t *len) {
    const kv *k = &g->kv[i];
    if (k->type != HR_GGUF_ARRAY || k->elem != HR_GGUF_STRING)
        return HR_EFORMAT;
    if (j >= k->n)
        return HR_ERANGE;
    str_at(g, k->str_off[j], s, len);
    return 0;
}

int hr_gguf_arr_int(const hr_gguf *g, int64_t i, uint64_t j, int64_t *v) {
    const kv *k = &g->kv[i];
    if (k->type != HR_GGUF_ARRAY || k->elem == HR_GGUF_STRING)
        return HR_EFORMAT;
    if (j >= k->n)
        return HR_ERANGE;
    return scalar_int(g->p + k->off + j * SCALAR_SIZE[k->elem], k->elem, v);
}

int hr_gguf_arr_float(const hr_gguf *g, int64_t i, uint64_t j, double *v) {
    const kv *k = &g->kv[i];
    if (k->type != HR_GGUF_ARRAY || k->elem == HR_GGUF_STRING)
        return HR_EFORMAT;
    if (j >= k->n)
        return HR_ERANGE;
    return scalar_float(g->p + k->off + j * SCALAR_SIZE[k->elem], k->elem, v);
}

int hr_gguf_key_str(const hr_gguf *g, const char *key, const char **s, size_t *len) {
    int64_t i = hr_gguf_find(g, key);
    return i < 0 ? HR_ENOTFOUND : hr_gguf_get_str(g, i, s, len);
}

int hr_gguf_key_int(const hr_gguf *g, const char *key, int64_t *v) {
    int64_t i = hr_gguf_find(g, key);
    return i < 0 ? HR_ENOTFOUND : hr_gguf_get_int(g, i, v);
}

const hr_gguf_tensor *hr_gguf_tensor_at(const hr_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_t ? &g->t[i] : NULL;
}

const hr_gguf_tensor *hr_gguf_find_tensor(const hr_gguf *g, const char *name) {
    for (int64_t i = 0; i < g->n_t; i++)
        if (!strcmp(g->t[i].name, name))
            return &g->t[i];
    return NULL;
}
