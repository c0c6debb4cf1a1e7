/* Chat templates: messages -> prompt text, exactly as Hugging Face
 * transformers' apply_chat_template(tokenize=False) renders them.
 *
 * The template sees: messages, tools (None when not given), documents
 * (None), add_generation_prompt, bos_token / eos_token (when set), and every
 * key of kwargs (the entries of kwargs["chat_template_kwargs"], when it is
 * an object, are merged in too, as OpenAI-style servers do). */
#ifndef HR_CHAT_CHAT_H
#define HR_CHAT_CHAT_H

#include "hearth.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hr_chat_opts {
    const char *bos_token; /* NULL: undefined in the template */
    const char *eos_token; /* NULL: undefined in the template */
    int add_generation_prompt;
    int has_now;       /* 1: strftime_now() formats `now` (UTC) — for tests */
    int64_t now;       /* unix seconds */
    size_t max_output; /* bytes; 0: 16 MiB */
    long max_steps;    /* evaluation steps (endless-loop guard); 0: 20 million */
} hr_chat_opts;

/* A compiled template, immutable: render it from any number of threads. */
typedef struct hr_chat_template hr_chat_template;

int hr_chat_template_new(hr_chat_template **out, const char *src, size_t len, hr_error *err);
void hr_chat_template_free(hr_chat_template *t);

/* messages: a JSON array of message objects (content a string, a list of
 * parts, or null; tool_calls; tool results). tools and kwargs may be NULL.
 * *out: malloc'd NUL-terminated prompt (caller frees). A template error
 * (syntax or run time, e.g. raise_exception) is HR_EINVAL / HR_EFORMAT /
 * HR_EUNSUPPORTED with a message naming line and column. */
int hr_chat_template_render(const hr_chat_template *t, const json_t *messages,
                            const json_t *tools, const json_t *kwargs,
                            const hr_chat_opts *opts, char **out, hr_error *err);

/* Compile and render once. */
int hr_chat_render(const char *template_src, const json_t *messages, const json_t *tools,
                   const json_t *kwargs, const hr_chat_opts *opts, char **out,
                   hr_error *err);

/* The chat template and special tokens of a model directory, found as
 * transformers finds them: chat_template.jinja, else chat_template.json,
 * else tokenizer_config.json "chat_template" (a string, or a list of
 * {name, template}: `name` when given, else "tool_use" when has_tools and
 * present, else "default"). bos/eos come from tokenizer_config.json (a
 * string or {"content": ...}), else special_tokens_map.json; NULL when
 * absent. All outputs are malloc'd (caller frees). */
typedef struct hr_chat_model_files {
    char *template_src;
    char *bos_token;
    char *eos_token;
} hr_chat_model_files;

int hr_chat_model_load(hr_chat_model_files *out, const char *model_dir, const char *name,
                       int has_tools, hr_error *err);

/* The same for a GGUF file: the template is its tokenizer.chat_template, bos
 * and eos the text of the BOS / EOS tokens of tok (the file's tokenizer).
 * No template is an error unless have_override (the caller brings one). */
struct hr_tokenizer;
int hr_chat_gguf_load(hr_chat_model_files *out, const struct hr_tokenizer *tok,
                      const char *path, bool have_override, hr_error *err);

/* Whether a model path names a GGUF file (it ends in ".gguf"). */
bool hr_chat_is_gguf(const char *path);
void hr_chat_model_files_free(hr_chat_model_files *f);

#endif
