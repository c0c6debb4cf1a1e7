/* The training pass of `hearth train` (docs/training.md): the forward
 * pass of a dense llama-style model over packed sequences, keeping what
 * the backward needs, the cross-entropy over the vocabulary in chunks
 * (never every logit at once), and the backward into the LoRA
 * parameters of an hr_lora_set; the base stays frozen (any weight dtype
 * the CPU kernels read: f32, f16, bf16, MLX affine, GGUF).
 *
 * The math is the serving forward's (model/forward.c) for the families it
 * takes (hr_bp_supports); the products with the frozen weights are its
 * kernels (kernels/cpu/ops.h), the backward ones kernels/cpu/backward.h.
 * Deterministic: the same batch gives the same bits whatever the pool's
 * size. */
#ifndef HR_TRAIN_BACKPROP_H
#define HR_TRAIN_BACKPROP_H

#include "hearth.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

struct hr_lora_set;
typedef struct hr_bp hr_bp;

/* A batch of n_seqs token sequences packed end to end: sequence s is
 * tok[start[s] .. start[s + 1]) at positions 0, 1, ..; it predicts each
 * of its tokens j >= max(offset[s], 1) from the ones before (offset NULL:
 * 0; mlx_lm's --mask-prompt offsets). Sequences of one token have no
 * targets. */
typedef struct hr_bp_batch {
    int n_seqs;
    const int32_t *tok;
    const int *start;  /* [n_seqs + 1] */
    const int *offset; /* [n_seqs] or NULL */
} hr_bp_batch;

/* 0 when the trainer takes model m; else HR_EUNSUPPORTED naming what it
 * does not take yet (mixtures of experts, recurrent layers, LayerNorm,
 * post-norms, soft-capping, sliding windows, ...). */
int hr_bp_supports(const hr_model *m, hr_error *err);

/* A pass for the set's model and parameters (ls outlives it) over batches
 * of up to max_tokens tokens in all and max_len per sequence, on a pool of
 * n_threads (0: every core). checkpoint: keep only each adapted layer's
 * input and recompute the layer in the backward (--grad-checkpoint). */
int hr_bp_new(hr_bp **out, struct hr_lora_set *ls, int max_tokens, int max_len, int n_threads,
              bool checkpoint, hr_error *err);
void hr_bp_free(hr_bp *b);

/* One pass: *loss the mean cross-entropy over the batch's targets (nats),
 * *n_targets their count. With grad, the gradient of that mean is added
 * to the set's g. A batch with no targets gives loss 0, n 0. Errors: a
 * batch past the limits given to hr_bp_new, a token outside the
 * vocabulary. */
int hr_bp_step(hr_bp *b, const hr_bp_batch *batch, bool grad, double *loss, int *n_targets,
               hr_error *err);

/* The two halves of a step, for losses over whole sequences (DPO, ORPO:
 * train/loss.h). hr_bp_forward runs the batch with the adapters
 * (adapters false: the frozen base alone, DPO's reference) and gives
 * each sequence's summed log-probability of its targets, seq_logp
 * [n_seqs], and their count, seq_n [n_seqs]. hr_bp_backward, right after
 * a forward with adapters, adds to the set's g the gradient of
 * sum_s seq_w[s] * seq_logp[s]. Errors of the forward: hr_bp_step's. */
int hr_bp_forward(hr_bp *b, const hr_bp_batch *batch, bool adapters, double *seq_logp,
                  int *seq_n, hr_error *err);
void hr_bp_backward(hr_bp *b, const double *seq_w);

/* Bytes of activations and scratch held. */
size_t hr_bp_bytes(const hr_bp *b);

#endif
