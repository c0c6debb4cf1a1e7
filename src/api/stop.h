/* Stop strings over a stream of text: text is released as soon as it can no
 * longer be the start of a stop string, so a stop string never leaks into
 * the output even when it arrives split across tokens. Used by the public
 * API and the server through hr_textout (textout.h). */
#ifndef HR_API_STOP_H
#define HR_API_STOP_H

#include <stddef.h>

typedef struct hr_stop {
    char **strs; /* owned copies; empty strings are dropped */
    int n;
    char *buf;   /* held-back text */
    size_t len, cap;
    size_t out_off; /* start of the span handed out by the last call */
    int stopped;
    int which;   /* once stopped: the index in strs of the stop string found */
} hr_stop;

/* 0 or HR_ENOMEM. strs may be NULL when n == 0. */
int hr_stop_init(hr_stop *s, const char *const *strs, int n);
void hr_stop_deinit(hr_stop *s);

/* Add text. *emit / *emit_len: the text that is final now (valid until the
 * next call). Returns 1 when a stop string was found: *emit is everything
 * before it and the stream is over; 0 otherwise; HR_ENOMEM. */
int hr_stop_push(hr_stop *s, const char *text, size_t len, const char **emit,
                 size_t *emit_len);
/* The stop string that ended the stream, or NULL while none has. */
const char *hr_stop_matched(const hr_stop *s);
/* The end of generation: release whatever is held back. */
void hr_stop_flush(hr_stop *s, const char **emit, size_t *emit_len);

#endif
