/* Qwen2.5-VL's ViT and patch merger (model/vision_qwen.h). */
#include "model/vision_qwen.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/names.h"
#include "model/vit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EPS 1e-6f /* Qwen2RMSNorm(eps=1e-6) in the blocks and the merger */

typedef struct qblock {
    float *n1, *n2;                    /* (d) */
    hr_tensor qkv, proj, gate, up, down; /* (out, in) */
    float *qkv_b, *proj_b, *gate_b, *up_b, *down_b;
} qblock;

struct hr_vision_qwen {
    hr_vision_qwen_cfg c;
    hr_tensor patch;      /* (d, channels * tpatch * patch * patch): the conv as a product */
    qblock *blocks;       /* [depth] */
    float *ln_q;          /* (d) */
    hr_tensor m0, m2;     /* (4d, 4d), (d_out, 4d) for merge 2 */
    float *m0_b, *m2_b;
    float *inv_freq;      /* (head_dim / 4): the 2D rotary's frequencies */
};

/* ---- config --------------------------------------------------------------------------- */

static int geti(const json_t *o, const char *k, int dflt) {
    const json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

int hr_vision_qwen_cfg_from_json(hr_vision_qwen_cfg *c, const json_t *cfg, hr_error *err) {
    const json_t *vc = json_object_get(cfg, "vision_config");
    if (!json_is_object(vc))
        return hr_err(err, HR_ENOTFOUND, "config.json has no vision_config");
    memset(c, 0, sizeof *c);
    c->depth = geti(vc, "depth", 32);
    c->d = geti(vc, "hidden_size", 3584);
    c->n_heads = geti(vc, "num_heads", 16);
    c->d_ff = geti(vc, "intermediate_size", 3420);
    c->channels = geti(vc, "in_channels", geti(vc, "in_chans", 3));
    c->patch = geti(vc, "patch_size", 14);
    c->merge = geti(vc, "spatial_merge_size", 2);
    c->tpatch = geti(vc, "temporal_patch_size", 2);
    c->window = geti(vc, "window_size", 112);
    c->d_out = geti(vc, "out_hidden_size", 3584);
    const char *act = json_string_value(json_object_get(vc, "hidden_act"));
    if (act && strcmp(act, "silu"))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: vision hidden_act '%s' (silu is)",
                      act);
    if (c->depth < 0 || c->depth > HR_VQ_MAX_DEPTH || c->d < 1 || c->n_heads < 1 ||
        c->d % c->n_heads || (c->d / c->n_heads) % 4 || c->d_ff < 1 || c->channels != 3 ||
        c->patch < 1 || c->patch > 64 || c->merge < 1 || c->merge > 8 || c->tpatch < 1 ||
        c->tpatch > 8 || c->d_out < 1 || c->window < 1)
        return hr_err(err, HR_EFORMAT, "config.json: vision_config has out-of-range sizes");
    if (c->window % (c->merge * c->patch))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: window_size %d that is not a "
                      "multiple of %d (merged patches)", c->window, c->merge * c->patch);
    const json_t *fb = json_object_get(vc, "fullatt_block_indexes");
    if (!fb) {
        for (int i = 7; i < c->depth; i += 8)
            c->full[i] = true;
    } else if (!json_is_array(fb)) {
        return hr_err(err, HR_EFORMAT, "config.json: fullatt_block_indexes must be a list");
    }
    size_t i;
    const json_t *x;
    json_array_foreach(fb, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) >= c->depth)
            return hr_err(err, HR_EFORMAT, "config.json: fullatt_block_indexes names a block "
                          "outside 0..%d", c->depth - 1);
        c->full[json_integer_value(x)] = true;
    }
    return 0;
}

/* ---- binding -------------------------------------------------------------------------- */

int hr_vision_qwen_new(hr_vision_qwen **out, const hr_vision_qwen_cfg *c, const hr_weights *w,
                       hr_error *err) {
    *out = NULL;
    hr_vision_qwen *v = calloc(1, sizeof *v);
    if (!v || !(v->blocks = calloc((size_t)(c->depth ? c->depth : 1), sizeof(qblock))) ||
        !(v->inv_freq = malloc(sizeof(float) * (size_t)(c->d / c->n_heads / 4)))) {
        hr_vision_qwen_free(v);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    v->c = *c;
    int64_t d = c->d, f = c->d_ff, mm = (int64_t)c->merge * c->merge * d;
    int64_t pp = (int64_t)c->channels * c->tpatch * c->patch * c->patch;
    hr_vbind b = {.w = w, .err = err};
    hr__vbind_layout(&b, "vision tower", hr__qwen_visual_prefixes, "patch_embed.proj.weight");
    v->patch = hr__vbind_mat(&b, "patch_embed.proj.weight", d, pp);
    for (int l = 0; l < c->depth && !b.rc; l++) {
        qblock *B = &v->blocks[l];
        char n[160];
#define NAME(s) (snprintf(n, sizeof n, "blocks.%d.%s", l, s), n)
        B->n1 = hr__vbind_vec(&b, NAME("norm1.weight"), d, 0);
        B->n2 = hr__vbind_vec(&b, NAME("norm2.weight"), d, 0);
        B->qkv = hr__vbind_mat(&b, NAME("attn.qkv.weight"), 3 * d, d);
        B->qkv_b = hr__vbind_vec(&b, NAME("attn.qkv.bias"), 3 * d, 0);
        B->proj = hr__vbind_mat(&b, NAME("attn.proj.weight"), d, d);
        B->proj_b = hr__vbind_vec(&b, NAME("attn.proj.bias"), d, 0);
        B->gate = hr__vbind_mat(&b, NAME("mlp.gate_proj.weight"), f, d);
        B->gate_b = hr__vbind_vec(&b, NAME("mlp.gate_proj.bias"), f, 0);
        B->up = hr__vbind_mat(&b, NAME("mlp.up_proj.weight"), f, d);
        B->up_b = hr__vbind_vec(&b, NAME("mlp.up_proj.bias"), f, 0);
        B->down = hr__vbind_mat(&b, NAME("mlp.down_proj.weight"), d, f);
        B->down_b = hr__vbind_vec(&b, NAME("mlp.down_proj.bias"), d, 0);
#undef NAME
    }
    v->ln_q = hr__vbind_vec(&b, "merger.ln_q.weight", d, 0);
    v->m0 = hr__vbind_mat(&b, "merger.mlp.0.weight", mm, mm);
    v->m0_b = hr__vbind_vec(&b, "merger.mlp.0.bias", mm, 0);
    v->m2 = hr__vbind_mat(&b, "merger.mlp.2.weight", c->d_out, mm);
    v->m2_b = hr__vbind_vec(&b, "merger.mlp.2.bias", c->d_out, 0);
    if (b.rc) {
        hr_vision_qwen_free(v);
        return b.rc;
    }
    /* Qwen2_5_VisionRotaryEmbedding(head_dim / 2): theta 10000, in float32 */
    int dim = c->d / c->n_heads / 2;
    for (int j = 0; j < dim / 2; j++)
        v->inv_freq[j] = 1.0f / powf(10000.0f, (float)(2 * j) / (float)dim);
    *out = v;
    return 0;
}

void hr_vision_qwen_free(hr_vision_qwen *v) {
    if (!v)
        return;
    for (int l = 0; v->blocks && l < v->c.depth; l++) {
        qblock *B = &v->blocks[l];
        float *own[] = {B->n1, B->n2, B->qkv_b, B->proj_b, B->gate_b, B->up_b, B->down_b};
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
            free(own[i]);
    }
    free(v->blocks);
    free(v->ln_q);
    free(v->m0_b);
    free(v->m2_b);
    free(v->inv_freq);
    free(v);
}

const hr_vision_qwen_cfg *hr_vision_qwen_config(const hr_vision_qwen *v) { return &v->c; }

/* ---- patches -------------------------------------------------------------------------- */

/* row r's patch (py, px) in a grid gw patches wide: merge x merge blocks row
 * by row, a block's patches row by row */
static void patch_of(const hr_vision_qwen_cfg *c, int gw, int r, int *py, int *px) {
    int m = c->merge, blk = r / (m * m), in = r % (m * m), bw = gw / m;
    *py = blk / bw * m + in / m;
    *px = blk % bw * m + in % m;
}

void hr_vision_qwen_patchify(const hr_vision_qwen_cfg *c, const float *pixels, int h, int w,
                             float *rows) {
    int P = c->patch, gh = h / P, gw = w / P, n = gh * gw;
    size_t pp = (size_t)c->channels * c->tpatch * P * P;
    for (int r = 0; r < n; r++) {
        int py, px;
        patch_of(c, gw, r, &py, &px);
        float *o = rows + (size_t)r * pp;
        for (int ch = 0; ch < c->channels; ch++)
            for (int t = 0; t < c->tpatch; t++) /* an image is its frame tpatch times */
                for (int ky = 0; ky < P; ky++)
                    memcpy(o + (((size_t)ch * c->tpatch + t) * P + ky) * P,
                           pixels + ((size_t)ch * h + (size_t)py * P + ky) * w + (size_t)px * P,
                           sizeof(float) * (size_t)P);
    }
}

/* ---- the forward pass ----------------------------------------------------------------- */

static void rmsnorm_rows(float *y, const float *x, const float *w, int n, int d) {
    for (int i = 0; i < n; i++)
        hr_rmsnorm(y + (size_t)i * d, x + (size_t)i * d, w, 0.0f, d, EPS);
}

int hr_vision_qwen_encode(hr_vision_qwen *v, hr_pool *pool, const float *rows, int gh, int gw,
                          float *features, float *hidden, hr_error *err) {
    const hr_vision_qwen_cfg *c = &v->c;
    int m = c->merge;
    if (gh < m || gw < m || gh % m || gw % m)
        return hr_err(err, HR_EINVAL, "a %dx%d patch grid is not whole %dx%d merges", gh, gw, m,
                      m);
    int n = gh * gw, d = c->d, f = c->d_ff, hd = d / c->n_heads, half = hd / 2, q4 = hd / 4;
    int pp = c->channels * c->tpatch * c->patch * c->patch, mm = m * m * d, nm = n / (m * m);
    float *x = malloc(sizeof(float) * (size_t)n * d), *h = malloc(sizeof(float) * (size_t)n * d);
    float *qkv = malloc(sizeof(float) * (size_t)n * 3 * d);
    float *a = malloc(sizeof(float) * (size_t)n * d);
    float *g = malloc(sizeof(float) * (size_t)n * f), *u = malloc(sizeof(float) * (size_t)n * f);
    float *cs = malloc(sizeof(float) * (size_t)n * hd), *y = malloc(sizeof(float) * (size_t)nm * mm);
    int32_t *win = malloc(sizeof(int32_t) * (size_t)n);
    int rc = 0;
    if (!x || !h || !qkv || !a || !g || !u || !cs || !y || !win) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    /* each patch's rotary table (rows' height then width frequencies) and
     * window: merged patches in windows of vw x vw */
    int vw = c->window / m / c->patch, nwx = (gw / m + vw - 1) / vw;
    for (int r = 0; r < n; r++) {
        int py, px;
        patch_of(c, gw, r, &py, &px);
        float *t = cs + (size_t)r * hd;
        for (int i = 0; i < half; i++) {
            float ang = (float)(i < q4 ? py : px) * v->inv_freq[i % q4];
            t[i] = cosf(ang);
            t[half + i] = sinf(ang);
        }
        win[r] = (py / m / vw) * nwx + (px / m / vw);
    }
    hr_matmul(pool, x, d, rows, pp, n, &v->patch, NULL);
    float scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < c->depth; l++) {
        const qblock *B = &v->blocks[l];
        rmsnorm_rows(h, x, B->n1, n, d);
        hr_matmul(pool, qkv, 3 * d, h, d, n, &B->qkv, B->qkv_b);
        for (int r = 0; r < n; r++) { /* q and k rotate, v does not */
            hr_rope(qkv + (size_t)r * 3 * d, c->n_heads, hd, hd, cs + (size_t)r * hd, false);
            hr_rope(qkv + (size_t)r * 3 * d + d, c->n_heads, hd, hd, cs + (size_t)r * hd, false);
        }
        if ((rc = hr__vit_attention(pool, qkv, qkv + d, qkv + 2 * d, 3 * d, a, d, n, c->n_heads,
                                    hd, scale, c->full[l] ? NULL : win, err)))
            goto done;
        hr_matmul(pool, h, d, a, d, n, &B->proj, B->proj_b);
        for (size_t i = 0; i < (size_t)n * d; i++)
            x[i] += h[i];
        rmsnorm_rows(h, x, B->n2, n, d);
        hr_matmul(pool, g, f, h, d, n, &B->gate, B->gate_b);
        hr_matmul(pool, u, f, h, d, n, &B->up, B->up_b);
        hr_silu_mul(g, u, n * f);
        hr_matmul(pool, h, d, g, f, n, &B->down, B->down_b);
        for (size_t i = 0; i < (size_t)n * d; i++)
            x[i] += h[i];
    }
    if (hidden)
        memcpy(hidden, x, sizeof(float) * (size_t)n * d);
    /* the merger: a merge block's m*m consecutive rows side by side */
    rmsnorm_rows(h, x, v->ln_q, n, d);
    hr_matmul(pool, y, mm, h, mm, nm, &v->m0, v->m0_b);
    hr_gelu_mul(y, NULL, nm * mm);
    hr_matmul(pool, features, c->d_out, y, mm, nm, &v->m2, v->m2_b);
done:
    free(x);
    free(h);
    free(qkv);
    free(a);
    free(g);
    free(u);
    free(cs);
    free(y);
    free(win);
    return rc;
}

/* ---- the text model's positions ------------------------------------------------------- */

int hr_vision_qwen_rope_pos(int n, const int *start, const int *lh, const int *lw,
                            int n_images, int32_t *pos3) {
    int next = 0, k = 0;
    for (int t = 0; t < n;) {
        if (k < n_images && t == start[k]) {
            for (int r = 0; r < lh[k]; r++)
                for (int c = 0; c < lw[k] && t < n; c++, t++) {
                    pos3[3 * t] = next;
                    pos3[3 * t + 1] = next + r;
                    pos3[3 * t + 2] = next + c;
                }
            next += lh[k] > lw[k] ? lh[k] : lw[k];
            k++;
            continue;
        }
        pos3[3 * t] = pos3[3 * t + 1] = pos3[3 * t + 2] = next++;
        t++;
    }
    return next;
}
