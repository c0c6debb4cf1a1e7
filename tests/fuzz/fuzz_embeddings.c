/* libFuzzer: the bytes through the inputs' whitespace strip (api/embed.c),
 * and as a /v1/embeddings request body through its parser
 * (server/embeddings.c) for a model of embedding length 64 and 512 ids. A
 * body must parse into 1..HR_EMB_MAX_INPUTS inputs, each text or in-range
 * token ids, or fail with a 400 in OpenAI's error shape naming a field.
 * Any crash, leak or sanitizer report is a bug. */
#include "server/embeddings.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the text's strip (api/embed.c) on the raw bytes: a sub-range */
    size_t a = 0, b = size;
    hr__py_strip((const char *)data, &a, &b);
    if (a > b || b > size)
        abort();
    json_t *req = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(req)) {
        json_decref(req);
        return 0;
    }
    hr_emb_req q;
    hr_reply err = {0};
    if (hr__embeddings_parse(req, 64, 512, &q, &err)) {
        if (q.n < 1 || q.n > HR_EMB_MAX_INPUTS || err.body || !q.model ||
            q.dimensions < 0 || q.dimensions > 64)
            abort();
        for (int i = 0; i < q.n; i++) {
            const hr_embed_input *in = &q.in[i];
            if (in->text ? !in->text_len : (!in->tokens || in->n_tokens < 1))
                abort();
            for (int k = 0; !in->text && k < in->n_tokens; k++)
                if (in->tokens[k] < 0 || in->tokens[k] >= 512)
                    abort();
        }
    } else {
        if ((err.status != 400 && err.status != 500) || !err.body)
            abort();
        json_t *o = json_loads(err.body, 0, NULL);
        if (!json_is_string(json_object_get(json_object_get(o, "error"), "message")))
            abort();
        json_decref(o);
        free(err.body);
    }
    hr__emb_req_free(&q);
    json_decref(req);
    return 0;
}
