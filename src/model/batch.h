/* hr_batch: one flattened, ragged batch for one forward call. Prefill
 * chunks and decode steps of many sequences go through together.
 *
 * Tokens of one sequence appear in increasing position order; token t
 * writes its K/V at pos[t] of sequence seq[t] and attends to every earlier
 * position of that sequence already in the cache or in this batch. The
 * sequence's block table must cover pos[t]. */
#ifndef HR_MODEL_BATCH_H
#define HR_MODEL_BATCH_H

#include <stdint.h>

typedef struct hr_seq_blocks {
    const int32_t *table; /* block ids, in position order */
    int n;                /* covers positions [0, n * HR_KV_BLOCK) */
    int rope_len;         /* sequence length for length-dependent RoPE
                           * (dynamic, longrope); 0: last position + 1 */
    uint64_t id;          /* recurrent layers: who holds the state (nonzero,
                           * unique while the sequence lives; 0: the first
                           * block says; model/rstate.h) */
} hr_seq_blocks;

struct hr_adapter;

typedef struct hr_batch {
    int n_tokens;
    const int32_t *token;      /* [n_tokens] */
    const int32_t *pos;        /* [n_tokens] position within its sequence */
    const int32_t *seq;        /* [n_tokens] index into seqs */
    const uint8_t *logits;     /* [n_tokens] nonzero: return this row's logits */
    int n_seqs;
    const hr_seq_blocks *seqs; /* [n_seqs] */
    /* [n_seqs] each sequence's LoRA adapter (model/adapter.h; NULL: the
     * base model), or NULL: none in this batch */
    const struct hr_adapter *const *adapter;
    /* Images (model/vision.h), or NULL when the batch has none: token t
     * with embd_row[t] >= 0 takes row embd_row[t] of embd instead of its
     * token's embedding; attn_end[t] > pos[t] + 1 lets it also see the later
     * positions of its sequence below attn_end[t] (the tokens of one image
     * see each other both ways, as Gemma-3's token_type_ids mask does; those
     * positions must be in this batch or already in the cache). */
    const float *embd;        /* [rows][d_model], host memory */
    const int32_t *embd_row;  /* [n_tokens] */
    const int32_t *attn_end;  /* [n_tokens], or NULL: causal */
    /* M-RoPE (hp.mrope_section, Qwen2.5-VL): token t's (temporal, height,
     * width) rotary positions at rope_pos[3t..3t+2], or NULL: pos[t] for
     * all three. Positions in the cache stay pos[t]. */
    const int32_t *rope_pos;
    /* A second KV pool (another format: sequences whose KV was converted
     * past --quantized-kv-start, docs/kv-quant.md), or NULL: every
     * sequence's blocks are in the forward's kv. Tokens [kv2_from,
     * n_tokens) belong to sequences whose block tables name blocks of kv2;
     * no sequence has tokens on both sides. CPU only. */
    struct hr_kv *kv2;
    int kv2_from;
    /* The residual window (--kv-residual, docs/kv-quant.md), or NULL: every
     * row is stored in the forward's kv and also, at full precision, in
     * resid_kv (F32, F16, BF16): sequence s's block b at rtables[s][b]
     * (-1: none, indexed as seqs[s].table); token t
     * reads the keys of its own window, positions [pos / resid * resid,
     * + resid), from there, the others from kv. resid: a multiple of
     * HR_KV_BLOCK. Not with kv2. CPU only. */
    struct hr_kv *resid_kv;
    const int32_t *const *rtables; /* [n_seqs] */
    int resid;
} hr_batch;

#endif
