/* POST /v1/embeddings (OpenAI's Embeddings API): input as a string, a list
 * of strings, a list of token ids or a list of such lists; encoding_format
 * float or base64; dimensions (Matryoshka); hearth's prompt_name / prompt
 * (sentence-transformers prompts). The inputs go to the engine together
 * (hr_embed), batched with whatever else runs. */
#include "core/error.h"
#include "server/embeddings.h"
#include "server/request.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static hr_reply bad(const char *param, const char *msg) {
    return hr__error_reply(400, "invalid_request_error", param, "%s", msg);
}

/* a list of token ids: every element an integer in [0, n_vocab) */
static bool id_list(const json_t *a, size_t which, int n_vocab, int32_t **ids, int *n,
                    hr_reply *err) {
    size_t k = json_array_size(a);
    if (k == 0) {
        *err = hr__error_reply(400, "invalid_request_error", "input", "input %zu: a token list "
                               "must not be empty", which);
        return false;
    }
    if (!(*ids = malloc(k * sizeof **ids))) {
        *err = hr__error_reply(500, "server_error", NULL, "out of memory");
        return false;
    }
    for (size_t i = 0; i < k; i++) {
        const json_t *x = json_array_get(a, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) >= n_vocab) {
            *err = hr__error_reply(400, "invalid_request_error", "input", "input %zu: token %zu "
                                   "must be an integer in [0, %d)", which, i, n_vocab);
            return false;
        }
        (*ids)[i] = (int32_t)json_integer_value(x);
    }
    *n = (int)k;
    return true;
}

bool hr__embeddings_parse(const json_t *root, int dim, int n_vocab, hr_emb_req *q,
                          hr_reply *err) {
    memset(q, 0, sizeof *q);
    const json_t *in = json_object_get(root, "input");
    const json_t *m = json_object_get(root, "model");
    const json_t *fmt = json_object_get(root, "encoding_format");
    const json_t *dims = json_object_get(root, "dimensions");
    const json_t *pn = json_object_get(root, "prompt_name");
    const json_t *pt = json_object_get(root, "prompt");
    const json_t *user = json_object_get(root, "user");
    if (m && !json_is_null(m) && !json_is_string(m)) {
        *err = bad("model", "model must be a string");
        return false;
    }
    q->model = m && json_is_string(m) ? json_string_value(m) : "default_model";
    if (user && !json_is_null(user) && !json_is_string(user)) {
        *err = bad("user", "user must be a string");
        return false;
    }
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64"))) {
            *err = bad("encoding_format", "encoding_format must be 'float' or 'base64'");
            return false;
        }
        q->base64 = !strcmp(f, "base64");
    }
    if (dims && !json_is_null(dims)) {
        if (!json_is_integer(dims) || json_integer_value(dims) < 1 ||
            json_integer_value(dims) > dim) {
            *err = hr__error_reply(400, "invalid_request_error", "dimensions", "dimensions "
                                   "must be an integer in [1, %d] (this model's embedding "
                                   "length)", dim);
            return false;
        }
        q->dimensions = (int)json_integer_value(dims);
    }
    if (pn && !json_is_null(pn)) {
        if (!json_is_string(pn)) {
            *err = bad("prompt_name", "prompt_name must be a string");
            return false;
        }
        q->prompt_name = json_string_value(pn);
    }
    if (pt && !json_is_null(pt)) {
        if (!json_is_string(pt)) {
            *err = bad("prompt", "prompt must be a string");
            return false;
        }
        q->prompt = json_string_value(pt);
    }
    if (!in || json_is_null(in)) {
        *err = bad("input", "input is required");
        return false;
    }
    /* the forms: "s" | ["s", ...] | [1, 2] | [[1, 2], ...] */
    size_t n = json_is_string(in) ? 1 : json_array_size(in);
    if (!json_is_string(in) && !json_is_array(in)) {
        *err = bad("input", "input must be a string, a list of strings, a list of token ids "
                   "or a list of lists of token ids");
        return false;
    }
    if (n == 0) {
        *err = bad("input", "input must not be an empty list");
        return false;
    }
    bool one_ids = json_is_array(in) && json_is_integer(json_array_get(in, 0));
    if (one_ids)
        n = 1;
    if (n > HR_EMB_MAX_INPUTS) {
        *err = hr__error_reply(400, "invalid_request_error", "input", "input has %zu items; "
                               "at most %d", n, HR_EMB_MAX_INPUTS);
        return false;
    }
    if (!(q->in = calloc(n, sizeof *q->in)) || !(q->ids = calloc(n, sizeof *q->ids))) {
        *err = hr__error_reply(500, "server_error", NULL, "out of memory");
        return false;
    }
    q->n = (int)n;
    if (one_ids)
        return id_list(in, 0, n_vocab, &q->ids[0], &q->in[0].n_tokens, err) &&
               ((q->in[0].tokens = q->ids[0]), true);
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_string(in) ? in : json_array_get(in, i);
        if (json_is_string(x)) {
            if (!json_string_length(x)) {
                *err = hr__error_reply(400, "invalid_request_error", "input", "input %zu is "
                                       "an empty string", i);
                return false;
            }
            q->in[i].text = json_string_value(x);
            q->in[i].text_len = json_string_length(x);
        } else if (json_is_array(x)) {
            if (!id_list(x, i, n_vocab, &q->ids[i], &q->in[i].n_tokens, err))
                return false;
            q->in[i].tokens = q->ids[i];
        } else {
            *err = hr__error_reply(400, "invalid_request_error", "input", "input %zu must be "
                                   "a string or a list of token ids", i);
            return false;
        }
    }
    return true;
}

void hr__emb_req_free(hr_emb_req *q) {
    for (int i = 0; q->ids && i < q->n; i++)
        free(q->ids[i]);
    free(q->ids);
    free(q->in);
    memset(q, 0, sizeof *q);
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* float32 little-endian bytes, base64 (what the openai clients decode) */
static json_t *base64_floats(const float *v, int n) {
    size_t nb = (size_t)n * 4, nc = (nb + 2) / 3 * 4;
    unsigned char *b = malloc(nb);
    char *s = malloc(nc + 1);
    json_t *o = NULL;
    if (b && s) {
        for (int i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++)
                b[4 * i + k] = (unsigned char)(u >> (8 * k));
        }
        size_t o_ = 0;
        for (size_t i = 0; i < nb; i += 3) {
            uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) |
                         (i + 2 < nb ? b[i + 2] : 0);
            s[o_++] = B64[x >> 18 & 63];
            s[o_++] = B64[x >> 12 & 63];
            s[o_++] = i + 1 < nb ? B64[x >> 6 & 63] : '=';
            s[o_++] = i + 2 < nb ? B64[x & 63] : '=';
        }
        s[o_] = 0;
        o = json_string(s);
    }
    free(b);
    free(s);
    return o;
}

static unsigned status_of(int code) {
    return code == HR_ENOMEM || code == HR_EIO ? 500 : code == HR_ECANCELLED ? 503 : 400;
}

hr_reply hr__route_embeddings(hr_server *s, const char *body, size_t len) {
    hr_reply err = {0};
    json_t *root = hr__body_parse(body, len, &err);
    if (!root)
        return err;
    /* the model first: its width and vocabulary check the input (a "model"
     * that is not a string is the parser's 400 below, on the default model) */
    hr_served *m = NULL;
    if (!hr__model_hold(s, json_string_value(json_object_get(root, "model")), &m, &err)) {
        json_decref(root);
        return err;
    }
    int dim = hr_llm_embed_dim(m->llm);
    if (!dim) {
        err = hr__error_reply(400, "invalid_request_error", NULL, "this model cannot give "
                              "embeddings: %s", m->llm->emb.err);
        hr__pool_release(s->pool, m);
        json_decref(root);
        return err;
    }
    hr_emb_req q;
    if (!hr__embeddings_parse(root, dim, m->model->hp.n_vocab, &q, &err)) {
        hr__pool_release(s->pool, m);
        hr__emb_req_free(&q);
        json_decref(root);
        return err;
    }
    int dims = q.dimensions ? q.dimensions : dim;
    float *out = malloc((size_t)q.n * dims * sizeof *out);
    hr_embed_opts o = {.prompt_name = q.prompt_name, .prompt = q.prompt,
                       .dimensions = q.dimensions};
    long n_tok = 0;
    hr_error e = {0};
    int rc = out ? hr_embed(m->session, q.in, q.n, &o, out, &n_tok, &e)
                 : hr_err(&e, HR_ENOMEM, "out of memory");
    if (rc) {
        err = hr__error_reply(status_of(rc), status_of(rc) >= 500 ? "server_error"
                                                                  : "invalid_request_error",
                              NULL, "%s", e.msg);
    } else {
        json_t *data = json_array();
        for (int i = 0; i < q.n; i++) {
            const float *v = out + (size_t)i * dims;
            json_t *emb;
            if (q.base64) {
                emb = base64_floats(v, dims);
            } else {
                emb = json_array();
                for (int k = 0; k < dims; k++)
                    json_array_append_new(emb, json_real(v[k]));
            }
            json_array_append_new(data, json_pack("{s:s,s:i,s:o}", "object", "embedding",
                                                  "index", i, "embedding", emb));
        }
        err = hr__json_reply(200, json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list",
                                            "data", data, "model", m->id, "usage",
                                            "prompt_tokens", (json_int_t)n_tok,
                                            "total_tokens", (json_int_t)n_tok));
    }
    hr__pool_release(s->pool, m);
    free(out);
    hr__emb_req_free(&q);
    json_decref(root);
    return err;
}
