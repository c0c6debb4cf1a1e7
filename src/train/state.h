/* `hearth train`'s resumable state (docs/training.md): what an
 * uninterrupted run holds between steps besides the adapter, written
 * beside each adapter checkpoint as OPTIMIZER_STATE (the adapter file's
 * name with "adapters.safetensors" replaced by
 * "optimizer_state.safetensors"), a safetensors file of:
 *   m1, m2 F32 [n]   the optimizer's moments (lora_params.h order)
 *   g      F32 [n]   the gradients accumulated since the last update
 *   iter   I64 [1]   iterations done;  updates I64 [1]  optimizer updates
 *   rng    I64 [4]   the batch order's generator (hr_rng bits)
 *   perm   I32 [nb]  this pass's batch order;  pos I64 [1]  its next index
 * With it, --resume-adapter-file continues to the bits of a run that was
 * never stopped. */
#ifndef HR_TRAIN_STATE_H
#define HR_TRAIN_STATE_H

#include "hearth.h"
#include "sample/rng.h"
#include "train/lora_params.h"

#include <stddef.h>

typedef struct hr_train_state {
    long iter, updates;
    hr_rng rng;
    int n_batches, pos;
    int *perm; /* [n_batches], owned by the caller */
} hr_train_state;

/* The state file's path for adapter file `adapter` into out[n]; 1 when
 * the name does not end in "adapters.safetensors" (no state file). */
int hr_train_state_path(char *out, size_t n, const char *adapter);

/* Write (atomically) the set's m1, m2, g and st. */
int hr_train_state_save(const char *path, const hr_lora_set *s, const hr_train_state *st,
                        hr_error *err);

/* Read path into the set's m1, m2, g and st (st->perm has room for
 * st->n_batches, which must match the file's). Errors: a malformed file,
 * a state of another set size or batch count ("not this run's"). */
int hr_train_state_load(const char *path, hr_lora_set *s, hr_train_state *st, hr_error *err);

/* The same from an image in memory into m[0..2] (m1, m2, g: n floats
 * each); name for messages. The fuzzed entry point. On error the outputs
 * may be partly written. */
int hr_train_state_parse(const void *data, size_t size, const char *name, float *const m[3],
                         size_t n, hr_train_state *st, hr_error *err);

#endif
