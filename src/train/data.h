/* Training data in mlx_lm.lora's formats (docs/training.md): JSON lines,
 * the format chosen by the first line's keys as mlx-lm does:
 *   {"prompt": .., "completion": ..}  a user and an assistant message
 *                                     through the chat template
 *   {"messages": [..], "tools": ..}   the chat template (tools optional)
 *   {"text": ..}                      the tokenizer with its special
 *                                     tokens, EOS appended when missing
 *   {"prompt", "chosen", "rejected"}  a preference pair (DPO, ORPO): two
 *    (and optional "system")          examples, the prompt as the user's
 *                                     message and each completion as the
 *                                     assistant's, the prompt always
 *                                     masked (as --mask-prompt does)
 * With mask_prompt the loss skips the prompt: the tokens of the messages
 * but the last, rendered with the generation prompt (the text format
 * refuses it, as mlx-lm does). Blank lines are skipped; any other bad line
 * is an error "FILE:LINE: why".
 *
 * Batches as mlx_lm's iterate_batches makes them: examples sorted by
 * length (stably), cut into consecutive batches of batch_size (the
 * remainder dropped), the batches visited in a seeded random order, each
 * sequence cut to max_seq_length. */
#ifndef HR_TRAIN_DATA_H
#define HR_TRAIN_DATA_H

#include "hearth.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How text becomes tokens (the model's template and tokenizer). */
typedef struct hr_text_fns {
    void *ctx;
    /* normalized messages (chat/messages.h), tools (NULL: none) -> text */
    int (*render)(void *ctx, const json_t *msgs, const json_t *tools,
                  bool add_generation_prompt, char **out, hr_error *err);
    /* append text's ids (with the special tokens the post-processor adds
     * when add_special) */
    int (*encode)(void *ctx, const char *text, size_t len, bool add_special, hr_tokens *out,
                  hr_error *err);
    int32_t eos; /* -1: none */
} hr_text_fns;

typedef struct hr_train_data {
    size_t n;        /* examples */
    int32_t *tok;    /* every example's tokens, end to end */
    size_t *start;   /* [n + 1] example i is tok[start[i] .. start[i + 1]) */
    int *offset;     /* [n] the first token the loss counts (0: all) */
    bool pairs;      /* preference pairs: example 2i chosen, 2i + 1 rejected */
} hr_train_data;

/* Parse JSON-lines text (name: the file, for messages). */
int hr_train_data_parse(hr_train_data *out, const char *name, const char *text, size_t len,
                        const hr_text_fns *fns, bool mask_prompt, hr_error *err);
/* The same from a file. */
int hr_train_data_load(hr_train_data *out, const char *path, const hr_text_fns *fns,
                       bool mask_prompt, hr_error *err);
void hr_train_data_free(hr_train_data *d);

/* The batches of d: *order gets n_batches * batch_size example indices
 * (sorted by length, cut into batches, remainder dropped); malloc'd.
 * Pairs: batch_size pairs a batch, *order 2 * batch_size indices each
 * (chosen, rejected, ...), sorted by the chosen's length as
 * mlx-lm-lora's iterate_dpo_batches does. Error: fewer examples (pairs)
 * than batch_size. */
int hr_train_batches(const hr_train_data *d, int batch_size, int **order, int *n_batches,
                     hr_error *err);

#endif
