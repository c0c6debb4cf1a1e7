/* A step's batch (engine_int.h): the decode rows and prefill chunks of the
 * running sequences, up to the step's token and logits-row budgets, in the
 * b_* arrays. Engine thread. */
#include "engine/engine_int.h"
#include "model/rope.h"

#include <string.h>

/* Hybrid models with the prompt cache: the block boundary inside the prompt
 * whose state is kept (a later request reuses all but the last token of an
 * equal prompt, or the whole of it when it continues it); 0: none. */
int hr__snap_point(const hr_engine *e, const hr_request *r) {
    if (!e->state_bytes)
        return 0;
    int upto = r->score_from ? r->score_from - 1 : r->n_prompt - 1;
    return upto / HR_KV_BLOCK * HR_KV_BLOCK;
}

/* Decode rows (side: the requests of e->kv, false, or of e->kvq, true): the
 * last token of every sequence one token behind, then its drafts (spec.h),
 * one logits row each. */
static void decode_rows(hr_engine *e, bool side, int *T, int *n_rows, int *n_decode) {
    for (int i = 0; i < e->n_running; i++) {
        hr_request *r = e->running[i];
        int known = r->n_prompt + r->n_steps;
        if (r->conv != side || known - r->len != 1 || r->embed) /* embed: all prompt */
            continue;
        for (int j = 0; j <= r->spec.n_draft; j++) {
            int t = (*T)++;
            e->b_tok[t] = j ? r->spec.draft[j - 1] : hr__token_at(r, r->len);
            e->b_pos[t] = r->len + j;
            if (e->b_rope) {
                hr__rope3_at(r, r->len + j, e->b_rope + 3 * (size_t)t);
                e->b_has_rope |= r->rope_delta != 0;
            }
            if (e->b_end) {
                e->b_end[t] = r->len + j + 1;
                e->b_embd_row[t] = -1;
            }
            e->b_seq[t] = i;
            e->b_want[t] = 1;
            e->b_first[*n_rows] = j == 0;
            e->b_row_score[*n_rows] = -1;
            e->b_row_req[(*n_rows)++] = r;
        }
        (*n_decode)++;
    }
}

/* The tokens and rows decode_rows(side) will take */
static void decode_need(const hr_engine *e, bool side, int *tokens) {
    *tokens = 0;
    for (int i = 0; i < e->n_running; i++) {
        const hr_request *r = e->running[i];
        if (r->conv == side && r->n_prompt + r->n_steps - r->len == 1 && !r->embed)
            *tokens += 1 + r->spec.n_draft;
    }
}

/* Prefill chunks of side's requests up to the step's token budget, less
 * `keep` tokens and rows (the other side's decode rows, after these). */
static void prefill_rows(hr_engine *e, bool side, int keep, int *T, int *n_rows,
                         int *n_prefill) {
    int max_tokens = e->max_tokens_step - keep, max_rows = e->max_rows - keep;
    for (int i = 0; i < e->n_running && *T < max_tokens; i++) {
        hr_request *r = e->running[i];
        int known = r->n_prompt + r->n_steps;
        if (r->conv != side || known - r->len <= (r->embed ? 0 : 1))
            continue;
        int c = known - r->len, room = max_tokens - *T;
        if (c > room && e->m->hp.arch->encoder)
            continue; /* an encoder's input goes in one step: the next one */
        if (c > room)
            c = room;
        int snap = hr__snap_point(e, r); /* a step ends there: its state is kept */
        if (r->len < snap && r->len + c > snap)
            c = snap - r->len;
        /* and at kv_start: the sequence converts holding exactly kv_start
         * tokens, whatever the step's other rows (convert) */
        if (e->kvq.n_blocks && !r->conv && r->len < e->kv_start && r->len + c > e->kv_start)
            c = e->kv_start - r->len;
        if (r->n_images && !(c = hr__image_chunk(e, r, c, room)))
            continue; /* the next image does not fit in this step */
        int k = 0;
        for (; k < c; k++) {
            int p = r->len + k, t = *T;
            /* the logits of position p predict token p + 1 */
            bool sample = p == known - 1 && r->limit > 0;
            bool score = r->score_from && r->n_steps == 0 && p + 1 >= r->score_from &&
                         p + 1 < r->n_prompt;
            if ((sample || score) && *n_rows == max_rows)
                break; /* the rest of the chunk waits for the next step */
            e->b_tok[t] = hr__token_at(r, p);
            e->b_pos[t] = p;
            if (e->b_rope) {
                hr__rope3_at(r, p, e->b_rope + 3 * (size_t)t);
                e->b_has_rope |= r->rope3 != NULL;
            }
            e->b_seq[t] = i;
            e->b_want[t] = r->embed ? 2 : sample || score;
            if (e->b_end) { /* an image's token: its features, its span */
                int row;
                e->b_end[t] = hr__image_end(e, r, p, &row);
                e->b_embd_row[t] = row < 0 ? -1 : t;
                if (row >= 0) {
                    size_t d = (size_t)e->m->hp.d_model;
                    memcpy(e->b_embd + (size_t)t * d, r->feat + (size_t)row * d, d * sizeof(float));
                    e->b_has_img = true;
                }
            }
            if (e->b_want[t] == 1) {
                e->b_first[*n_rows] = 1; /* a scoring row stands alone too */
                e->b_row_score[*n_rows] = score ? p + 1 : -1;
                e->b_row_req[(*n_rows)++] = r;
            }
            (*T)++;
        }
        *n_prefill += k;
    }
}

/* The batch: a decode row for every sequence one token behind, then prefill
 * chunks up to the step's token budget; the sequences of e->kv first, then
 * those converted into e->kvq (from e->b_kv2_from on: hr_batch.kv2). A
 * sequence's tokens [len, known) are not in the KV yet: one is a decode
 * row, more are a prefill (a new prompt, or a sequence recomputed because
 * its RoPE changed: longrope past its original length). Fills the b_*
 * arrays and b_row_req (the request of each logits row, e->n_rows of
 * them); returns the number of tokens. */
int hr__build_batch(hr_engine *e, int *n_prefill, int *n_decode) {
    int T = 0, n_rows = 0, keep;
    *n_prefill = *n_decode = 0;
    e->b_has_img = e->b_has_rope = false;
    for (int i = 0; i < e->n_running; i++) {
        hr_request *r = e->running[i];
        int known = r->n_prompt + r->n_steps;
        if (r->len > 0 && hr_rope_needs_recompute(&e->m->hp, r->rope_len, known)) {
            r->len = 0; /* same blocks, same positions: rewritten in place */
            hr__resid_trim(e, r, false);
        }
        r->rope_len = known;
        r->outcome = HR_ROW_NONE;
        e->b_seqs[i] = (hr_seq_blocks){r->blocks, r->n_blocks, known, r->seq_id};
        e->b_rtables[i] = r->rblocks;
        e->b_adapter[i] = r->adapter;
    }
    decode_need(e, true, &keep);
    decode_rows(e, false, &T, &n_rows, n_decode);
    prefill_rows(e, false, keep, &T, &n_rows, n_prefill);
    e->b_kv2_from = T;
    decode_rows(e, true, &T, &n_rows, n_decode);
    prefill_rows(e, true, 0, &T, &n_rows, n_prefill);
    e->n_rows = n_rows;
    return T;
}

