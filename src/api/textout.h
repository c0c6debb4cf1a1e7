/* Tokens -> final text, as a stream: the streaming detokenizer (UTF-8 safe)
 * followed by the stop-string matcher. The server's routes and the public
 * API's events both come out of this, so they give the same text. */
#ifndef HR_API_TEXTOUT_H
#define HR_API_TEXTOUT_H

#include "api/stop.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hr_textout {
    hr_detok_stream *detok;
    hr_stop stop;
    bool stopped; /* a stop string was found: the text is over */
} hr_textout;

/* detok_flags: HR_DETOK_*; stops may be NULL when n_stops == 0. */
int hr_textout_init(hr_textout *t, const hr_tokenizer *tok, unsigned detok_flags,
                    const char *const *stops, int n_stops, hr_error *err);
void hr_textout_deinit(hr_textout *t);

/* One generated token: the text that became final goes to *emit (valid
 * until the next call). Returns 1 when a stop string ended the text
 * (*emit is what came before it), 0 to go on, or HR_ENOMEM (err filled:
 * the text would be missing a piece, so the request must fail). A token the
 * tokenizer cannot decode adds no text. */
int hr_textout_push(hr_textout *t, int32_t token, const char **emit, size_t *len,
                    hr_error *err);
/* The end of generation: what the detokenizer and the matcher held back.
 * eos: an end-of-sequence token ended it, which drops a partial stop string
 * (as mlx-lm does). 0, or HR_ENOMEM (err filled). */
int hr_textout_finish(hr_textout *t, bool eos, const char **emit, size_t *len, hr_error *err);

#endif
