#include "api/textout.h"
#include "core/error.h"

#include <string.h>

int hr_textout_init(hr_textout *t, const hr_tokenizer *tok, unsigned detok_flags,
                    const char *const *stops, int n_stops, hr_error *err) {
    memset(t, 0, sizeof *t);
    int rc = hr_detok_stream_new(&t->detok, tok, detok_flags, err);
    if (rc)
        return rc;
    if (hr_stop_init(&t->stop, stops, n_stops)) {
        hr_textout_deinit(t);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    return 0;
}

void hr_textout_deinit(hr_textout *t) {
    if (!t)
        return;
    hr_detok_stream_free(t->detok);
    hr_stop_deinit(&t->stop);
    memset(t, 0, sizeof *t);
}

int hr_textout_push(hr_textout *t, int32_t token, const char **emit, size_t *len,
                    hr_error *err) {
    const char *s;
    size_t sl;
    hr_error e;
    *emit = "";
    *len = 0;
    if (t->stopped)
        return 1;
    int rc = hr_detok_stream_push(t->detok, token, &s, &sl, &e);
    if (rc == HR_ERANGE)
        return 0; /* a token the tokenizer does not have: no text */
    if (rc == 0)
        rc = hr_stop_push(&t->stop, s, sl, emit, len);
    if (rc < 0)
        return hr_err(err, rc, "out of memory building the output text");
    t->stopped = rc == 1;
    return rc;
}

int hr_textout_finish(hr_textout *t, bool eos, const char **emit, size_t *len, hr_error *err) {
    const char *s;
    size_t sl;
    *emit = "";
    *len = 0;
    if (t->stopped)
        return 0;
    int rc = hr_detok_stream_flush(t->detok, &s, &sl);
    if (rc == 0)
        rc = hr_stop_push(&t->stop, s, sl, emit, len);
    if (rc < 0)
        return hr_err(err, rc, "out of memory building the output text");
    if (rc == 1)
        return 0; /* the finish reason stays the engine's, as the server reports it */
    if (!eos) {
        const char *r;
        size_t rl;
        hr_stop_flush(&t->stop, &r, &rl);
        /* *emit points into the matcher's buffer right before r: one span */
        if (*len == 0)
            *emit = r;
        *len += rl;
    }
    return 0;
}
