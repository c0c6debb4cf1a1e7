/* GGUF (v2/v3) reader: the file is mmapped read-only and validated in full
 * at open: header, every metadata key/value (arrays included), every tensor
 * info (known type, dims, aligned offset, data inside the file). Accessors
 * then never fail on bounds. Strings point into the mapping and are NOT
 * NUL-terminated (use the length); keys and tensor names are copied and are.
 * Errors name the file. Layout: ggml/docs/gguf.md and gguf-py in llama.cpp. */
#ifndef HR_IO_GGUF_H
#define HR_IO_GGUF_H

#include "hearth.h"

#include <stddef.h>
#include <stdint.h>

typedef struct hr_gguf hr_gguf;

typedef enum hr_gguf_type {
    HR_GGUF_UINT8 = 0, HR_GGUF_INT8 = 1, HR_GGUF_UINT16 = 2, HR_GGUF_INT16 = 3,
    HR_GGUF_UINT32 = 4, HR_GGUF_INT32 = 5, HR_GGUF_FLOAT32 = 6, HR_GGUF_BOOL = 7,
    HR_GGUF_STRING = 8, HR_GGUF_ARRAY = 9, HR_GGUF_UINT64 = 10, HR_GGUF_INT64 = 11,
    HR_GGUF_FLOAT64 = 12,
} hr_gguf_type;

typedef struct hr_gguf_tensor {
    const char *name;   /* NUL-terminated */
    uint32_t n_dims;    /* 1..4 */
    uint64_t ne[4];     /* elements per dim, ne[0] fastest; unused dims = 1 */
    uint32_t type;      /* ggml_type (GGML_TYPE_F32 = 0, ...) */
    uint64_t offset;    /* from the start of the data section */
    uint64_t size;      /* bytes */
    const void *data;   /* inside the mapping */
} hr_gguf_tensor;

/* Open and validate path. */
int hr_gguf_open(hr_gguf **out, const char *path, hr_error *err);
/* The same over a caller's buffer (which must outlive the handle); name is
 * used in error messages. */
int hr_gguf_open_mem(hr_gguf **out, const void *data, size_t size,
                     const char *name, hr_error *err);
void hr_gguf_close(hr_gguf *g);

uint32_t hr_gguf_version(const hr_gguf *g);
const char *hr_gguf_path(const hr_gguf *g);
/* Whether [p, p + n) lies inside the file's own read-only mapping. */
int hr_gguf_maps(const hr_gguf *g, const void *p, size_t n);

/* ---- metadata: keys are indexed 0..n_kv-1 ------------------------------- */
int64_t hr_gguf_n_kv(const hr_gguf *g);
const char *hr_gguf_key(const hr_gguf *g, int64_t i);
int64_t hr_gguf_find(const hr_gguf *g, const char *key); /* -1 if absent */
hr_gguf_type hr_gguf_kv_type(const hr_gguf *g, int64_t i);

/* Scalar getters return 0, or HR_EFORMAT when the value has another type
 * (get_int accepts any integer type and bool; HR_ERANGE if a uint64 does
 * not fit; get_float accepts float32/float64). */
int hr_gguf_get_int(const hr_gguf *g, int64_t i, int64_t *v);
int hr_gguf_get_float(const hr_gguf *g, int64_t i, double *v);
int hr_gguf_get_bool(const hr_gguf *g, int64_t i, int *v);
int hr_gguf_get_str(const hr_gguf *g, int64_t i, const char **s, size_t *len);

/* Arrays: element type and count; then elements by index (j < n). */
int hr_gguf_get_arr(const hr_gguf *g, int64_t i, hr_gguf_type *elem, uint64_t *n);
int hr_gguf_arr_str(const hr_gguf *g, int64_t i, uint64_t j, const char **s,
                    size_t *len);
int hr_gguf_arr_int(const hr_gguf *g, int64_t i, uint64_t j, int64_t *v);
int hr_gguf_arr_float(const hr_gguf *g, int64_t i, uint64_t j, double *v);

/* Convenience by key: HR_ENOTFOUND when absent. */
int hr_gguf_key_str(const hr_gguf *g, const char *key, const char **s, size_t *len);
int hr_gguf_key_int(const hr_gguf *g, const char *key, int64_t *v);

/* ---- tensors ------------------------------------------------------------ */
int64_t hr_gguf_n_tensors(const hr_gguf *g);
const hr_gguf_tensor *hr_gguf_tensor_at(const hr_gguf *g, int64_t i);
const hr_gguf_tensor *hr_gguf_find_tensor(const hr_gguf *g, const char *name);

/* ggml type name ("F32", "Q4_K", ...) or NULL for an unknown type. */
const char *hr_gguf_type_name(uint32_t ggml_type);

#endif
