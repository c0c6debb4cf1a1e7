/* How a model embeds: its sentence-transformers configuration, read at load
 * (embed_cfg.c), and the pooling it asks for (embed_pool.c). Internal to the
 * API layer. */
#ifndef HR_API_EMBED_CFG_H
#define HR_API_EMBED_CFG_H

#include "hearth.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum hr_pool_kind { HR_POOL_LAST, HR_POOL_MEAN, HR_POOL_CLS } hr_pool_kind;

typedef struct hr_embed_cfg {
    hr_pool_kind pooling;
    bool normalize;       /* a Normalize module: unit length */
    bool include_prompt;  /* Pooling's include_prompt (false: not supported yet) */
    int max_seq;          /* sentence_bert_config.json max_seq_length; 0: none */
    json_t *prompts;      /* config_sentence_transformers.json "prompts" (owned) */
    char *default_prompt; /* its default_prompt_name, or NULL */
    bool from_st;         /* read from modules.json (else the defaults) */
    char err[256];        /* set: this model cannot embed, and why */
} hr_embed_cfg;

/* Read dir's sentence-transformers files (modules.json, the Pooling
 * module's config.json, config_sentence_transformers.json,
 * sentence_bert_config.json). Without modules.json: the defaults (an
 * encoder: mean pooling, no normalisation, as sentence-transformers builds
 * for a plain model; a causal LM: last token, normalised, as
 * Qwen3-Embedding). A configuration hearth cannot follow is kept in c->err
 * (embedding fails with it; loading does not). dir may be a GGUF file:
 * the defaults. Returns HR_ENOMEM only. */
int hr__embed_cfg_load(hr_embed_cfg *c, const char *dir, bool encoder, int dim);
void hr__embed_cfg_free(hr_embed_cfg *c);

/* The prompt text for prompt_name (NULL: the default, "": none); NULL
 * when there is none; err set when the name is unknown. */
int hr__embed_prompt(const hr_embed_cfg *c, const char *prompt_name, const char **prompt,
                     hr_error *err);

/* Pool n token states [n][d] (kind) into full [d], normalise it when asked,
 * then out [dims] = its first dims values, re-normalised when dims < d
 * (Matryoshka). */
void hr__embed_pool(const hr_embed_cfg *c, const float *h, int n, int d, int dims,
                    float *full, float *out);

#endif
