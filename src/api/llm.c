/* hr_llm: what a program loads to generate: the weights, the tokenizer, the
 * chat template, end-of-sequence tokens and sampling defaults. */
#include "api/api.h"
#include "chat/messages.h"
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- load ------------------------------------------------------------------ */

static void read_defaults(hr_llm *m) {
    hr_gen_defaults d = {.temp = 0.0, .top_p = 1.0, .min_p = 0.0, .rep = 0.0, .top_k = 0,
                         .max_tokens = 512};
    char path[4096];
    if (!hr_path_join(path, sizeof path, m->path, "generation_config.json")) {
        json_t *g = json_load_file(path, 0, NULL);
        if (json_is_object(g) && json_is_true(json_object_get(g, "do_sample"))) {
            json_t *v;
            if (json_is_number(v = json_object_get(g, "temperature")))
                d.temp = json_number_value(v);
            if (json_is_number(v = json_object_get(g, "top_p")))
                d.top_p = json_number_value(v);
            if (json_is_integer(v = json_object_get(g, "top_k")))
                d.top_k = (int)json_integer_value(v);
            if (json_is_number(v = json_object_get(g, "min_p")))
                d.min_p = json_number_value(v);
            if (json_is_number(v = json_object_get(g, "repetition_penalty")))
                d.rep = json_number_value(v);
        }
        json_decref(g);
    }
    m->defaults = d;
}

static uint64_t tokenizer_hash(const char *model) {
    char path[4096], *buf = NULL;
    size_t len = 0;
    uint64_t h = 0;
    if (!hr_path_join(path, sizeof path, model, "tokenizer.json") &&
        hr_file_read(path, &buf, &len, NULL) == 0)
        h = XXH64(buf, len, 0);
    free(buf);
    return h;
}

/* The tokenizer when the model has one: a directory without tokenizer.json
 * (or a GGUF file without a vocabulary) still runs token ids. */
static int load_tokenizer(hr_llm *m, hr_error *err) {
    bool gguf = hr_chat_is_gguf(m->path);
    char tpath[4096];
    if (!gguf && (hr_path_join(tpath, sizeof tpath, m->path, "tokenizer.json") ||
                  !hr_file_exists(tpath))) {
        snprintf(m->tok_err, sizeof m->tok_err, "%s has no tokenizer.json",
                 m->path);
        return 0;
    }
    hr_error terr = {0};
    int rc = hr_tokenizer_load(&m->tok, m->path, &terr);
    if (rc && !gguf) {
        if (err)
            *err = terr;
        return rc;
    }
    if (rc)
        snprintf(m->tok_err, sizeof m->tok_err, "%s", terr.msg);
    return 0;
}

/* Every ID the tokenizer can give should have an embedding row. An ID past
 * them (added tokens beyond config.json's vocab_size) is a warning naming
 * the first such token: the model still serves every text without one (as
 * in transformers), and a prompt that has one fails with its own error. */
static void check_rows(const hr_llm *m) {
    int32_t n = hr_tokenizer_n_vocab(m->tok), rows = m->model->hp.n_vocab, id = rows, past = 0;
    for (int32_t i = rows; i < n; i++)
        if (hr_tokenizer_token_to_piece(m->tok, i, NULL) && !past++)
            id = i;
    if (!past)
        return;
    size_t len = 0;
    const char *p = hr_tokenizer_token_to_piece(m->tok, id, &len);
    char shown[48];
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < sizeof shown; i++) /* one line */
        shown[k++] = (unsigned char)p[i] < 0x20 ? '?' : p[i];
    shown[k] = 0;
    hr_log(HR_LOG_WARN, "%s: the tokenizer has %d id%s past the model's %d embedding rows "
           "(config.json vocab_size), the first %d ('%s%s'): a prompt with one is refused",
           m->path, past, past > 1 ? "s" : "", rows, id, shown, k < len ? "..." : "");
}

/* bos_token / eos_token for a template when the model's files name none:
 * the tokenizer's bos and eos texts. */
static int special_texts(hr_chat_model_files *f, const hr_tokenizer *t, hr_error *err) {
    int32_t ids[2] = {hr_tokenizer_bos(t), hr_tokenizer_eos(t)};
    char **dst[2] = {&f->bos_token, &f->eos_token};
    for (int i = 0; i < 2; i++) {
        size_t len;
        const char *p = ids[i] >= 0 ? hr_tokenizer_token_to_piece(t, ids[i], &len) : NULL;
        if (p && !(*dst[i] = strndup(p, len))) {
            hr_chat_model_files_free(f);
            return hr_err(err, HR_ENOMEM, "out of memory");
        }
    }
    return 0;
}

static int load_template(hr_llm *m, const char *override, hr_error *err) {
    hr_chat_model_files files = {0};
    hr_error terr = {0};
    int rc = hr_chat_is_gguf(m->path)
                 ? hr_chat_gguf_load(&files, m->tok, m->path, override != NULL, &terr)
                 : hr_chat_model_load(&files, m->path, NULL, 0, &terr);
    if (rc == HR_ENOTFOUND && !override) { /* no template: tokens and text still run */
        snprintf(m->tmpl_err, sizeof m->tmpl_err, "%s", terr.msg);
        return 0;
    }
    if (rc == HR_ENOTFOUND) /* a base model given a template: the tokenizer's bos/eos */
        rc = special_texts(&files, m->tok, err);
    if (rc) {
        if (err)
            *err = terr;
        return rc;
    }
    const char *src = override ? override : files.template_src;
    if (src && (rc = hr_chat_template_new(&m->tmpl, src, strlen(src), err))) {
        hr_chat_model_files_free(&files);
        return hr_err_wrap(err, "chat template");
    }
    m->tool_format = hr_tool_format_detect(src);
    if (m->tool_format)
        hr_log(HR_LOG_INFO, "tool calls: %s format", hr_tool_format_name(m->tool_format));
    m->bos_token = files.bos_token;
    m->eos_token = files.eos_token;
    files.bos_token = files.eos_token = NULL;
    hr_chat_model_files_free(&files);
    return 0;
}

/* End-of-sequence ids: generation_config / config, and the tokenizer's eos. */
static void stop_ids(hr_llm *m) {
    const hr_hparams *hp = &m->model->hp;
    for (int i = 0; i < hp->n_eos && m->n_stop_ids < HR_LLM_MAX_STOP_IDS - 1; i++)
        m->stop_ids[m->n_stop_ids++] = hp->eos_ids[i];
    int32_t te = m->tok ? hr_tokenizer_eos(m->tok) : -1;
    bool have = false;
    for (int i = 0; i < m->n_stop_ids; i++)
        have |= m->stop_ids[i] == te;
    if (te >= 0 && !have)
        m->stop_ids[m->n_stop_ids++] = te;
}

int hr_llm_load(hr_llm **out, const char *path, const hr_llm_opts *opts, hr_error *err) {
    if (!out || !path)
        return hr_err(err, HR_EINVAL, "hr_llm_load: NULL argument");
    *out = NULL;
    if (opts && opts->n_threads < 0)
        return hr_err(err, HR_ERANGE, "n_threads must be >= 0");
    hr_llm *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&m->gvocab_mu, NULL);
    m->n_threads = opts ? opts->n_threads : 0;
    int rc;
    hr_model_opts mo = {.device = opts && opts->device ? opts->device : "auto",
                        .quant_act = opts ? opts->quant_act : NULL,
                        .isa = opts ? opts->isa : NULL};
    if ((rc = hr_model_open_with(&m->model, path, &mo, err)) ||
        (rc = load_tokenizer(m, err)))
        goto fail;
    if (m->tok)
        check_rows(m);
    if (m->tok && (rc = load_template(m, opts ? opts->chat_template : NULL, err)))
        goto fail;
    stop_ids(m);
    read_defaults(m);
    if (hr__embed_cfg_load(&m->emb, path, m->model->hp.arch->encoder, m->model->hp.d_model)) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    m->tok_hash = tokenizer_hash(path);
    *out = m;
    return 0;
fail:
    hr_llm_free(m);
    return rc;
}

void hr_llm_free(hr_llm *m) {
    if (!m)
        return;
    hr_grammar_vocab_free(m->gvocab);
    pthread_mutex_destroy(&m->gvocab_mu);
    hr_chat_template_free(m->tmpl);
    hr_tokenizer_free(m->tok);
    hr_model_free(m->model);
    hr__embed_cfg_free(&m->emb);
    free(m->bos_token);
    free(m->eos_token);
    free(m->path);
    free(m);
}

int hr_llm_n_vocab(const hr_llm *m) { return m->model->hp.n_vocab; }
int hr_llm_n_ctx_max(const hr_llm *m) { return m->model->hp.ctx_max; }

int hr__llm_tool_grammar(const hr_llm *m, const json_t *tools, const char *only,
                         hr_grammar **g, hr_error *err) {
    *g = NULL;
    if (!json_is_array(tools) || json_array_size(tools) == 0)
        return hr_err(err, HR_EINVAL, "forcing a tool call needs tools");
    if (!m->tool_format)
        return hr_err(err, HR_EUNSUPPORTED, "this model's chat template has no tool-call format");
    char *shape = NULL;
    int rc = hr_tool_format_call_schema(m->tool_format, tools, only, &shape, err);
    if (rc)
        return rc;
    json_t *js = json_loads(shape, 0, NULL);
    free(shape);
    json_t *alts = json_object_get(js, "alternatives");
    size_t n = json_array_size(alts);
    const char **pre = calloc(n ? n : 1, sizeof *pre), **suf = calloc(n ? n : 1, sizeof *suf);
    const json_t **sch = calloc(n ? n : 1, sizeof *sch);
    for (size_t i = 0; pre && suf && sch && i < n; i++) {
        json_t *a = json_array_get(alts, i);
        pre[i] = json_string_value(json_object_get(a, "prefix"));
        suf[i] = json_string_value(json_object_get(a, "suffix"));
        sch[i] = json_object_get(a, "schema");
    }
    rc = !pre || !suf || !sch ? hr_err(err, HR_ENOMEM, "out of memory")
         : n == 0             ? hr_err(err, HR_EINVAL, "no call shape for this format")
                              : hr_grammar_from_wrapped_schemas(g, pre, sch, suf, (int)n, err);
    free(pre);
    free(suf);
    free(sch);
    json_decref(js);
    return rc;
}

const hr_grammar_vocab *hr__llm_gvocab(hr_llm *m, hr_error *err) {
    if (!m->tok) {
        hr_err(err, HR_EUNSUPPORTED, "constrained decoding needs a tokenizer: %s", m->tok_err);
        return NULL;
    }
    pthread_mutex_lock(&m->gvocab_mu);
    if (!m->gvocab)
        hr_grammar_vocab_new(&m->gvocab, m->tok, m->model->hp.n_vocab, m->stop_ids,
                             m->n_stop_ids, err);
    pthread_mutex_unlock(&m->gvocab_mu);
    return m->gvocab;
}

size_t hr__llm_mask_cache_bytes(hr_llm *m) {
    pthread_mutex_lock(&m->gvocab_mu);
    size_t n = m->gvocab ? hr_grammar_vocab_cache_bytes(m->gvocab) : 0;
    pthread_mutex_unlock(&m->gvocab_mu);
    return n;
}

int hr__llm_grammar_ready(hr_llm *m, const hr_grammar *g, const hr_grammar_vocab **gv,
                          hr_error *err) {
    hr_error e = {0};
    if (!(*gv = hr__llm_gvocab(m, &e))) {
        int rc = e.code ? e.code : HR_ENOMEM;
        if (err)
            *err = e;
        return rc;
    }
    return hr_grammar_warm(g, *gv, err);
}

/* ---- text ------------------------------------------------------------------ */

void hr_free(void *p) { free(p); }

static int need_tok(const hr_llm *m, hr_error *err) {
    if (!m)
        return hr_err(err, HR_EINVAL, "NULL model");
    return m->tok ? 0 : hr_err(err, HR_EUNSUPPORTED, "%s", m->tok_err);
}

int hr_llm_tokenize(const hr_llm *m, const char *text, size_t len, unsigned flags,
                    int32_t **ids, size_t *n, hr_error *err) {
    int rc = need_tok(m, err);
    if (rc)
        return rc;
    if (!ids || !n || (!text && len))
        return hr_err(err, HR_EINVAL, "hr_llm_tokenize: NULL argument");
    hr_tokens t = {0};
    if ((rc = hr_tokenizer_encode(m->tok, text ? text : "", len,
                                  flags & HR_TOKENIZE_ADD_SPECIAL ? HR_TOK_ADD_SPECIAL : 0, &t,
                                  err))) {
        hr_tokens_free(&t); /* what it grew before failing */
        return rc;
    }
    *ids = t.ids;
    *n = t.n;
    return 0;
}

int hr_llm_detokenize(const hr_llm *m, const int32_t *ids, size_t n, unsigned flags,
                      char **text, size_t *len, hr_error *err) {
    int rc = need_tok(m, err);
    if (rc)
        return rc;
    if (!text || (!ids && n))
        return hr_err(err, HR_EINVAL, "hr_llm_detokenize: NULL argument");
    return hr_tokenizer_decode(m->tok, ids, n,
                               flags & HR_DETOKENIZE_SKIP_SPECIAL ? HR_DETOK_SKIP_SPECIAL : 0,
                               text, len, err);
}

static json_t *parse_json(const char *what, const char *text, hr_error *err) {
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
    if (!v)
        hr_err(err, HR_EINVAL, "%s is not valid JSON: %s (line %d, column %d)", what, je.text,
               je.line, je.column);
    return v;
}

int hr_llm_chat_render(const hr_llm *m, const char *messages_json, const char *tools_json,
                       const char *kwargs_json, int add_generation_prompt, char **prompt,
                       hr_error *err) {
    return hr__llm_chat_render(m, messages_json, tools_json, kwargs_json, add_generation_prompt,
                               false, prompt, err);
}

int hr__llm_chat_render(const hr_llm *m, const char *messages_json, const char *tools_json,
                        const char *kwargs_json, int add_generation_prompt, bool images,
                        char **prompt, hr_error *err) {
    if (!m || !messages_json || !prompt)
        return hr_err(err, HR_EINVAL, "hr_llm_chat_render: NULL argument");
    *prompt = NULL;
    json_t *raw = NULL, *msgs = NULL, *tools = NULL, *kw = NULL;
    int rc = HR_EINVAL;
    if (!(raw = parse_json("messages", messages_json, err)) ||
        (tools_json && !(tools = parse_json("tools", tools_json, err))) ||
        (kwargs_json && !(kw = parse_json("template kwargs", kwargs_json, err))))
        goto done;
    if (tools && !json_is_array(tools)) {
        rc = hr_err(err, HR_EINVAL, "tools must be a JSON array");
        goto done;
    }
    if (kw && !json_is_object(kw)) {
        rc = hr_err(err, HR_EINVAL, "template kwargs must be a JSON object");
        goto done;
    }
    if ((rc = hr_chat_messages_normalize_images(raw, images, &msgs, err)))
        goto done;
    rc = hr__llm_render(m, msgs, tools && json_array_size(tools) ? tools : NULL, kw,
                        add_generation_prompt, prompt, err);
done:
    json_decref(raw);
    json_decref(msgs);
    json_decref(tools);
    json_decref(kw);
    return rc;
}

int hr__llm_render(const hr_llm *m, const json_t *msgs, const json_t *tools,
                   const json_t *kwargs, int add_generation_prompt, char **prompt,
                   hr_error *err) {
    if (!m->tmpl && m->tmpl_err[0])
        return hr_err(err, HR_ENOTFOUND, "%s", m->tmpl_err);
    if (!m->tmpl) {
        if (!(*prompt = hr_chat_plain(msgs)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        return 0;
    }
    hr_chat_opts co = {.bos_token = m->bos_token, .eos_token = m->eos_token,
                       .add_generation_prompt = add_generation_prompt};
    json_t *empty = kwargs ? NULL : json_object();
    int rc = hr_chat_template_render(m->tmpl, msgs, tools, kwargs ? kwargs : empty, &co,
                                     prompt, err);
    json_decref(empty);
    return rc ? hr_err_wrap(err, "chat template") : 0;
}

const char *hr_version(void) { return "0.1.0"; }
