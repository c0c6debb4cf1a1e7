#include "model/rstate.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

#define LEGACY (1ull << 63) /* keys of sequences known by their first block */

int hr__rstate_init(hr__rstate *rs, const hr_hparams *hp, hr_backend *be, int max_seqs,
                    hr_error *err) {
    memset(rs, 0, sizeof *rs);
    rs->be = be;
    rs->n_layers = hp->n_layers;
    if (!hp->n_linear)
        return 0;
    rs->n_slots = max_seqs;
    if (hp->arch->mamba2) {
        size_t c = (size_t)hp->mb_inner + 2 * (size_t)hp->mb_groups * hp->mb_state;
        rs->conv_slot = c * (hp->mb_conv - 1) * sizeof(float);
        rs->state_slot = (size_t)hp->mb_inner * hp->mb_state * sizeof(float);
    } else {
        size_t kd = (size_t)hp->ln_k_heads * hp->ln_k_dim,
               vd = (size_t)hp->ln_v_heads * hp->ln_v_dim;
        rs->conv_slot = (2 * kd + vd) * (hp->ln_conv - 1) * sizeof(float);
        rs->state_slot = (size_t)hp->ln_v_heads * hp->ln_k_dim * hp->ln_v_dim * sizeof(float);
    }
    rs->conv = calloc((size_t)hp->n_layers, sizeof *rs->conv);
    rs->state = calloc((size_t)hp->n_layers, sizeof *rs->state);
    rs->key = calloc((size_t)rs->n_slots, sizeof *rs->key);
    rs->next = calloc((size_t)rs->n_slots, sizeof *rs->next);
    rs->seq_slot = malloc((size_t)max_seqs * sizeof *rs->seq_slot);
    if (!rs->conv || !rs->state || !rs->key || !rs->next || !rs->seq_slot)
        return hr_err(err, HR_ENOMEM, "out of memory");
    size_t cb = rs->conv_slot ? rs->conv_slot * rs->n_slots : sizeof(float);
    for (int l = 0; l < hp->n_layers; l++)
        if (hp->layer_linear[l] &&
            (!(rs->conv[l] = be->ops->alloc(be, cb)) ||
             !(rs->state[l] = be->ops->alloc(be, rs->state_slot * rs->n_slots))))
            return hr_err(err, HR_ENOMEM, "cannot allocate the recurrent state of %d "
                          "sequences (%zu MiB a layer)", rs->n_slots,
                          ((rs->conv_slot + rs->state_slot) * rs->n_slots) >> 20);
    return 0;
}

void hr__rstate_deinit(hr__rstate *rs) {
    size_t cb = rs->conv_slot ? rs->conv_slot * rs->n_slots : sizeof(float);
    for (int l = 0; rs->conv && l < rs->n_layers; l++) {
        if (rs->conv[l])
            rs->be->ops->free(rs->be, rs->conv[l], cb);
        if (rs->state[l])
            rs->be->ops->free(rs->be, rs->state[l], rs->state_slot * rs->n_slots);
    }
    free(rs->conv);
    free(rs->state);
    free(rs->key);
    free(rs->next);
    free(rs->seq_slot);
    memset(rs, 0, sizeof *rs);
}

static uint64_t key_of(const hr_kv *kv, const hr_seq_blocks *sb) {
    if (sb->id)
        return sb->id & ~LEGACY;
    if (sb->n <= 0)
        return 0;
    return LEGACY | (uint64_t)(kv->gen[sb->table[0]] & 0x7fffffff) << 32 |
           (uint32_t)sb->table[0];
}

/* A legacy holder is gone once its first block is freed or reallocated. */
static bool slot_free(const hr__rstate *rs, const hr_kv *kv, int i) {
    uint64_t k = rs->key[i];
    if (!k)
        return true;
    if (!(k & LEGACY))
        return false;
    int32_t blk = (int32_t)(uint32_t)k;
    return blk >= kv->n_blocks || kv->refs[blk] == 0 ||
           (kv->gen[blk] & 0x7fffffff) != (uint32_t)(k >> 32 & 0x7fffffff);
}

static int find(const hr__rstate *rs, uint64_t key) {
    for (int i = 0; key && i < rs->n_slots; i++)
        if (rs->key[i] == key)
            return i;
    return -1;
}

int hr__rstate_assign(hr__rstate *rs, const hr_kv *kv, const hr_batch *b, hr_error *err) {
    if (!rs->n_slots)
        return 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int first = -1;
        for (int t = 0; t < b->n_tokens && first < 0; t++)
            if (b->seq[t] == s)
                first = b->pos[t];
        uint64_t key = key_of(kv, &b->seqs[s]);
        for (int j = 0; j < s; j++)
            if (key && key_of(kv, &b->seqs[j]) == key)
                return hr_err(err, HR_EINVAL, "sequences %d and %d share their first KV block "
                              "or their id (each needs its own recurrent state)", j, s);
        int slot = find(rs, key);
        if (slot >= 0 && slot_free(rs, kv, slot))
            slot = -1; /* a stale legacy holder of a block allocated again */
        if (first < 0) { /* no tokens this step */
            rs->seq_slot[s] = -1;
            continue;
        }
        if (first > 0) {
            if (slot < 0 || rs->next[slot] != first)
                return hr_err(err, HR_EINVAL, "sequence %d continues at position %d, but "
                              "its recurrent state is not here (it was at %d; this model's "
                              "state cannot be rewound)", s, first,
                              slot < 0 ? -1 : rs->next[slot]);
            rs->seq_slot[s] = slot;
            continue;
        }
        if (slot < 0)
            for (int i = 0; i < rs->n_slots && slot < 0; i++) {
                bool taken = false;
                for (int j = 0; j < s && !taken; j++)
                    taken = rs->seq_slot[j] == i;
                if (!taken && slot_free(rs, kv, i))
                    slot = i;
            }
        if (slot < 0)
            return hr_err(err, HR_EFULL, "no recurrent state slot free for sequence %d "
                          "(%d live sequences hold them)", s, rs->n_slots);
        rs->seq_slot[s] = slot;
    }
    return 0;
}

void hr__rstate_commit(hr__rstate *rs, const hr_kv *kv, const hr_batch *b) {
    for (int t = 0; rs->n_slots && t < b->n_tokens; t++) {
        int s = b->seq[t], slot = rs->seq_slot[s];
        rs->key[slot] = key_of(kv, &b->seqs[s]);
        rs->next[slot] = b->pos[t] + 1;
    }
}

size_t hr__rstate_bytes(const hr__rstate *rs) {
    size_t n = 0;
    for (int l = 0; rs->n_slots && l < rs->n_layers; l++)
        if (rs->state[l])
            n += rs->conv_slot + rs->state_slot;
    return n;
}

/* Copy slot i's state out (get) or in. */
static int move(hr__rstate *rs, int i, void *host, bool get, hr_error *err) {
    char *h = host;
    for (int l = 0; l < rs->n_layers; l++) {
        if (!rs->state[l])
            continue;
        char *c = (char *)rs->conv[l] + (size_t)i * rs->conv_slot;
        char *s = (char *)rs->state[l] + (size_t)i * rs->state_slot;
        int rc = get ? rs->be->ops->download(rs->be, h, c, rs->conv_slot, err)
                     : rs->be->ops->upload(rs->be, c, h, rs->conv_slot, err);
        if (!rc)
            rc = get ? rs->be->ops->download(rs->be, h + rs->conv_slot, s, rs->state_slot, err)
                     : rs->be->ops->upload(rs->be, s, h + rs->conv_slot, rs->state_slot, err);
        if (rc)
            return rc;
        h += rs->conv_slot + rs->state_slot;
    }
    return 0;
}

int hr__rstate_get(hr__rstate *rs, uint64_t id, int pos, void *dst, hr_error *err) {
    int i = find(rs, id & ~LEGACY);
    if (!id || i < 0 || rs->next[i] != pos)
        return hr_err(err, HR_EINVAL, "sequence %llu has no recurrent state at position %d",
                      (unsigned long long)id, pos);
    return move(rs, i, dst, true, err);
}

int hr__rstate_put(hr__rstate *rs, uint64_t id, int pos, const void *src, hr_error *err) {
    uint64_t key = id & ~LEGACY;
    int i = find(rs, key);
    for (int j = 0; j < rs->n_slots && i < 0; j++)
        if (!rs->key[j])
            i = j;
    if (!key || i < 0)
        return hr_err(err, HR_EFULL, "no recurrent state slot free for sequence %llu",
                      (unsigned long long)id);
    int rc = move(rs, i, (void *)src, false, err);
    if (rc)
        return rc;
    rs->key[i] = key;
    rs->next[i] = pos;
    return 0;
}

void hr__rstate_drop(hr__rstate *rs, uint64_t id) {
    int i = find(rs, id & ~LEGACY);
    if (id && i >= 0)
        rs->key[i] = 0;
}
