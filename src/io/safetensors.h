/* safetensors: an 8-byte little-endian header length, a JSON header
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
 * then the tensor bytes. Files are mmapped read-only; tensors are views. */
#ifndef HR_IO_SAFETENSORS_H
#define HR_IO_SAFETENSORS_H

#include "core/tensor.h"
#include "hearth.h"

typedef struct hr_st_file hr_st_file;

/* Open and validate a file: header length and JSON, every dtype, shape and
 * offset (inside the data section, no overlaps, dtype x shape = byte size).
 * Errors name the file and the tensor. */
int hr_st_open(hr_st_file **out, const char *path, hr_error *err);

/* Validate an in-memory image (not copied: data must outlive the result).
 * name is used in error messages. This is the fuzzed entry point. */
int hr_st_parse(hr_st_file **out, const void *data, size_t size,
                const char *name, hr_error *err);

void hr_st_close(hr_st_file *f);

size_t hr_st_count(const hr_st_file *f);
const hr_tensor *hr_st_tensor(const hr_st_file *f, size_t i);
/* NULL when absent. */
const hr_tensor *hr_st_find(const hr_st_file *f, const char *name);
const char *hr_st_path(const hr_st_file *f);
/* Whether [p, p + n) lies in the file mapping f owns (not when parsed from
 * memory). */
int hr_st_maps(const hr_st_file *f, const void *p, size_t n);

/* ---- writing ----------------------------------------------------------- */

/* Write tensors (name, dtype, shape, data, nbytes) to path atomically:
 * a temp file beside it, then rename. metadata (may be NULL) is a list of
 * n_meta string pairs for "__metadata__". */
int hr_st_write(const char *path, const hr_tensor *tensors, size_t n,
                const char *const *metadata, size_t n_meta, hr_error *err);
/* The same, with the bytes of each tensor whose data is NULL made while
 * the file is written: fill(ctx, i, dst, err) writes tensors[i].nbytes
 * into dst (0, or an error code with err set, which stops the write), one
 * tensor at a time in a buffer freed after it, in the order of tensors. */
typedef int (*hr_st_fill_fn)(void *ctx, size_t i, void *dst, hr_error *err);
int hr_st_write_fill(const char *path, const hr_tensor *tensors, size_t n,
                     const char *const *metadata, size_t n_meta, hr_st_fill_fn fill, void *ctx,
                     hr_error *err);

#endif
