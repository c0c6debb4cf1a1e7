#include "model/kv.h"
#include "core/bigmem.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/turbo.h"

#include <stdlib.h>
#include <strings.h>
#include <string.h>

size_t hr_kv_block_bytes(const hr_hparams *hp, hr_dtype t) {
    return hr_kv_fmt_block_bytes(hp, &(hr_kv_fmt){.dtype = t});
}

/* Bytes of a K (v false) or V row in format f */
static size_t row_bytes(int hd, const hr_kv_fmt *f, bool v) {
    hr_dtype t = v && f->vown ? f->vdtype : f->dtype;
    if (t == HR_DTYPE_TURBO)
        return hr_turbo_kv_bytes(hd, v ? f->vbits : f->bits);
    if (t == HR_DTYPE_AFFINE && f->group <= 0) /* refused by init */
        return (size_t)hd * (size_t)f->bits / 8;
    return hr_kv_row_size(t, hd, f->bits, f->group);
}

size_t hr_kv_fmt_block_bytes(const hr_hparams *hp, const hr_kv_fmt *f) {
    return (size_t)hp->n_layers * hp->n_kv_heads * HR_KV_BLOCK *
           (row_bytes(hp->head_dim, f, false) + row_bytes(hp->head_dim, f, true));
}

int hr_kv_cache_type_pick(const char *name, const char *flag, hr_dtype *t, hr_error *err) {
    static const struct { const char *name; hr_dtype t; } names[] = {
        {"f32", HR_DTYPE_F32}, {"f16", HR_DTYPE_F16}, {"bf16", HR_DTYPE_BF16},
        {"q8_0", HR_DTYPE_Q8_0}, {"q4_0", HR_DTYPE_Q4_0}};
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(name, names[i].name)) {
            *t = names[i].t;
            return 0;
        }
    return hr_err(err, HR_EINVAL, "%s %s (f32, f16, bf16, q8_0, q4_0 are)", flag,
                  name ? name : "(none)");
}

/* One rate of --kv-quant at s (2, 2.5, 3, 3.5, 4): its r2, the end at *end */
static int rate(const char *s, const char **end) {
    static const char *const names[] = {"2.5", "3.5", "2", "3", "4"};
    static const int r2[] = {5, 7, 4, 6, 8};
    for (int i = 0; i < 5; i++) {
        size_t n = strlen(names[i]);
        if (!strncmp(s, names[i], n)) {
            *end = s + n;
            return r2[i];
        }
    }
    return 0;
}

int hr_kv_quant_parse(const char *spec, int *k2, int *v2, hr_error *err) {
    *k2 = *v2 = 0;
    if (!spec || !*spec)
        return 0;
    const char *p = spec;
    if (strncasecmp(p, "turbo", 5))
        goto bad;
    p += 5;
    if (!*p) {
        *k2 = *v2 = 7;
        return 0;
    }
    if (*p++ != ':' || !(*k2 = rate(p, &p)))
        goto bad;
    *v2 = *k2;
    if (*p == ',' && !(*v2 = rate(p + 1, &p)))
        goto bad;
    if (!*p)
        return 0;
bad:
    *k2 = *v2 = 0;
    return hr_err(err, HR_EINVAL, "--kv-quant %s (turbo, turbo:B or turbo:K_BITS,V_BITS; "
                  "bits 2, 2.5, 3, 3.5, 4)", spec);
}

int hr_kv_quant_check(long bits, long group, long start, hr_error *err) {
    if (bits != 0 && !hr_kvq_bits_ok((int)bits))
        return hr_err(err, HR_EINVAL, "--kv-bits %ld (2, 3, 4, 6, 8 are)", bits);
    if (!hr_kvq_group_ok((int)group))
        return hr_err(err, HR_EINVAL, "--kv-group-size %ld (32, 64, 128 are)", group);
    if (start < 0 || start > INT32_MAX)
        return hr_err(err, HR_EINVAL, "--quantized-kv-start %ld (0 or more tokens)", start);
    return 0;
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

/* Where head h's K (v false) or V row of slot `slot` of block `block` of
 * layer `layer` is */
static char *row_at(const hr_kv *kv, int layer, int32_t block, int h, int slot, bool v) {
    size_t at = (size_t)h * HR_KV_BLOCK + (size_t)slot;
    return v ? (char *)hr_kv_layer_v(kv, layer) + (size_t)block * hr_kv_vstride_bytes(kv) +
                   at * kv->vrow_bytes
             : (char *)hr_kv_layer_k(kv, layer) + (size_t)block * hr_kv_stride_bytes(kv) +
                   at * kv->row_bytes;
}

/* hr_kv_row_store's bits and group for K (v false) or V of head h of layer
 * `layer` (TURBO: the rate and the rotation) */
static int bits_of(const hr_kv *kv, bool v) {
    return v && kv->dtype == HR_DTYPE_TURBO ? kv->vbits : kv->bits;
}
static int group_of(const hr_kv *kv, int layer, int h, bool v) {
    return kv->dtype == HR_DTYPE_TURBO ? hr_turbo_kv_rot(layer, h, v) : kv->group;
}

void hr_kv_store(hr_kv *kv, int layer, int32_t block, int h, int slot, const float *k,
                 const float *v) {
    hr_kv_row_store(row_at(kv, layer, block, h, slot, false), k, kv->head_dim, kv->dtype,
                    kv->bits, group_of(kv, layer, h, false));
    hr_kv_row_store(row_at(kv, layer, block, h, slot, true), v, kv->head_dim, kv->vdtype,
                    bits_of(kv, true), group_of(kv, layer, h, true));
}

void hr_kv_load_row(const hr_kv *kv, int layer, int32_t block, int h, int slot, bool v,
                    float *out) {
    hr_kv_row_load(out, row_at(kv, layer, block, h, slot, v), kv->head_dim,
                   v ? kv->vdtype : kv->dtype, bits_of(kv, v), group_of(kv, layer, h, v));
}

/* Head h's K (v false) or V row of slot `slot` in a block's bytes as
 * hr_kv_block_read lays them out (per layer: K, then V) */
static char *buf_row(const hr_kv *kv, char *buf, int layer, int h, int slot, bool v) {
    size_t sb = hr_kv_stride_bytes(kv), vb = hr_kv_vstride_bytes(kv);
    size_t at = (size_t)h * HR_KV_BLOCK + (size_t)slot;
    return buf + (size_t)layer * (sb + vb) + (v ? sb + at * kv->vrow_bytes : at * kv->row_bytes);
}

/* hr_kv_convert of pools in device memory: each block's bytes come to the
 * host (hr_kv_block_read), its rows are converted there by the same
 * hr_kv_row_load / hr_kv_row_store (the GPU's records are the CPU's bytes:
 * kernels/cuda/kvq.cuh) and go back (hr_kv_block_write). All or nothing: on
 * a failed copy the new blocks are released and the sequence stays in src. */
static int convert_device(hr_kv *dst, hr_kv *src, const int32_t *from, const int *rows, int n,
                          int32_t *to, hr_error *err) {
    size_t sbytes = hr_kv_pool_block_bytes(src), dbytes = hr_kv_pool_block_bytes(dst);
    char *sbuf = malloc(sbytes), *dbuf = calloc(1, dbytes);
    int32_t *nb = malloc((size_t)n * sizeof *nb);
    int rc = 0;
    if (!sbuf || !dbuf || !nb) {
        rc = hr_err(err, HR_ENOMEM, "out of memory converting a sequence's KV");
        goto out;
    }
    for (int i = 0; i < n; i++)
        nb[i] = hr_kv_alloc(dst);
    float row[HR_ATTN_MAX_HEAD_DIM];
    for (int i = 0; i < n && !rc; i++) {
        if ((rc = hr_kv_block_read(src, from[i], sbuf, err)))
            break;
        for (int l = 0; l < src->n_layers; l++)
            for (int h = 0; h < src->n_kv_heads; h++)
                for (int sl = 0; sl < rows[i]; sl++)
                    for (int v = 0; v < 2; v++) {
                        hr_kv_row_load(row, buf_row(src, sbuf, l, h, sl, v), src->head_dim,
                                       v ? src->vdtype : src->dtype, bits_of(src, v),
                                       group_of(src, l, h, v));
                        hr_kv_row_store(buf_row(dst, dbuf, l, h, sl, v), row, dst->head_dim,
                                        v ? dst->vdtype : dst->dtype, bits_of(dst, v),
                                        group_of(dst, l, h, v));
                    }
        rc = hr_kv_block_write(dst, nb[i], dbuf, err);
    }
    for (int i = 0; i < n; i++) {
        if (rc) {
            hr_kv_unref(dst, nb[i]);
        } else {
            hr_kv_unref(src, from[i]);
            to[i] = nb[i]; /* to may be from */
        }
    }
out:
    free(sbuf);
    free(dbuf);
    free(nb);
    return rc;
}

int hr_kv_convert(hr_kv *dst, hr_kv *src, const int32_t *from, const int *rows, int n,
                  int32_t *to, hr_error *err) {
    HR_ASSERT(dst->be == src->be && dst->head_dim == src->head_dim &&
              dst->n_layers == src->n_layers && dst->n_kv_heads == src->n_kv_heads &&
              src->head_dim <= HR_ATTN_MAX_HEAD_DIM);
    if (dst->n_free < n)
        return hr_err(err, HR_ENOMEM, "KV pool: %d free blocks for a sequence of %d",
                      dst->n_free, n);
    if (src->be->device_mem)
        return convert_device(dst, src, from, rows, n, to, err);
    float row[HR_ATTN_MAX_HEAD_DIM];
    for (int i = 0; i < n; i++) {
        int32_t sb = from[i], db = hr_kv_alloc(dst); /* to may be from */
        for (int l = 0; l < src->n_layers; l++)
            for (int h = 0; h < src->n_kv_heads; h++)
                for (int s = 0; s < rows[i]; s++)
                    for (int v = 0; v < 2; v++) {
                        hr_kv_load_row(src, l, sb, h, s, v, row);
                        hr_kv_row_store(row_at(dst, l, db, h, s, v), row, dst->head_dim,
                                        v ? dst->vdtype : dst->dtype, bits_of(dst, v),
                                        group_of(dst, l, h, v));
                    }
        hr_kv_unref(src, sb);
        to[i] = db;
    }
    return 0;
}

int hr_kv_init(hr_kv *kv, const hr_hparams *hp, hr_dtype t, int n_blocks, hr_error *err) {
    return hr_kv_init_on(kv, hr_backend_cpu(), hp, t, n_blocks, err);
}

int hr_kv_init_on(hr_kv *kv, hr_backend *be, const hr_hparams *hp, hr_dtype t, int n_blocks,
                  hr_error *err) {
    return hr_kv_init_fmt(kv, be, hp, &(hr_kv_fmt){.dtype = t}, n_blocks, err);
}

/* Pools of host memory from POPULATE_MIN bytes have their pages made
 * resident ahead, lowest blocks first: a prompt restored from the SSD tier
 * right after a start would otherwise pay for committing them (most of its
 * time on a virtual machine, docs/kv-quant.md). Not a pool that would take
 * more than half of the memory the system has available: its pages are
 * committed as they are first used, as before (a budget larger than the
 * machine is not made resident for nothing). */
#define POPULATE_MIN ((size_t)64 << 20)

static void populate(hr_kv *kv) {
    size_t sb = hr_kv_stride_bytes(kv), vb = hr_kv_vstride_bytes(kv);
    size_t bytes = (size_t)kv->n_blocks * kv->n_layers * (sb + vb);
    if (kv->be->device_mem || bytes < POPULATE_MIN || kv->n_layers > 512 ||
        bytes > hr_mem_available() / 2)
        return;
    void *base[1024];
    size_t unit[1024];
    for (int l = 0; l < kv->n_layers; l++) {
        base[2 * l] = hr_kv_layer_k(kv, l);
        base[2 * l + 1] = hr_kv_layer_v(kv, l);
        unit[2 * l] = sb;
        unit[2 * l + 1] = vb;
    }
    kv->populate = hr_populate_start(base, unit, 2 * kv->n_layers, (size_t)kv->n_blocks);
}

int hr_kv_init_fmt(hr_kv *kv, hr_backend *be, const hr_hparams *hp, const hr_kv_fmt *f,
                   int n_blocks, hr_error *err) {
    hr_dtype t = f->dtype;
    memset(kv, 0, sizeof *kv);
    kv->be = be;
    if (n_blocks <= 0)
        return hr_err(err, HR_EINVAL, "kv pool needs at least one block");
    hr_dtype vt = f->vown ? f->vdtype : t;
    if (t == HR_DTYPE_TURBO || vt == HR_DTYPE_TURBO) {
        if (vt != t)
            return hr_err(err, HR_EINVAL, "--kv-quant turbo quantizes K and V "
                          "(not with --cache-type-k/-v)");
        if (!hr_turbo_kv_ok(hp->head_dim, f->bits) || !hr_turbo_kv_ok(hp->head_dim, f->vbits))
            return hr_err(err, HR_EINVAL, "--kv-quant turbo: this model's head_dim (%d) is "
                          "not 64, 128 or 256, or a rate is not 2, 2.5, 3, 3.5, 4 bits",
                          hp->head_dim);
        if ((long)hp->n_heads / hp->n_kv_heads * hp->head_dim > 4096)
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet: --kv-quant turbo with "
                          "more than 4096 query values per KV head (%d heads of %d over %d)",
                          hp->n_heads, hp->head_dim, hp->n_kv_heads);
        kv->bits = f->bits;
        kv->vbits = f->vbits;
    } else if (t == HR_DTYPE_AFFINE || vt == HR_DTYPE_AFFINE) {
        if (vt != t)
            return hr_err(err, HR_EINVAL, "--kv-bits quantizes K and V alike "
                          "(not with --cache-type-k/-v)");
        if (!hr_kvq_bits_ok(f->bits))
            return hr_err(err, HR_EINVAL, "--kv-bits %d (2, 3, 4, 6, 8 are)", f->bits);
        if (!hr_kvq_group_ok(f->group) || hp->head_dim % f->group ||
            hp->head_dim > HR_ATTN_MAX_HEAD_DIM)
            return hr_err(err, HR_EINVAL, "--kv-group-size %d must divide this model's "
                          "head_dim (%d) and be 32, 64 or 128", f->group, hp->head_dim);
        kv->bits = f->bits;
        kv->group = f->group;
    } else {
        for (int v = 0; v < 2; v++) {
            hr_dtype x = v ? vt : t;
            if (x != HR_DTYPE_F32 && x != HR_DTYPE_F16 && x != HR_DTYPE_BF16 &&
                x != HR_DTYPE_Q8_0 && x != HR_DTYPE_Q4_0)
                return hr_err(err, HR_EINVAL, "KV cache dtype %s (f32, f16, bf16, q8_0, q4_0 "
                              "are)", hr_dtype_name(x));
            if ((x == HR_DTYPE_Q8_0 || x == HR_DTYPE_Q4_0) &&
                (hp->head_dim % 32 || hp->head_dim > HR_ATTN_MAX_HEAD_DIM))
                return hr_err(err, HR_EINVAL, "--cache-type-%c %s: this model's head_dim (%d) "
                              "is not a multiple of 32", v ? 'v' : 'k',
                              x == HR_DTYPE_Q8_0 ? "q8_0" : "q4_0", hp->head_dim);
        }
    }
    kv->dtype = t;
    kv->vdtype = vt;
    kv->n_layers = hp->n_layers;
    kv->n_kv_heads = hp->n_kv_heads;
    kv->head_dim = hp->head_dim;
    kv->n_blocks = n_blocks;
    kv->row_bytes = row_bytes(hp->head_dim, f, false);
    kv->vrow_bytes = row_bytes(hp->head_dim, f, true);
    kv->block_stride = (size_t)hp->n_kv_heads * HR_KV_BLOCK *
                       (hr_kv_is_rec(t) ? kv->row_bytes : (size_t)hp->head_dim);
    kv->vblock_stride = (size_t)hp->n_kv_heads * HR_KV_BLOCK *
                        (hr_kv_is_rec(vt) ? kv->vrow_bytes : (size_t)hp->head_dim);
    size_t per = (size_t)hp->n_layers * n_blocks;
    kv->k = be->ops->alloc(be, per * hr_kv_stride_bytes(kv));
    kv->v = be->ops->alloc(be, per * hr_kv_vstride_bytes(kv));
    kv->refs = calloc((size_t)n_blocks, sizeof *kv->refs);
    kv->free_list = malloc((size_t)n_blocks * sizeof *kv->free_list);
    kv->gen = calloc((size_t)n_blocks, sizeof *kv->gen);
    if (!kv->k || !kv->v || !kv->refs || !kv->free_list || !kv->gen) {
        hr_kv_deinit(kv);
        return hr_err(err, HR_ENOMEM, "cannot allocate a KV pool of %d blocks "
                      "(%zu MiB on %s)", n_blocks, hr_kv_fmt_block_bytes(hp, f) * n_blocks >> 20,
                      be->name);
    }
    for (int i = 0; i < n_blocks; i++)
        kv->free_list[i] = n_blocks - 1 - i; /* pop gives 0, 1, 2, ... */
    kv->n_free = n_blocks;
    populate(kv);
    return 0;
}

void hr_kv_deinit(hr_kv *kv) {
    if (!kv)
        return;
    hr_populate_stop(kv->populate);
    size_t per = (size_t)kv->n_layers * kv->n_blocks;
    if (kv->be) {
        kv->be->ops->free(kv->be, kv->k, per * hr_kv_stride_bytes(kv));
        kv->be->ops->free(kv->be, kv->v, per * hr_kv_vstride_bytes(kv));
    }
    free(kv->refs);
    free(kv->free_list);
    free(kv->gen);
    memset(kv, 0, sizeof *kv);
}

int32_t hr_kv_alloc(hr_kv *kv) {
    if (kv->n_free == 0)
        return -1;
    int32_t b = kv->free_list[--kv->n_free];
    kv->refs[b] = 1;
    kv->gen[b]++;
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
    for (int l = 0; l < kv->n_layers; l++)
        for (int h = 0; h < kv->n_kv_heads; h++) /* a head's slots are contiguous */
            for (int v = 0; v < 2; v++) {
                /* a backend copy fails only with a lost device, which the
                 * next step reports */
                kv->be->ops->copy(kv->be, row_at(kv, l, dst, h, 0, v), row_at(kv, l, src, h, 0, v),
                                  (size_t)n * (v ? kv->vrow_bytes : kv->row_bytes), NULL);
            }
}

/* A block's K over the layers is a row a layer, n_blocks strides apart in
 * the pool (hr_kv_layer_k), and in buf each layer's K then V: one copy of
 * rows for the K, one for the V. */
static int block_io(const hr_kv *kv, int32_t block, void *buf, bool out, hr_error *err) {
    HR_ASSERT(block >= 0 && block < kv->n_blocks);
    size_t sb = hr_kv_stride_bytes(kv), vb = hr_kv_vstride_bytes(kv), lb = sb + vb;
    char *b = buf, *k = row_at(kv, 0, block, 0, 0, false), *v = row_at(kv, 0, block, 0, 0, true);
    /* a layer's rows apart: layer 1's address less layer 0's */
    size_t kp = (size_t)((char *)hr_kv_layer_k(kv, 1) - (char *)hr_kv_layer_k(kv, 0)),
           vp = (size_t)((char *)hr_kv_layer_v(kv, 1) - (char *)hr_kv_layer_v(kv, 0)),
           L = (size_t)kv->n_layers;
    const hr_backend_ops *o = kv->be->ops;
    int rc = out ? o->download_rows(kv->be, b, lb, k, kp, sb, L, err) ||
                       o->download_rows(kv->be, b + sb, lb, v, vp, vb, L, err)
                 : o->upload_rows(kv->be, k, kp, b, lb, sb, L, err) ||
                       o->upload_rows(kv->be, v, vp, b + sb, lb, vb, L, err);
    return rc ? HR_EIO : 0;
}

int hr_kv_block_read(const hr_kv *kv, int32_t block, void *buf, hr_error *err) {
    return block_io(kv, block, buf, true, err);
}

int hr_kv_block_write(hr_kv *kv, int32_t block, const void *buf, hr_error *err) {
    return block_io(kv, block, (void *)buf, false, err);
}
