/* The recurrent state of a model's recurrent layers (gated DeltaNet,
 * Mamba-2): a slot per sequence a step can hold, each layer's conv and
 * state tensors in backend memory, beside the paged KV. Internal to the
 * model layer (forward.c owns one; hr_fwd_state_* in forward.h expose the
 * snapshots).
 *
 * A slot is held by one sequence, which has run up to position next. A
 * sequence is known by its hr_seq_blocks.id when nonzero (the engine's
 * requests: the slot is theirs until hr__rstate_drop), else by its first
 * KV block in that block's allocation (kv->gen): the slot is free again
 * once that block is freed. A sequence that starts at position 0 takes a
 * free slot; one that continues must find its slot at that position. */
#ifndef HR_MODEL_RSTATE_H
#define HR_MODEL_RSTATE_H

#include "hearth.h"
#include "kernels/backend.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/kv.h"

#include <stddef.h>
#include <stdint.h>

typedef struct hr__rstate {
    hr_backend *be;
    int n_layers;
    int n_slots;
    uint64_t *key;          /* [n_slots] the holder (0: free) */
    int32_t *next;          /* [n_slots] its next position */
    int32_t *seq_slot;      /* [max_seqs] this step's, -1: no tokens */
    float **conv, **state;  /* [n_layers] NULL but for recurrent layers */
    size_t conv_slot, state_slot; /* bytes of one slot, per layer */
} hr__rstate;

/* Slots for max_seqs sequences (none when the model has no recurrent layer). */
int hr__rstate_init(hr__rstate *rs, const hr_hparams *hp, hr_backend *be, int max_seqs,
                    hr_error *err);
void hr__rstate_deinit(hr__rstate *rs);

/* Each sequence of the batch to its slot (rs->seq_slot); nothing changes
 * on error. */
int hr__rstate_assign(hr__rstate *rs, const hr_kv *kv, const hr_batch *b, hr_error *err);
/* After the step: each sequence's slot is its own up to its last position. */
void hr__rstate_commit(hr__rstate *rs, const hr_kv *kv, const hr_batch *b);

/* Bytes of one sequence's state (every recurrent layer): 0 without any. */
size_t hr__rstate_bytes(const hr__rstate *rs);
/* Copy out sequence id's state, which must be at position pos. */
int hr__rstate_get(hr__rstate *rs, uint64_t id, int pos, void *dst, hr_error *err);
/* Sequence id (its slot, if it holds one, is replaced) continues at pos
 * from the state src (hr__rstate_bytes of it). */
int hr__rstate_put(hr__rstate *rs, uint64_t id, int pos, const void *src, hr_error *err);
/* Sequence id holds no slot any more. */
void hr__rstate_drop(hr__rstate *rs, uint64_t id);

#endif
