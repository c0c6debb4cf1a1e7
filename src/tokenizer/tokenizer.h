/* Tokenizer: text <-> token IDs, exactly as Hugging Face `tokenizers` does
 * it (tokenizer.json) or as llama.cpp does it (GGUF tokenizer.ggml.*).
 *
 * A tokenizer is immutable after load except for an internal piece cache
 * guarded by a mutex, so one tokenizer may be shared by any number of
 * threads. Supported components are listed in docs/tokenizer.md; anything
 * else is refused at load with HR_EUNSUPPORTED ("not supported yet: ...").
 *
 * Text in and out is UTF-8. Invalid UTF-8 given to encode is replaced, per
 * maximal ill-formed subsequence, by U+FFFD before tokenizing (what Python's
 * bytes.decode("utf-8", "replace") and WHATWG decoders do), so its IDs are
 * those the reference gives for the repaired string. */
#ifndef HR_TOKENIZER_H
#define HR_TOKENIZER_H

#include "hearth.h"

#include <stddef.h>
#include <stdint.h>

typedef struct hr_tokenizer hr_tokenizer;

/* encode flags */
enum {
    HR_TOK_ADD_SPECIAL = 1u << 0,   /* add BOS/EOS etc. as the post-processor
                                       says (HF add_special_tokens=True) */
    HR_TOK_SPLIT_SPECIAL = 1u << 1, /* special-token text in the input is
                                       plain text (HF split_special_tokens);
                                       use for untrusted content */
};

/* decode flags */
enum {
    HR_DETOK_SKIP_SPECIAL = 1u << 0, /* drop special tokens */
    HR_DETOK_CLEANUP = 1u << 1,      /* transformers' clean_up_tokenization_
                                        spaces (" ." -> ".", " n't" ...) */
};

/* A caller-owned, growable array of IDs. Zero-initialize; encode appends;
 * hr_tokens_free releases. */
typedef struct hr_tokens {
    int32_t *ids;
    size_t n, cap;
} hr_tokens;
int hr_tokens_push(hr_tokens *t, int32_t id); /* 0 or HR_ENOMEM */
void hr_tokens_free(hr_tokens *t);

/* Load from a path: a model directory (tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, chat_template.jinja; only tokenizer.json is
 * required) or a .gguf file. Errors name the file. */
int hr_tokenizer_load(hr_tokenizer **out, const char *path, hr_error *err);

/* Load from in-memory tokenizer.json text; config_json (tokenizer_config.json
 * text) may be NULL. Neither buffer needs to outlive the call. */
int hr_tokenizer_load_json(hr_tokenizer **out, const char *json, size_t len,
                           const char *config_json, size_t config_len,
                           hr_error *err);

void hr_tokenizer_free(hr_tokenizer *t);

/* Append the IDs of text[0..len) to out. On error out->n is unchanged. */
int hr_tokenizer_encode(const hr_tokenizer *t, const char *text, size_t len,
                        unsigned flags, hr_tokens *out, hr_error *err);

/* Decode ids into a malloc'd, NUL-terminated UTF-8 string (caller frees);
 * *len (may be NULL) gets its length. An ID outside the vocabulary is
 * HR_ERANGE. Equal to HF tokenizers' decode(ids, skip_special_tokens). */
int hr_tokenizer_decode(const hr_tokenizer *t, const int32_t *ids, size_t n,
                        unsigned flags, char **out, size_t *len, hr_error *err);

/* Number of IDs (vocabulary plus added tokens): valid IDs are [0, n). */
int32_t hr_tokenizer_n_vocab(const hr_tokenizer *t);

/* The token's string as stored in the vocabulary (e.g. "Ġthe", "<0x0A>",
 * "<|im_end|>"), not NUL-terminated when len is used; NULL if out of range
 * or a hole in the ID space. Valid until the tokenizer is freed. */
const char *hr_tokenizer_token_to_piece(const hr_tokenizer *t, int32_t id,
                                        size_t *len);

/* ID of the token whose vocabulary string is exactly text, or -1. */
int32_t hr_tokenizer_find(const hr_tokenizer *t, const char *text);

int hr_tokenizer_is_special(const hr_tokenizer *t, int32_t id);
/* The ids HR_TOK_ADD_SPECIAL puts before and after a single sequence (the
 * post-processor's), e.g. for truncating the sequence between them. */
void hr_tokenizer_post_ids(const hr_tokenizer *t, const int32_t **pre, int *n_pre,
                           const int32_t **post, int *n_post);

/* The bytes token id contributes to decoded text when it is not the first
 * token (a byte-level or <0xXX> token gives its raw bytes, which may be
 * partial UTF-8; Metaspace gives ' '). Written to buf[0..cap); *len gets the
 * length even when it does not fit (then HR_ERANGE). HR_ERANGE also for an
 * ID outside the vocabulary. Special tokens give their text. */
int hr_tokenizer_token_bytes(const hr_tokenizer *t, int32_t id, char *buf,
                             size_t cap, size_t *len);

/* BOS / EOS / PAD / UNK IDs from the configuration, -1 when none. */
int32_t hr_tokenizer_bos(const hr_tokenizer *t);
int32_t hr_tokenizer_eos(const hr_tokenizer *t);
int32_t hr_tokenizer_pad(const hr_tokenizer *t);
int32_t hr_tokenizer_unk(const hr_tokenizer *t);

/* The chat template (tokenizer_config.json "chat_template", its "default"
 * entry when it is a list, chat_template.jinja, or GGUF
 * tokenizer.chat_template), NULL when there is none. */
const char *hr_tokenizer_chat_template(const hr_tokenizer *t);

/* A string field of tokenizer_config.json ("bos_token", "eos_token",
 * "pad_token", "unk_token", "tokenizer_class", ...). Token fields given as
 * {"content": ...} objects are returned as their content. NULL if absent or
 * not a string. */
const char *hr_tokenizer_config_str(const hr_tokenizer *t, const char *key);

/* A boolean field of tokenizer_config.json ("add_bos_token",
 * "add_eos_token", "clean_up_tokenization_spaces", ...), dflt if absent. */
int hr_tokenizer_config_bool(const hr_tokenizer *t, const char *key, int dflt);

/* ---- GGUF export ---------------------------------------------------------
 * Write the tokenizer of model directory dir (tokenizer.json,
 * tokenizer_config.json, ...) into w as llama.cpp's GGUF keys, as its
 * convert_hf_to_gguf.py does: tokenizer.ggml.{model "gpt2", pre, tokens,
 * token_type, merges, bos/eos/unknown/padding_token_id, add_bos_token,
 * add_eos_token} and tokenizer.chat_template. n_vocab is the model's
 * embedding rows (ids past the tokenizer's become "[PAD<i>]", UNUSED);
 * bos_dflt / eos_dflt (config.json's ids, -1 for none) stand in when
 * tokenizer_config.json names none. *pre (may be NULL) gets the
 * pre-tokenizer name (static). Only byte-level BPE with the Qwen2, Llama 3
 * or GPT-2 pre-tokenizer has a llama.cpp equivalent: anything else is
 * HR_EUNSUPPORTED, no tokenizer.json HR_ENOTFOUND; on any error nothing is
 * written to w. */
struct hr_gguf_w;
int hr_tokenizer_gguf_export(struct hr_gguf_w *w, const char *dir, int32_t n_vocab,
                             int32_t bos_dflt, int32_t eos_dflt, const char **pre,
                             hr_error *err);

/* ---- streaming detokenizer --------------------------------------------
 * Feed IDs one at a time; each push returns the bytes that became final.
 * Never emits a partial UTF-8 sequence; holds back what a later token can
 * still change (an incomplete UTF-8 sequence, a byte-fallback run, a space
 * that clean-up may remove). The concatenation of every push plus the
 * final flush equals hr_tokenizer_decode of the same IDs and flags. */
typedef struct hr_detok_stream hr_detok_stream;

int hr_detok_stream_new(hr_detok_stream **out, const hr_tokenizer *t,
                        unsigned flags, hr_error *err);
/* *text points into the stream's buffer, valid until the next call;
 * *len may be 0. HR_ERANGE for an ID outside the vocabulary (the stream is
 * unchanged). No allocation beyond amortized buffer growth. */
int hr_detok_stream_push(hr_detok_stream *s, int32_t id, const char **text,
                         size_t *len, hr_error *err);
/* Emit what was held back; the stream is then reset for reuse. */
int hr_detok_stream_flush(hr_detok_stream *s, const char **text, size_t *len);
void hr_detok_stream_free(hr_detok_stream *s);

#endif
