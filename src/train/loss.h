/* `hearth train`'s losses over whole sequences (docs/training.md):
 * from each sequence's summed target log-probability (train/backprop.h
 * hr_bp_forward) to the batch's loss and the weights hr_bp_backward takes
 * (d loss / d seq_logp[s]).
 *
 *   sft   the mean cross-entropy over every target of the batch.
 *   dpo   TRL's DPOTrainer, loss_type "sigmoid", no label smoothing (and
 *         mlx-lm-lora's dpo_loss "sigmoid"): sequences 2i and 2i+1 are a
 *         pair's chosen and rejected completions, pi and ref their summed
 *         log-probs under the adapted model and the frozen base:
 *         z_i = beta ((pi_c - pi_r) - (ref_c - ref_r)),
 *         loss = mean_i -log sigmoid(z_i).
 *   orpo  TRL's ORPOTrainer: p the mean log-prob of each completion's
 *         tokens, log_odds_i = (p_c - p_r) - (log(1 - e^p_c) - log(1 - e^p_r)),
 *         loss = NLL - lambda mean_i log sigmoid(log_odds_i), NLL the mean
 *         cross-entropy over the chosen completions' tokens of the batch.
 * The rejected's tokens are none of the NLL's. */
#ifndef HR_TRAIN_LOSS_H
#define HR_TRAIN_LOSS_H

#include "hearth.h"
#include "train/backprop.h"

#include <stdbool.h>

typedef enum hr_loss_kind { HR_LOSS_SFT, HR_LOSS_DPO, HR_LOSS_ORPO } hr_loss_kind;

/* "sft", "dpo", "orpo" -> the kind; -1 otherwise. */
int hr_loss_parse(const char *name);
const char *hr_loss_name(hr_loss_kind k);

/* Does the kind take preference pairs (dpo, orpo)? Does it need the
 * frozen base's log-probs (dpo)? */
bool hr_loss_pairs(hr_loss_kind k);
bool hr_loss_needs_ref(hr_loss_kind k);

/* The loss of n_seqs sequences (pairs: n_seqs even, chosen first) from
 * lp [n_seqs] summed log-probs, cnt [n_seqs] their target counts, ref
 * [n_seqs] the base's summed log-probs (dpo; else NULL); param is DPO's
 * beta or ORPO's lambda. w [n_seqs] (may be NULL) gets d loss / d lp[s].
 * Sequences without targets weigh 0; a batch without any gives 0. */
double hr_loss_eval(hr_loss_kind k, double param, int n_seqs, const double *lp, const int *cnt,
                    const double *ref, double *w);

/* One step of kind k on batch bt: the frozen base's log-probs when the
 * kind needs them and ref is NULL (ref: the caller's, [n_seqs]), the
 * adapted forward, the loss (*loss; *n_targets the targets the loss
 * counts), and with grad its gradient added to the set's g. Errors:
 * hr_bp_forward's; a pair batch with an odd n_seqs. */
int hr_loss_step(hr_bp *b, const hr_bp_batch *bt, hr_loss_kind k, double param,
                 const double *ref, bool grad, double *loss, int *n_targets, hr_error *err);

#endif
