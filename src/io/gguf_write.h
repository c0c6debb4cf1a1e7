/* GGUF v3 writer: collect metadata and tensors, then write the file
 * atomically (temp file beside it, rename). Tensor data is borrowed: it
 * must stay valid until hr_gguf_w_write returns. Or a tensor's bytes are
 * made while the file is written (hr_gguf_w_tensor_fill): one tensor at a
 * time in a buffer freed after it, so a model larger than memory streams
 * through. Alignment 32. */
#ifndef HR_IO_GGUF_WRITE_H
#define HR_IO_GGUF_WRITE_H

#include "hearth.h"

#include <stddef.h>
#include <stdint.h>

typedef struct hr_gguf_w hr_gguf_w;

hr_gguf_w *hr_gguf_w_new(void);
void hr_gguf_w_free(hr_gguf_w *w);

/* Metadata; each returns 0 or HR_ENOMEM (remembered: write then fails). */
int hr_gguf_w_str(hr_gguf_w *w, const char *key, const char *v);
int hr_gguf_w_u32(hr_gguf_w *w, const char *key, uint32_t v);
int hr_gguf_w_i32(hr_gguf_w *w, const char *key, int32_t v);
int hr_gguf_w_f32(hr_gguf_w *w, const char *key, float v);
int hr_gguf_w_bool(hr_gguf_w *w, const char *key, int v);
int hr_gguf_w_arr_str(hr_gguf_w *w, const char *key, const char *const *v, size_t n);
int hr_gguf_w_arr_f32(hr_gguf_w *w, const char *key, const float *v, size_t n);
int hr_gguf_w_arr_i32(hr_gguf_w *w, const char *key, const int32_t *v, size_t n);

/* A tensor: ggml type, dims (ne[0] fastest), nbytes of data. */
int hr_gguf_w_tensor(hr_gguf_w *w, const char *name, uint32_t ggml_type, int n_dims,
                     const uint64_t *ne, const void *data, size_t nbytes);

/* The same with its bytes made at write time: fill(ctx, dst, nbytes, err)
 * writes the nbytes of dst (0, or an error code with err set, which stops
 * the write). ctx stays the caller's and must outlive hr_gguf_w_write. */
typedef int (*hr_gguf_fill_fn)(void *ctx, void *dst, size_t nbytes, hr_error *err);
int hr_gguf_w_tensor_fill(hr_gguf_w *w, const char *name, uint32_t ggml_type, int n_dims,
                          const uint64_t *ne, size_t nbytes, hr_gguf_fill_fn fill, void *ctx);

int hr_gguf_w_write(hr_gguf_w *w, const char *path, hr_error *err);

#endif
