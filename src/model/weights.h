/* The weight files of a model directory: model.safetensors, the shards named
 * by model.safetensors.index.json, or every *.safetensors in the directory.
 * All mmapped read-only; tensors are looked up by their HF name. */
#ifndef HR_MODEL_WEIGHTS_H
#define HR_MODEL_WEIGHTS_H

#include "core/tensor.h"
#include "hearth.h"

typedef struct hr_weights hr_weights;

int hr_weights_open(hr_weights **out, const char *dir, hr_error *err);
/* The tensors of an open GGUF file (ownership of g passes to the result,
 * also on error), under their Hugging Face names (gguf_model.h); every
 * tensor's type must be one hearth computes with. */
struct hr_gguf;
int hr_weights_open_gguf(hr_weights **out, struct hr_gguf *g, hr_error *err);
/* Tensors whose bytes are made on demand (hearth synth writing a model
 * larger than memory): n tensors (names, dtypes, shapes and nbytes copied,
 * data NULL); gen(ctx, i, dst, err) makes tensor i's nbytes into dst (0 or
 * an error code with err set). ctx must outlive the result. */
typedef int (*hr_weights_gen_fn)(void *ctx, size_t i, void *dst, hr_error *err);
int hr_weights_new_lazy(hr_weights **out, const hr_tensor *t, size_t n, hr_weights_gen_fn gen,
                        void *ctx, hr_error *err);
/* Whether w's tensors are made on demand (their data is NULL). */
int hr_weights_is_lazy(const hr_weights *w);
/* The bytes of tensor t of w into *data: t->data, or (a lazy tensor) made
 * now into a malloc'd buffer also returned in *owned for the caller to free
 * (*owned is NULL when t->data is returned). 0 or an error code. */
int hr_weights_load(const hr_weights *w, const hr_tensor *t, const void **data, void **owned,
                    hr_error *err);
void hr_weights_close(hr_weights *w);
/* NULL when absent. */
const hr_tensor *hr_weights_find(const hr_weights *w, const char *name);
/* The file a tensor came from (for error messages). */
const char *hr_weights_file_of(const hr_weights *w, const hr_tensor *t);
/* Every tensor, i < hr_weights_count (in file order, files in order). */
size_t hr_weights_count(const hr_weights *w);
const hr_tensor *hr_weights_at(const hr_weights *w, size_t i);
/* The bytes [p, p + n) of a tensor are no longer read (it was copied):
 * when they are a file mapping of w, their pages leave memory
 * (hr_mmap_drop); otherwise nothing happens. */
void hr_weights_drop(const hr_weights *w, const void *p, size_t n);
/* Replace the tensor named t->name by *t (copied; t->name and t->data must
 * outlive w): find and at return it instead from now on (a fused model's
 * conversion). HR_ENOTFOUND when w has no tensor of that name. */
int hr_weights_override(hr_weights *w, const hr_tensor *t, hr_error *err);
/* Total bytes of all tensors. */
size_t hr_weights_bytes(const hr_weights *w);

#endif
