/* hr_embed: inputs -> token ids (prompt, special tokens, truncation as
 * sentence-transformers does them) -> one embed request each, submitted
 * together so that the engine batches them -> pooled vectors. */
#include "api/api.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

int hr_llm_embed_dim(const hr_llm *m) {
    return m && !m->emb.err[0] ? m->model->hp.d_model : 0;
}

/* text -> ids: [prompt + text] with the post-processor's special tokens,
 * the sequence between them cut to max_seq in all (sentence-transformers'
 * tokenizer(truncation=True, max_length=max_seq_length)) */
/* Python's str.isspace (what str.strip() drops), as UTF-8: the length of
 * the whitespace character s[0..n) is, else 0 */
static size_t py_space(const unsigned char *s, size_t n) {
    if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0D) || (s[0] >= 0x1C && s[0] <= 0x20)))
        return 1;
    if (n == 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0))
        return 2;
    if (n != 3)
        return 0;
    unsigned c = (unsigned)(s[0] & 0x0F) << 12 | (unsigned)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    bool lead = (s[0] & 0xF0) == 0xE0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80;
    return lead && (c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
                    c == 0x202F || c == 0x205F || c == 0x3000) ? 3 : 0;
}

void hr__py_strip(const char *str, size_t *a, size_t *b) {
    const unsigned char *s = (const unsigned char *)str;
    for (bool more = true; more && *a < *b;) {
        more = false;
        for (size_t k = 1; k <= 3 && k <= *b - *a && !more; k++)
            if (py_space(s + *a, k) == k)
                *a += k, more = true;
    }
    for (bool more = true; more && *b > *a;) {
        more = false;
        for (size_t k = 1; k <= 3 && k <= *b - *a && !more; k++)
            if (py_space(s + *b - k, k) == k)
                *b -= k, more = true;
    }
}

int hr__embed_ids(const hr_llm *m, const char *prompt, const char *text, size_t len,
                  hr_tokens *ids, hr_error *err) {
    size_t pl = prompt ? strlen(prompt) : 0;
    char *full = malloc(pl + len + 1);
    if (!full)
        return hr_err(err, HR_ENOMEM, "out of memory");
    if (pl)
        memcpy(full, prompt, pl);
    if (len)
        memcpy(full + pl, text, len);
    full[pl + len] = 0;
    /* sentence-transformers strips the text it tokenizes (prompt + input) */
    size_t a = 0, b = pl + len;
    hr__py_strip(full, &a, &b);
    hr_tokens body = {0};
    int rc = hr_tokenizer_encode(m->tok, full + a, b - a, 0, &body, err);
    free(full);
    if (rc)
        return rc;
    const int32_t *pre, *post;
    int n_pre, n_post;
    hr_tokenizer_post_ids(m->tok, &pre, &n_pre, &post, &n_post);
    size_t keep = body.n;
    if (m->emb.max_seq > 0 && keep + (size_t)n_pre + (size_t)n_post > (size_t)m->emb.max_seq)
        keep = (size_t)m->emb.max_seq > (size_t)(n_pre + n_post)
                   ? (size_t)m->emb.max_seq - (size_t)(n_pre + n_post) : 0;
    for (int i = 0; i < n_pre && !rc; i++)
        rc = hr_tokens_push(ids, pre[i]);
    for (size_t i = 0; i < keep && !rc; i++)
        rc = hr_tokens_push(ids, body.ids[i]);
    for (int i = 0; i < n_post && !rc; i++)
        rc = hr_tokens_push(ids, post[i]);
    hr_tokens_free(&body);
    return rc ? hr_err(err, rc, "out of memory") : 0;
}

int hr_embed(hr_session *s, const hr_embed_input *in, int n, const hr_embed_opts *o,
             float *out, long *n_tokens, hr_error *err) {
    static const hr_embed_opts none = {0};
    if (!s || (!in && n) || (!out && n) || n < 0)
        return hr_err(err, HR_EINVAL, "hr_embed: NULL argument");
    o = o ? o : &none;
    const hr_llm *m = s->llm;
    int d = m->model->hp.d_model, dims = o->dimensions ? o->dimensions : d;
    if (m->emb.err[0])
        return hr_err(err, HR_EUNSUPPORTED, "%s: cannot embed: %s", m->path, m->emb.err);
    if (o->dimensions < 0 || o->dimensions > d)
        return hr_err(err, HR_ERANGE, "dimensions must be in 1..%d (this model's embedding "
                      "length)", d);
    const char *prompt = o->prompt;
    int rc = 0;
    if (!prompt && (rc = hr__embed_prompt(&m->emb, o->prompt_name, &prompt, err)))
        return rc;
    if (prompt && *prompt && !m->emb.include_prompt)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: a prompt with a Pooling "
                      "module that excludes it (include_prompt false)");
    hr_request **reqs = calloc((size_t)n + 1, sizeof *reqs);
    float *full = malloc((size_t)d * sizeof *full);
    if (!reqs || !full) {
        free(reqs);
        free(full);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    long total = 0;
    int i;
    for (i = 0; i < n && !rc; i++) {
        hr_tokens ids = {0};
        const int32_t *p = in[i].tokens;
        int np = in[i].n_tokens;
        if (in[i].text) {
            if (!m->tok)
                rc = hr_err(err, HR_EUNSUPPORTED, "text needs a tokenizer (%s)", m->tok_err);
            else
                rc = hr__embed_ids(m, prompt, in[i].text, in[i].text_len, &ids, err);
            p = ids.ids;
            np = (int)ids.n;
        } else if (np <= 0 || !p) {
            rc = hr_err(err, HR_EINVAL, "no tokens");
        }
        if (!rc && np <= 0)
            rc = hr_err(err, HR_EINVAL, "empty");
        hr_req_params rp = {.prompt = p, .n_prompt = np, .embed = true};
        hr_sampler_params_default(&rp.sampler);
        if (!rc && !(rc = hr_request_new(&reqs[i], s->engine, &rp, err)) &&
            (rc = hr_engine_submit(s->engine, reqs[i], err))) {
            hr_request_release(reqs[i]);
            reqs[i] = NULL;
        }
        if (rc && n > 1)
            hr_err_wrap(err, "input %d", i);
        total += np;
        hr_tokens_free(&ids);
    }
    for (int k = 0; k < n; k++) {
        hr_request *r = reqs[k];
        if (!r)
            continue;
        if (rc)
            hr_request_cancel(r);
        hr_step st;
        while (hr_request_wait(r, 0, &st, 1000) != 0)
            ;
        hr_error msg = {0};
        hr_finish f = hr_request_finish(r, &msg);
        if (!rc && f != HR_FINISH_STOP)
            rc = f == HR_FINISH_ERROR ? hr_err(err, HR_EIO, "input %d: %s", k, msg.msg)
                                      : hr_err(err, HR_EIO, "input %d: cancelled", k);
        if (!rc)
            hr__embed_pool(&m->emb, hr_request_hidden(r), hr_request_n_prompt(r), d, dims,
                           full, out + (size_t)k * dims);
        hr_request_release(r);
    }
    free(reqs);
    free(full);
    if (n_tokens)
        *n_tokens = rc ? 0 : total;
    return rc;
}
