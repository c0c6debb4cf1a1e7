/* RoPE frequencies for every scaling type transformers implements
 * (modeling_rope_utils.py): default, linear, dynamic, llama3, yarn, longrope.
 * Computed once per parameterization (dynamic and longrope also depend on
 * the sequence length: see hr_rope_freqs' seq_len). */
#ifndef HR_MODEL_ROPE_H
#define HR_MODEL_ROPE_H

#include "model/config.h"

/* inv_freq[rot_dim/2] and *attn_factor (multiplies cos and sin) for params
 * rp. seq_len is the current sequence length (dynamic: rescale past
 * max_pos; longrope: long factors past original_max_pos); max_pos is the
 * model's max_position_embeddings. */
void hr_rope_freqs(const hr_rope_params *rp, int rot_dim, int max_pos,
                   int seq_len, float *inv_freq, float *attn_factor);

/* True when growing a sequence from old_len to new_len tokens changes the
 * RoPE of tokens already in the cache (longrope switching from short to
 * long factors), so the sequence must be recomputed from its tokens to match
 * a full forward pass. Dynamic NTK changes at every step past max_pos;
 * like transformers' own KV-cached generation, it is not recomputed. */
bool hr_rope_needs_recompute(const hr_hparams *hp, int old_len, int new_len);

#endif
