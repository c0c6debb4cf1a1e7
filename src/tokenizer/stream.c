/* The streaming detokenizer: the decoder state machine behind a small
 * object that owns its output buffer (reused across pushes, so the token
 * loop allocates only while the buffers grow). */
#include "tokenizer/internal.h"
#include "core/error.h"

#include <stdlib.h>

struct hr_detok_stream {
    hr__dec_state st;
    hr__buf out;
};

int hr_detok_stream_new(hr_detok_stream **out, const hr_tokenizer *t,
                        unsigned flags, hr_error *err) {
    *out = NULL;
    if (!t)
        return hr_err(err, HR_EINVAL, "detok stream: NULL tokenizer");
    hr_detok_stream *s = calloc(1, sizeof *s);
    if (!s || hr__buf_reserve(&s->out, 256)) {
        free(s);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    hr__dec_init(&s->st, t, flags);
    *out = s;
    return 0;
}

int hr_detok_stream_push(hr_detok_stream *s, int32_t id, const char **text,
                         size_t *len, hr_error *err) {
    s->out.len = 0;
    *text = s->out.p;
    *len = 0;
    int rc = hr__dec_push(&s->st, id, &s->out);
    if (rc == HR_ERANGE)
        return hr_err(err, rc, "token id %d is outside the vocabulary (0..%d)", id,
                      s->st.t->n_vocab - 1);
    if (rc)
        return hr_err(err, rc, "detok stream: %s", hr_strerror(rc));
    *text = s->out.p;
    *len = s->out.len;
    return 0;
}

int hr_detok_stream_flush(hr_detok_stream *s, const char **text, size_t *len) {
    s->out.len = 0;
    int rc = hr__dec_finish(&s->st, &s->out);
    *text = s->out.p;
    *len = rc ? 0 : s->out.len;
    return rc;
}

void hr_detok_stream_free(hr_detok_stream *s) {
    if (!s)
        return;
    hr__dec_deinit(&s->st);
    free(s->out.p);
    free(s);
}
