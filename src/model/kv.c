#include "model/kv.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"

#include <stdlib.h>
#include <strings.h>
#include <string.h>

size_t hr_kv_block_bytes(const hr_hparams *hp, hr_dtype t) {
    return 2 * (size_t)hp->n_layers * hp->n_kv_heads * HR_KV_BLOCK * hp->head_dim *
           hr_dtype_size(t);
}

int hr_kv_dtype_pick(const char *name, bool gguf, hr_dtype *t, hr_error *err) {
    static const struct { const char *name; hr_dtype t; } names[] = {
        {"f32", HR_DTYPE_F32}, {"f16", HR_DTYPE_F16}, {"bf16", HR_DTYPE_BF16}};
    *t = gguf ? HR_DTYPE_F16 : HR_DTYPE_F32;
    if (!name || !strcasecmp(name, "auto"))
        return 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(name, names[i].name)) {
            *t = names[i].t;
            return 0;
        }
    return hr_err(err, HR_EINVAL, "--kv-dtype %s (auto, f32, f16, bf16 are)", name);
}

void hr_kv_store(hr_kv *kv, int layer, int32_t block, int h, int slot, const float *k,
                 const float *v) {
    size_t es = hr_dtype_size(kv->dtype), hd = (size_t)kv->head_dim;
    size_t off = (size_t)block * hr_kv_stride_bytes(kv) +
                 ((size_t)h * HR_KV_BLOCK + slot) * hd * es;
    hr_store_row((char *)hr_kv_layer_k(kv, layer) + off, k, kv->head_dim, kv->dtype);
    hr_store_row((char *)hr_kv_layer_v(kv, layer) + off, v, kv->head_dim, kv->dtype);
}

int hr_kv_init(hr_kv *kv, const hr_hparams *hp, hr_dtype t, int n_blocks, hr_error *err) {
    return hr_kv_init_on(kv, hr_backend_cpu(), hp, t, n_blocks, err);
}

int hr_kv_init_on(hr_kv *kv, hr_backend *be, const hr_hparams *hp, hr_dtype t, int n_blocks,
                  hr_error *err) {
    memset(kv, 0, sizeof *kv);
    kv->be = be;
    if (n_blocks <= 0)
        return hr_err(err, HR_EINVAL, "kv pool needs at least one block");
    if (t != HR_DTYPE_F32 && t != HR_DTYPE_F16 && t != HR_DTYPE_BF16)
        return hr_err(err, HR_EINVAL, "KV cache dtype %s (f32, f16, bf16 are)",
                      hr_dtype_name(t));
    kv->dtype = t;
    kv->n_layers = hp->n_layers;
    kv->n_kv_heads = hp->n_kv_heads;
    kv->head_dim = hp->head_dim;
    kv->n_blocks = n_blocks;
    kv->block_stride = (size_t)hp->n_kv_heads * HR_KV_BLOCK * hp->head_dim;
    size_t bytes = (size_t)hp->n_layers * n_blocks * hr_kv_stride_bytes(kv);
    kv->k = be->ops->alloc(be, bytes);
    kv->v = be->ops->alloc(be, bytes);
    kv->refs = calloc((size_t)n_blocks, sizeof *kv->refs);
    kv->free_list = malloc((size_t)n_blocks * sizeof *kv->free_list);
    if (!kv->k || !kv->v || !kv->refs || !kv->free_list) {
        hr_kv_deinit(kv);
        return hr_err(err, HR_ENOMEM, "cannot allocate a KV pool of %d blocks "
                      "(%zu MiB on %s)", n_blocks, hr_kv_block_bytes(hp, t) * n_blocks >> 20,
                      be->name);
    }
    for (int i = 0; i < n_blocks; i++)
        kv->free_list[i] = n_blocks - 1 - i; /* pop gives 0, 1, 2, ... */
    kv->n_free = n_blocks;
    return 0;
}

void hr_kv_deinit(hr_kv *kv) {
    if (!kv)
        return;
    size_t bytes = (size_t)kv->n_layers * kv->n_blocks * hr_kv_stride_bytes(kv);
    if (kv->be) {
        kv->be->ops->free(kv->be, kv->k, bytes);
        kv->be->ops->free(kv->be, kv->v, bytes);
    }
    free(kv->refs);
    free(kv->free_list);
    memset(kv, 0, sizeof *kv);
}

int32_t hr_kv_alloc(hr_kv *kv) {
    if (kv->n_free == 0)
        return -1;
    int32_t b = kv->free_list[--kv->n_free];
    kv->refs[b] = 1;
    return b;
}

void hr_kv_ref(hr_kv *kv, int32_t block) {
    HR_ASSERT(block >= 0 && block < kv->n_blocks && kv->refs[block] > 0);
    kv->refs[block]++;
}

void hr_kv_unref(hr_kv *kv, int32_t block) {
    HR_ASSERT(block >= 0 && block < kv->n_blocks && kv->refs[block] > 0);
    if (--kv->refs[block] == 0)
        kv->free_list[kv->n_free++] = block;
}

void hr_kv_copy_rows(hr_kv *kv, int32_t dst, int32_t src, int n) {
    HR_ASSERT(dst != src && kv->refs[dst] > 0 && kv->refs[src] > 0);
    HR_ASSERT(n > 0 && n <= HR_KV_BLOCK);
    size_t es = hr_dtype_size(kv->dtype), hd = (size_t)kv->head_dim;
    size_t bytes = (size_t)n * hd * es, sb = hr_kv_stride_bytes(kv);
    for (int l = 0; l < kv->n_layers; l++) {
        char *k = hr_kv_layer_k(kv, l), *v = hr_kv_layer_v(kv, l);
        for (int h = 0; h < kv->n_kv_heads; h++) { /* a head's slots are contiguous */
            size_t off = (size_t)h * HR_KV_BLOCK * hd * es;
            /* a backend copy fails only with a lost device, which the
             * next step reports */
            kv->be->ops->copy(kv->be, k + dst * sb + off, k + src * sb + off, bytes, NULL);
            kv->be->ops->copy(kv->be, v + dst * sb + off, v + src * sb + off, bytes, NULL);
        }
    }
}

static int block_io(const hr_kv *kv, int32_t block, void *buf, bool out, hr_error *err) {
    HR_ASSERT(block >= 0 && block < kv->n_blocks);
    size_t sb = hr_kv_stride_bytes(kv);
    char *b = buf;
    for (int l = 0; l < kv->n_layers; l++) {
        char *k = (char *)hr_kv_layer_k(kv, l) + (size_t)block * sb;
        char *v = (char *)hr_kv_layer_v(kv, l) + (size_t)block * sb;
        int rc = out ? kv->be->ops->download(kv->be, b, k, sb, err) ||
                           kv->be->ops->download(kv->be, b + sb, v, sb, err)
                     : kv->be->ops->upload(kv->be, k, b, sb, err) ||
                           kv->be->ops->upload(kv->be, v, b + sb, sb, err);
        if (rc)
            return HR_EIO;
        b += 2 * sb;
    }
    return 0;
}

int hr_kv_block_read(const hr_kv *kv, int32_t block, void *buf, hr_error *err) {
    return block_io(kv, block, buf, true, err);
}

int hr_kv_block_write(hr_kv *kv, int32_t block, const void *buf, hr_error *err) {
    return block_io(kv, block, (void *)buf, false, err);
}
