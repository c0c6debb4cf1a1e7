/* GGUF files as models, as llama.cpp's convert_hf_to_gguf.py writes them:
 *  - metadata ({arch}.embedding_length, ...) -> a config.json object that
 *    hr_hparams_from_json resolves like any other;
 *  - tensor names (blk.N.attn_q.weight, ...) <-> Hugging Face names;
 *  - llama-family q/k rows are permuted per head (half-split -> interleaved
 *    rotary pairs): hearth keeps the permuted rows and rotates interleaved
 *    pairs, which is the same attention (q.k is invariant under the same
 *    permutation of q and k; v is not permuted).
 *  - gemma, gemma2, gemma3: norm weights are stored with gemma's 1 added
 *    (hr_hparams.norm_offset is 0 for a GGUF), gemma2/3's four norms per
 *    layer have their own names (ffn_norm is the pre-MLP norm), and what
 *    llama.cpp derives rather than reads (attention scale, sliding layers,
 *    local RoPE base, logit softcapping defaults) becomes config fields.
 *  - mixture of experts (gguf_moe.c): {arch}.expert_* keys, the router
 *    ffn_gate_inp, experts stacked [E, out, in] in ffn_{gate,up,down}_exps,
 *    the shared expert's ffn_*_shexp; layers without ffn_gate_inp are dense.
 *  - gpt-oss (gguf_gptoss.c); qwen3next, glm4moe, granitemoe,
 *    granitehybrid (gguf_hybrid.c: gated DeltaNet and Mamba-2 layers).
 * Architectures: llama (and mistral; with experts: mixtral), qwen2, qwen3,
 * qwen2moe, qwen3moe, olmoe, gemma, gemma2, gemma3 (model_type
 * gemma3_text), gpt-oss, qwen3next, glm4moe, granitemoe, granitehybrid. */
#ifndef HR_MODEL_GGUF_MODEL_H
#define HR_MODEL_GGUF_MODEL_H

#include "core/tensor.h"
#include "hearth.h"
#include "io/gguf.h"
#include "model/weights.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/* config.json equivalent of a GGUF's metadata (caller json_decref's it).
 * *permuted_qk: llama-family q/k rows are in llama.cpp's order. */
int hr_gguf_config(const hr_gguf *g, json_t **cfg, bool *permuted_qk, hr_error *err);

/* llama.cpp's LlamaModel.permute of a q/k weight: within each head, row
 * s*hd/2 + i moves to 2*i + s. The source (HF) row of destination row r. */
int64_t hr_gguf_unpermute_row(int64_t r, int head_dim);

/* The Hugging Face name of tensor gguf_name of g (the names depend on g's
 * architecture) into buf, or NULL when unknown. */
const char *hr_gguf_hf_name(const hr_gguf *g, const char *gguf_name, char *buf, size_t n);

/* hearth dtype of a ggml type, or -1 when unsupported. */
int hr_gguf_dtype(uint32_t ggml_type);

/* Write the model at src (config cfg, weights w) as one GGUF file: 2-D
 * weights of type `type` (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K,
 * Q6_K; a matrix whose rows are not whole blocks falls back to F16), 1-D
 * tensors F32 (gemma norms with the 1 added), llama.cpp names and metadata,
 * and src's tokenizer as llama.cpp's keys (hr_tokenizer_gguf_export; a
 * missing or unsupported one is a warning and tokenizer "none"). A model
 * that llama.cpp would run differently from the file's metadata (a gemma
 * attention scale or sliding pattern it would not derive, ...) is
 * HR_EUNSUPPORTED and nothing is written. km (type Q4_K or Q5_K): llama.cpp's
 * Q4_K_M / Q5_K_M mix for dense layers instead, output.weight and the
 * attn_v and ffn_down matrices of the layers use_more_bits picks (the first
 * and last eighth, and every third between) in Q6_K (its rules for 70B
 * GQA, 8-expert and Falcon models are not reproduced). */
int hr_gguf_export(const char *src, const json_t *cfg, const hr_weights *w, hr_dtype type,
                   bool km, const char *out, FILE *report, hr_error *err);

/* ---- internal (gguf_export.c, gguf_moe.c, gguf_gptoss.c) ---- */

/* Buffers a GGUF export keeps until the file is written. */
typedef struct hr__gguf_bufs {
    void **p;
    size_t n, cap;
} hr__gguf_bufs;
/* size bytes kept in b (NULL: out of memory). */
void *hr__gguf_keep(hr__gguf_bufs *b, size_t size);
/* The ggml type number of a dtype hearth writes. */
uint32_t hr__gguf_ggml_type(hr_dtype t);
/* rows x cols floats as GGUF rows of type (F16 when cols is no whole
 * block): the bytes in a kept buffer, the type written to *tt (NULL: out of
 * memory). */
void *hr__gguf_rows_as(hr__gguf_bufs *kb, const float *x, int64_t rows, int64_t cols,
                       hr_dtype type, hr_dtype *tt, size_t *bytes);

/* gpt-oss (gguf_gptoss.c): the config fields of a "gpt-oss" GGUF beyond the
 * common and expert ones; the keys of a gpt_oss export (HR_EUNSUPPORTED for
 * what llama.cpp's gpt-oss would run differently); one HF tensor of the
 * experts ("model.layers.N.mlp.experts.*": fused, transposed or MXFP4)
 * written as llama.cpp's stacked ffn_*_exps (1), or 0 when t is none of
 * them, or an error. */
struct hr_hparams;
struct hr_gguf_w;
int hr__gguf_gptoss_config(const hr_gguf *g, const char *arch, json_t *cfg, hr_error *err);
int hr__gguf_gptoss_keys(struct hr_gguf_w *g, const char *arch, const struct hr_hparams *hp,
                         hr_error *err);
int hr__gguf_gptoss_tensor(struct hr_gguf_w *g, const hr_weights *w,
                           const struct hr_hparams *hp, const hr_tensor *t, hr_dtype type,
                           hr__gguf_bufs *kb, hr_error *err);


/* qwen3next, glm4moe, granitemoe, granitehybrid (gguf_hybrid.c): whether
 * arch is one; the config fields of such a GGUF beyond the common and
 * expert ones (after hr__gguf_moe_config); the keys of its export, expert
 * ones included (HR_EUNSUPPORTED for what llama.cpp would run
 * differently); one HF tensor that needs more than a name on the way
 * (granite's fused experts, Mamba-2's A_log / D / conv / norm, qwen3next's
 * in_proj_qkvz / A_log / conv) written as llama.cpp's (1), or 0 when t is
 * none of them, or an error. */
bool hr__gguf_hybrid_arch(const char *arch);
int hr__gguf_hybrid_config(const hr_gguf *g, const char *arch, json_t *cfg, hr_error *err);
int hr__gguf_hybrid_keys(struct hr_gguf_w *g, const char *arch, const struct hr_hparams *hp,
                         hr_error *err);
int hr__gguf_hybrid_tensor(struct hr_gguf_w *g, const struct hr_hparams *hp, const char *arch,
                           const hr_tensor *t, hr_dtype type, hr__gguf_bufs *kb,
                           hr_error *err);

/* gemma4 (gguf_gemma4.c): the config fields of a "gemma4" GGUF beyond the
 * common and expert ones; the keys of a gemma4_text export and the
 * rope_freqs tensor llama.cpp requires (HR_EUNSUPPORTED for what its
 * gemma4 would run differently); one HF tensor of the experts
 * ("model.layers.N.experts.gate_up_proj" / "down_proj", [E, out, in])
 * written as ffn_gate_up_exps / ffn_down_exps (1), or 0 when t is none of
 * them, or an error. */
int hr__gguf_gemma4_config(const hr_gguf *g, const char *arch, json_t *cfg, hr_error *err);
int hr__gguf_gemma4_keys(struct hr_gguf_w *g, const char *arch, const struct hr_hparams *hp,
                         hr__gguf_bufs *kb, hr_error *err);
int hr__gguf_gemma4_tensor(struct hr_gguf_w *g, const struct hr_hparams *hp, const hr_tensor *t,
                           hr_dtype type, hr__gguf_bufs *kb, hr_error *err);

/* The config fields of a MoE GGUF of architecture arch (nothing for a dense
 * one): expert counts and widths, the routing's normalisation, the dense
 * layers; a llama with experts becomes mixtral. */
int hr__gguf_moe_config(const hr_gguf *g, const char *arch, json_t *cfg, hr_error *err);
/* The {arch}.expert_* keys for model hp (nothing for a dense one); a MoE
 * model llama.cpp could not express is HR_EUNSUPPORTED. */
int hr__gguf_moe_keys(struct hr_gguf_w *g, const char *arch, const struct hr_hparams *hp,
                      hr_error *err);
/* Expert e of HF tensor `name` ("...experts.<e>.<part>.weight" of hp's
 * arch): e and the stacked name ("...switch_mlp.<gate|up|down>_proj.weight")
 * into buf; -1 when name is no expert's. */
int hr__gguf_expert_of(const struct hr_hparams *hp, const char *name, char *buf, size_t n);
/* The n experts' tensors of which t is expert 0's (".experts.0."), each of
 * t's shape and dtype (malloc'd array; NULL and *rc set on error). */
const hr_tensor **hr__gguf_experts_of(const hr_weights *w, const hr_tensor *t, int n, int *rc,
                                      hr_error *err);

#endif
