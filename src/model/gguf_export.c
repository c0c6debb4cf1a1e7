/* Writing a model as one GGUF file (hr_gguf_export, gguf_model.h): the
 * metadata llama.cpp reads, the tensors under its names and types, gemma's
 * norms with the 1 added; experts stacked (gguf_moe.c), gpt-oss
 * (gguf_gptoss.c) and the hybrid families (gguf_hybrid.c). */
#include "model/gguf_model.h"
#include "core/error.h"
#include "core/log.h"
#include "io/gguf_write.h"
#include "kernels/cpu/quant.h"
#include "model/config.h"
#include "model/gguf_names.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef hr__gguf_bufs bufs;

void *hr__gguf_keep(bufs *b, size_t size) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        void **p = realloc(b->p, cap * sizeof *p);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = cap;
    }
    void *q = malloc(size ? size : 1);
    if (q)
        b->p[b->n++] = q;
    return q;
}

/* llama.cpp's LlamaModel.permute: within each head, row s*hd/2 + i moves
 * to 2*i + s. Returns the source row of destination row r. */
int64_t hr_gguf_unpermute_row(int64_t r, int head_dim) {
    int64_t h = r / head_dim, o = r % head_dim;
    return h * head_dim + (o % 2) * (head_dim / 2) + o / 2;
}

/* llama3 rope: per-frequency divisors, as convert_hf_to_gguf.py computes. */
static void llama3_factors(const hr_rope_params *rp, int dim, float *out) {
    double lo_wl = rp->original_max_pos / rp->low_freq_factor;
    double hi_wl = rp->original_max_pos / rp->high_freq_factor;
    for (int i = 0; i < dim / 2; i++) {
        double freq = 1.0 / pow(rp->theta, (2.0 * i) / dim);
        double wl = 2 * M_PI / freq;
        if (wl < hi_wl)
            out[i] = 1.0f;
        else if (wl > lo_wl)
            out[i] = (float)rp->factor;
        else {
            double smooth = (rp->original_max_pos / wl - rp->low_freq_factor) /
                            (rp->high_freq_factor - rp->low_freq_factor);
            out[i] = (float)(1.0 / ((1 - smooth) / rp->factor + smooth));
        }
    }
}

/* The ARCHS row hearth exports model_type mt as (mistral as llama), or -1. */
static int arch_of_model_type(const char *mt) {
    if (!strcmp(mt, "mistral") || !strcmp(mt, "mixtral"))
        mt = "llama";
    for (size_t i = 0; i < hr__gguf_n_archs; i++)
        if (!strcmp(mt, hr__gguf_archs[i].model_type))
            return (int)i;
    return -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* convert_hf_to_gguf.py writes gemma's norm weights ("norm.weight"
 * tensors) with the 1 added, which llama.cpp multiplies by as they are: in
 * f32 for f32 and bf16 sources (widened first), rounded to f16 for f16 ones
 * (torch adds in the tensor's dtype); the file stores them as F32. */
static float shifted(float x, float offset, hr_dtype src) {
    x += offset;
    return src == HR_DTYPE_F16 ? hr_f16_to_f32(hr_f32_to_f16(x)) : x;
}

/* A gemma model in the keys llama.cpp reads, beyond the common ones; a
 * model llama.cpp would run differently (it derives the attention scale,
 * the sliding layers and the local RoPE rather than reading them) is
 * HR_EUNSUPPORTED. */
static int gemma_export(hr_gguf_w *g, const char *arch, hr__gguf_family f, const hr_hparams *hp,
                        const json_t *cfg, const hr_weights *w, hr_error *err) {
    const char *mt = hp->arch->model_type;
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
#define NOPE(...) hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of " __VA_ARGS__)
    if (hp->act != HR_ACT_GELU_TANH)
        return NOPE("%s with an activation other than gelu_pytorch_tanh (llama.cpp's %s "
                    "runs tanh GELU)", mt, arch);
    if (f != FAM_GEMMA3 && !hp->tie_embeddings && hr_weights_find(w, "lm_head.weight"))
        return NOPE("%s with an untied lm_head (llama.cpp's %s uses token_embd as the "
                    "output matrix)", mt, arch);
    if (hp->rot_dim != hp->head_dim)
        return NOPE("%s with partial rotary embeddings", mt);
    if (hp->rope.type != HR_ROPE_DEFAULT && hp->rope.type != HR_ROPE_LINEAR)
        return NOPE("%s with this rope scaling (default and linear are)", mt);
    int qpas = f == FAM_GEMMA ? hp->head_dim
                              : hr__gguf_gemma_qpas(f, hp->n_layers, hp->d_model, hp->n_heads,
                                                    hp->head_dim);
    if (hp->attn_scale != (float)(1.0 / sqrt(qpas))) {
        const json_t *q = json_object_get(cfg, "query_pre_attn_scalar");
        double have = json_is_number(q) ? json_number_value(q)
                                        : 1.0 / ((double)hp->attn_scale * hp->attn_scale);
        return NOPE("%s with query_pre_attn_scalar %g (llama.cpp's %s takes %d, %s, for a "
                    "%d-layer model)", mt, have, arch, qpas, qpas == hp->head_dim ? "head_dim"
                    : "hidden_size / num_attention_heads", hp->n_layers);
    }
    /* logit softcapping: llama.cpp's gemma2 always applies both (50 and 30
     * when the file has no value), gemma3 only the final one */
    if (f == FAM_GEMMA2 && (hp->attn_softcap == 0 || hp->final_softcap == 0))
        return NOPE("gemma2 without attention and final logit softcapping (llama.cpp's "
                    "gemma2 always applies both)");
    if (f != FAM_GEMMA2 && hp->attn_softcap != 0)
        return NOPE("%s with attention logit softcapping (llama.cpp's %s has none)", mt, arch);
    if (f == FAM_GEMMA && hp->final_softcap != 0)
        return NOPE("gemma with final logit softcapping (llama.cpp's gemma has none)");
    if (hp->attn_softcap != 0)
        hr_gguf_w_f32(g, KEY("attn_logit_softcapping"), hp->attn_softcap);
    if (hp->final_softcap != 0)
        hr_gguf_w_f32(g, KEY("final_logit_softcapping"), hp->final_softcap);
    /* sliding layers: llama.cpp derives them from one period */
    bool any = false;
    for (int i = 0; i < hp->n_layers; i++)
        any |= hp->layer_sliding[i];
    if (f == FAM_GEMMA && any)
        return NOPE("gemma with sliding-window layers (llama.cpp's gemma has none)");
    if (f == FAM_GEMMA || (f == FAM_GEMMA3 && !any))
        return 0;
    int p = -1;
    for (int q = -1; q <= hp->n_layers && p < 0; q++) {
        int c = q < 0 ? hr__gguf_swa_default(f) : q;
        bool same = true;
        for (int i = 0; i < hp->n_layers; i++)
            same &= hr__gguf_swa_layer(c, i) == hp->layer_sliding[i];
        if (same)
            p = c;
    }
    if (p < 0)
        return NOPE("%s with these layer_types (llama.cpp's %s slides layer i when i %% p < "
                    "p - 1, for one period p)", mt, arch);
    if (p != hr__gguf_swa_default(f))
        hr_gguf_w_u32(g, KEY("attention.sliding_window_pattern"), (uint32_t)p);
    if (!any)
        return 0;
    hr_gguf_w_u32(g, KEY("attention.sliding_window"), (uint32_t)hp->sliding_window);
    /* RoPE of the sliding layers: gemma3 unscaled, gemma2 scaled as the
     * global layers; the base is rope.freq_base_swa */
    const hr_rope_params *loc = hp->has_rope_local ? &hp->rope_local : &hp->rope;
    if (f == FAM_GEMMA3 && loc->type != HR_ROPE_DEFAULT)
        return NOPE("gemma3_text with scaled RoPE on sliding layers (llama.cpp's gemma3 "
                    "scales the global layers only)");
    if (f == FAM_GEMMA2 && (loc->type != hp->rope.type ||
                            (loc->type == HR_ROPE_LINEAR && loc->factor != hp->rope.factor)))
        return NOPE("gemma2 whose sliding layers' RoPE scaling differs from the global "
                    "layers' (llama.cpp's gemma2 has one)");
    hr_gguf_w_f32(g, KEY("rope.freq_base_swa"), (float)loc->theta);
#undef NOPE
#undef KEY
    return 0;
}

/* One GGUF tensor of the export, made while the file is written (fill_job):
 * its n_parts sources (the experts of a stacked tensor, or one) read, or
 * made for lazy weights, one at a time and converted row by row. */
typedef struct job {
    const hr_weights *w;
    hr_tensor t1;             /* the tensor (as written: a 1-D shared-expert gate) */
    const hr_tensor **parts;  /* n_parts sources of t1's shape and dtype */
    int n_parts;
    hr_dtype tt;              /* the type written */
    int64_t rows, cols;
    size_t row_bytes;
    bool unpermute, shift;    /* llama q/k rows; gemma norms' 1 added */
    int head_dim;
    float norm_offset;
} job;

static int fill_job(void *ctx, void *dst, size_t nbytes, hr_error *err) {
    const job *j = ctx;
    (void)nbytes;
    int64_t rows = j->rows, cols = j->cols;
    float *x = malloc((size_t)cols * sizeof *x);
    if (!x)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int rc = 0;
    for (int p = 0; !rc && p < j->n_parts; p++) {
        const hr_tensor *src = j->parts[p];
        const void *data;
        void *owned;
        if ((rc = hr_weights_load(j->w, src, &data, &owned, err)))
            break;
        hr_tensor flat = *src;
        flat.data = data;
        flat.ndim = 2;
        flat.shape[0] = rows;
        flat.shape[1] = cols;
        for (int64_t r = 0; r < rows; r++) {
            int64_t sr = j->unpermute ? hr_gguf_unpermute_row(r, j->head_dim) : r;
            if (j->t1.ndim == 1) {
                hr_dequant_range(&(hr_tensor){.dtype = src->dtype, .ndim = 2, .shape = {1, rows},
                                              .data = data},
                                 0, r, 1, x);
                if (j->shift)
                    x[0] = shifted(x[0], j->norm_offset, src->dtype);
            } else {
                hr_dequant_range(&flat, sr, 0, cols, x);
            }
            unsigned char *d = (unsigned char *)dst + (size_t)(p * rows + r) * j->row_bytes;
            if (j->tt == HR_DTYPE_F32)
                memcpy(d, x, (size_t)cols * 4);
            else if (j->tt == HR_DTYPE_F16 || j->tt == HR_DTYPE_BF16)
                for (int64_t c = 0; c < cols; c++) {
                    uint16_t h = j->tt == HR_DTYPE_F16 ? hr_f32_to_f16(x[c]) : hr_f32_to_bf16(x[c]);
                    memcpy(d + 2 * c, &h, 2);
                }
            else
                hr_quant_gguf_row(j->tt, x, cols, d);
        }
        if (owned)
            free(owned);
        else /* read once: its pages may leave memory */
            hr_weights_drop(j->w, data, src->nbytes);
    }
    free(x);
    return rc;
}

/* llama.cpp's _M mix (gguf_model.h): whether the tensor named gn goes to
 * Q6_K in a model of n_layers */
static bool km_q6k(const char *gn, int n_layers) {
    int il, n8 = n_layers / 8;
    if (!strcmp(gn, "output.weight"))
        return true;
    if (sscanf(gn, "blk.%d.", &il) != 1 || !(strstr(gn, ".attn_v.") || strstr(gn, ".ffn_down")))
        return false;
    return il < n8 || il >= 7 * n_layers / 8 || (il - n8) % 3 == 2;
}

int hr_gguf_export(const char *src, const json_t *cfg, const hr_weights *w, hr_dtype type,
                   bool km, const char *out, FILE *report, hr_error *err) {
    if (hr_gguf_dtype(hr__gguf_ggml_type(type)) != (int)type || type == HR_DTYPE_MXFP4)
        return hr_err(err, HR_EINVAL, "--gguf type %s is not one hearth writes",
                      hr_dtype_name(type));
    if (km && type != HR_DTYPE_Q4_K && type != HR_DTYPE_Q5_K)
        return hr_err(err, HR_EINVAL, "--gguf %s_M: the _M mix is Q4_K_M or Q5_K_M",
                      hr_dtype_name(type));
    hr_hparams hp;
    int rc = hr_hparams_from_json(&hp, cfg, NULL, err);
    if (rc)
        return rc;
    const char *mt = hp.arch->model_type;
    int ai = arch_of_model_type(mt);
    if (ai < 0) {
        hr_hparams_deinit(&hp);
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of model_type "
                      "'%s' (llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe, gpt_oss, "
                      "olmoe, gemma, gemma2, gemma3_text, gemma4_text, qwen3_next, glm4_moe, "
                      "granitemoe, granitemoehybrid are)", mt);
    }
    const char *arch = hr__gguf_archs[ai].gguf;
    hr__gguf_family fam = hr__gguf_archs[ai].fam;
    bool permute = fam == FAM_LLAMA || fam == FAM_GRANITE || fam == FAM_GRANITEH;
    bool hybrid = hr__gguf_hybrid_arch(arch);
    if (hr_weights_is_lazy(w) && (hybrid || fam == FAM_GPTOSS)) {
        hr_hparams_deinit(&hp);
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of %s from weights "
                      "made on demand (hearth synth)", mt);
    }
    /* a window shorter than the context changes the answers past it, and
     * only llama.cpp's gemma2/3 have one (gemma_export writes it) */
    for (int i = 0; !hr__gguf_is_gemma(fam) && fam != FAM_GPTOSS && fam != FAM_GEMMA4 &&
                    i < hp.n_layers; i++)
        if (hp.layer_sliding[i] && hp.sliding_window < hp.max_pos) {
            rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of %s with a "
                        "sliding window of %d tokens (llama.cpp's %s attends to the whole "
                        "context of %d)", mt, hp.sliding_window, arch, hp.max_pos);
            hr_hparams_deinit(&hp);
            return rc;
        }
    if (hp.rope.type != HR_ROPE_DEFAULT && hp.rope.type != HR_ROPE_LINEAR &&
        hp.rope.type != HR_ROPE_LLAMA3 && !(fam == FAM_GPTOSS && hp.rope.type == HR_ROPE_YARN)) {
        hr_hparams_deinit(&hp);
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of this rope "
                      "scaling (default, linear, llama3 are)");
    }
    hr_gguf_w *g = hr_gguf_w_new();
    bufs keepers = {0};
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
    hr_gguf_w_str(g, "general.architecture", arch);
    hr_gguf_w_str(g, "general.name", src ? src : "hearth synth");
    hr_gguf_w_u32(g, "general.alignment", 32);
    hr_gguf_w_u32(g, KEY("vocab_size"), (uint32_t)hp.n_vocab);
    hr_gguf_w_u32(g, KEY("context_length"), (uint32_t)hp.max_pos);
    hr_gguf_w_u32(g, KEY("embedding_length"), (uint32_t)hp.d_model);
    hr_gguf_w_u32(g, KEY("block_count"), (uint32_t)hp.n_layers);
    hr_gguf_w_u32(g, KEY("feed_forward_length"), (uint32_t)hp.d_ff);
    hr_gguf_w_u32(g, KEY("attention.head_count"), (uint32_t)hp.n_heads);
    if (fam != FAM_GRANITEH) /* granitehybrid's: one per layer */
        hr_gguf_w_u32(g, KEY("attention.head_count_kv"), (uint32_t)hp.n_kv_heads);
    hr_gguf_w_u32(g, KEY("attention.key_length"), (uint32_t)hp.head_dim);
    hr_gguf_w_u32(g, KEY("attention.value_length"), (uint32_t)hp.head_dim);
    hr_gguf_w_u32(g, KEY("rope.dimension_count"), (uint32_t)hp.rot_dim);
    hr_gguf_w_f32(g, KEY("rope.freq_base"), (float)hp.rope.theta);
    hr_gguf_w_f32(g, KEY("attention.layer_norm_rms_epsilon"), hp.norm_eps);
    if (hp.rope.type == HR_ROPE_LINEAR) {
        hr_gguf_w_str(g, KEY("rope.scaling.type"), "linear");
        hr_gguf_w_f32(g, KEY("rope.scaling.factor"), (float)hp.rope.factor);
    }
#undef KEY
    if ((hr__gguf_is_gemma(fam) && (rc = gemma_export(g, arch, fam, &hp, cfg, w, err))) ||
        (fam == FAM_GPTOSS && (rc = hr__gguf_gptoss_keys(g, arch, &hp, err))) ||
        (hybrid && (rc = hr__gguf_hybrid_keys(g, arch, &hp, err))) ||
        (fam == FAM_GEMMA4 && (rc = hr__gguf_gemma4_keys(g, arch, &hp, &keepers, err))) ||
        (fam != FAM_GPTOSS && fam != FAM_GEMMA4 && !hybrid &&
         (rc = hr__gguf_moe_keys(g, arch, &hp, err)))) {
        for (size_t i = 0; i < keepers.n; i++)
            free(keepers.p[i]);
        free(keepers.p);
        hr_gguf_w_free(g);
        hr_hparams_deinit(&hp);
        return rc;
    }
    const char *pre = NULL;
    hr_error terr = {0};
    rc = src ? hr_tokenizer_gguf_export(g, src, hp.n_vocab, hp.bos_id,
                                        hp.n_eos ? hp.eos_ids[0] : -1, &pre, &terr)
             : HR_ENOTFOUND; /* hearth synth: no tokenizer */
    if (rc == HR_EUNSUPPORTED || rc == HR_ENOTFOUND) {
        if (src)
            hr_log(HR_LOG_WARN, "%s: tokenizer not exported (%s); the GGUF has "
                   "tokenizer.ggml.model 'none': llama.cpp loads and benchmarks it but cannot "
                   "tokenize text with it", src, terr.msg);
        rc = 0;
        hr_gguf_w_str(g, "tokenizer.ggml.model", "none");
        if (hp.bos_id >= 0)
            hr_gguf_w_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)hp.bos_id);
        if (hp.n_eos)
            hr_gguf_w_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)hp.eos_ids[0]);
    } else if (rc) {
        if (err)
            *err = terr;
    }
    if (hp.rope.type == HR_ROPE_LLAMA3) {
        float *f = hr__gguf_keep(&keepers, (size_t)hp.rot_dim / 2 * sizeof *f);
        if (f) {
            llama3_factors(&hp.rope, hp.rot_dim, f);
            uint64_t ne[1] = {(uint64_t)hp.rot_dim / 2};
            hr_gguf_w_tensor(g, "rope_freqs.weight", 0, 1, ne, f, (size_t)hp.rot_dim / 2 * 4);
        }
    }
    size_t n_fallback = 0;
    for (size_t i = 0; !rc && i < hr_weights_count(w); i++) {
        const hr_tensor *t = hr_weights_at(w, i);
        char gn[160], stacked[200];
        if (hp.tie_embeddings && !strcmp(t->name, "lm_head.weight"))
            continue; /* unused: the model computes with embed_tokens */
        int layer;
        if (sscanf(t->name, "model.layers.%d.", &layer) == 1 && layer >= hp.n_layers)
            continue; /* multi-token prediction layers: not run, not written */
        if (hybrid) { /* fused experts, recurrent layers' reshaped tensors */
            int r = hr__gguf_hybrid_tensor(g, &hp, arch, t, type, &keepers, err);
            if (r < 0)
                rc = r;
            if (r)
                continue;
        }
        if (fam == FAM_GEMMA4) { /* its experts: [E, out, in] as they are */
            int r = hr__gguf_gemma4_tensor(g, &hp, t, type, &keepers, err);
            if (r < 0)
                rc = r;
            if (r)
                continue;
        }
        if (fam == FAM_GPTOSS) { /* its experts: split, transposed, or MXFP4 */
            int r = hr__gguf_gptoss_tensor(g, w, &hp, t, type, &keepers, err);
            if (r < 0)
                rc = r;
            if (r)
                continue;
        }
        /* experts: one [E, out, in] tensor, written at expert 0 */
        int expert = hr__gguf_expert_of(&hp, t->name, stacked, sizeof stacked);
        if (expert > 0)
            continue;
        const hr_tensor *one[1] = {t}, **parts = one;
        int n_parts = 1;
        if (expert == 0 && !(parts = hr__gguf_experts_of(w, t, hp.n_experts, &rc, err)))
            break;
        n_parts = expert == 0 ? hp.n_experts : 1;
        const hr_tensor *orig = t; /* w's own (a lazy one is made by its address) */
        hr_tensor gate1; /* the shared expert's gate (1, d): llama.cpp's is 1-D */
        if (t->ndim == 2 && t->shape[0] == 1 && ends_with(t->name, "shared_expert_gate.weight")) {
            gate1 = *t;
            gate1.ndim = 1;
            gate1.shape[0] = t->shape[1];
            t = one[0] = &gate1;
        }
        if (!hr__gguf_map_name(expert == 0 ? stacked : t->name, false, fam, gn, sizeof gn)) {
            rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: no GGUF name for "
                        "tensor '%s'", src, t->name);
            if (parts != one)
                free(parts);
            break;
        }
        bool is_q = strstr(t->name, "q_proj") != NULL, is_k = strstr(t->name, "k_proj") != NULL;
        int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
        hr_dtype tt = t->ndim == 2 && !ends_with(gn, "ffn_gate_inp.weight") ? type : HR_DTYPE_F32;
        if (km && tt == type && km_q6k(gn, hp.n_layers))
            tt = HR_DTYPE_Q6_K;
        int be, bb;
        hr_dtype_block(tt, &be, &bb);
        if (cols % be) {
            tt = HR_DTYPE_F16;
            hr_dtype_block(tt, &be, &bb);
            n_fallback++;
        }
        /* made while the file is written, one tensor at a time */
        job *j = hr__gguf_keep(&keepers, sizeof *j);
        const hr_tensor **kp = j ? hr__gguf_keep(&keepers, (size_t)n_parts * sizeof *kp) : NULL;
        if (kp)
            memcpy(kp, parts, (size_t)n_parts * sizeof *kp);
        if (parts != one)
            free(parts);
        if (!kp) {
            rc = hr_err(err, HR_ENOMEM, "out of memory");
            break;
        }
        *j = (job){.w = w, .t1 = *t, .parts = kp, .n_parts = n_parts, .tt = tt, .rows = rows,
                   .cols = cols, .row_bytes = (size_t)(cols / be) * bb,
                   .unpermute = permute && (is_q || is_k), .head_dim = hp.head_dim,
                   .norm_offset = hp.norm_offset,
                   /* the (1 + w) norms with the 1 added; qwen3_next's gated
                    * DeltaNet norm is a plain w */
                   .shift = hp.norm_offset != 0 && t->ndim == 1 &&
                            ends_with(t->name, "norm.weight") && !strstr(t->name, "linear_attn.")};
        if (n_parts == 1)
            kp[0] = orig;
        uint64_t ne[3] = {(uint64_t)cols, (uint64_t)rows, (uint64_t)n_parts};
        if (t->ndim == 1)
            ne[0] = (uint64_t)rows;
        hr_gguf_w_tensor_fill(g, gn, hr__gguf_ggml_type(tt), n_parts > 1 ? 3 : t->ndim, ne,
                              (size_t)n_parts * rows * j->row_bytes, fill_job, j);
    }
    if (!rc)
        rc = hr_gguf_w_write(g, out, err);
    if (!rc && report)
        fprintf(report, "wrote %s (%s, matrices %s%s%s, tokenizer %s%s)\n", out, arch,
                hr_dtype_name(type), km ? "_M (some Q6_K)" : "",
                n_fallback ? ", some F16: rows not whole blocks" : "", pre ? "gpt2/" : "none",
                pre ? pre : "");
    for (size_t i = 0; i < keepers.n; i++)
        free(keepers.p[i]);
    free(keepers.p);
    hr_gguf_w_free(g);
    hr_hparams_deinit(&hp);
    return rc;
}
