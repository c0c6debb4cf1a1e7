#include "server/request.h"
#include "core/error.h"
#include "core/timer.h"
#include "chat/messages.h"
#include "io/hfcache.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- typed field access: a wrong type or range is a 400 naming the field ---- */

typedef struct fields {
    const json_t *obj;
    hr_reply *err;
    bool bad;
} fields;

static bool fail(fields *f, const char *param, const char *fmt, const char *a) {
    if (!f->bad) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, a);
        *f->err = hr__error_reply(400, "invalid_request_error", param, "%s", msg);
        f->bad = true;
    }
    return false;
}

/* fail() for an error code: out of memory is the server's fault (500),
 * anything else the request's (400). */
static bool fail_rc(fields *f, int rc, const char *param, const char *msg) {
    if (rc != HR_ENOMEM)
        return fail(f, param, "%s", msg);
    if (!f->bad) {
        *f->err = hr__error_reply(500, "server_error", param, "%s", msg);
        f->bad = true;
    }
    return false;
}

static const json_t *field(fields *f, const char *key) {
    const json_t *v = json_object_get(f->obj, key);
    return json_is_null(v) ? NULL : v;
}

static double number(fields *f, const char *key, double dflt, double lo, double hi) {
    const json_t *v = field(f, key);
    if (!v)
        return dflt;
    if (!json_is_number(v)) {
        fail(f, key, "%s must be a number", key);
        return dflt;
    }
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%%s must be in [%g, %g]", lo, hi);
        fail(f, key, msg, key);
        return dflt;
    }
    return x;
}

static long integer(fields *f, const char *key, long dflt, long lo, long hi) {
    const json_t *v = field(f, key);
    if (!v)
        return dflt;
    if (!json_is_integer(v)) {
        fail(f, key, "%s must be an integer", key);
        return dflt;
    }
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        char msg[160];
        snprintf(msg, sizeof msg, "%%s must be in [%ld, %ld]", lo, hi);
        fail(f, key, msg, key);
        return dflt;
    }
    return (long)x;
}

/* A non-negative integer of any size, clamped to INT_MAX. */
static int count(fields *f, const char *key, int dflt) {
    const json_t *v = field(f, key);
    if (!v)
        return dflt;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        fail(f, key, "%s must be a non-negative integer", key);
        return dflt;
    }
    json_int_t x = json_integer_value(v);
    return x > INT_MAX ? INT_MAX : (int)x;
}

static bool boolean(fields *f, const char *key, bool dflt) {
    const json_t *v = field(f, key);
    if (!v)
        return dflt;
    if (!json_is_boolean(v))
        return fail(f, key, "%s must be true or false", key);
    return json_is_true(v);
}

/* ---- prompt construction ------------------------------------------------------- */

static bool build_prompt(hr_server *s, fields *f, bool chat, hr_job *j) {
    hr_error e = {0};
    char *text = NULL;
    unsigned flags = 0;
    if (chat) {
        const json_t *raw = field(f, "messages");
        json_t *msgs = NULL;
        if (json_is_array(raw) && !hr__media_load_parts(s, j->m, raw, &j->media, f->err)) {
            f->bad = true;
            return false;
        }
        int nrc = hr_chat_messages_normalize_images(raw, j->media.n > 0, &msgs, &e);
        if (nrc)
            return fail_rc(f, nrc, "messages", e.msg);
        const json_t *tools = field(f, "tools");
        if (tools && (!json_is_array(tools) || json_array_size(tools) == 0))
            tools = NULL;
        const json_t *ck = field(f, "chat_template_kwargs");
        if (ck && !json_is_object(ck)) {
            json_decref(msgs);
            return fail(f, "chat_template_kwargs", "%s must be an object",
                        "chat_template_kwargs");
        }
        json_t *kw = s->template_args ? json_deep_copy(s->template_args) : json_object();
        if (ck)
            json_object_update(kw, (json_t *)ck);
        int rc = hr__llm_render(j->m->llm, msgs, tools, kw, 1, &text, &e);
        json_decref(kw);
        if (rc == HR_ENOTFOUND && !j->m->tmpl) { /* a base model: say what to do */
            json_decref(msgs);
            *f->err = hr__error_reply(400, "invalid_request_error", "messages",
                                      "The model '%s' has no chat template (a base model, "
                                      "or a GGUF without tokenizer.chat_template): use "
                                      "/v1/completions, or start the server with "
                                      "--chat-template", j->m->id);
            f->bad = true;
            return false;
        }
        if (rc) {
            json_decref(msgs);
            *f->err = hr__error_reply(rc == HR_ENOMEM ? 500 : 400,
                                      rc == HR_ENOMEM ? "server_error" : "invalid_request_error",
                                      "messages", "%s", e.msg);
            f->bad = true;
            return false;
        }
        json_decref(msgs);
        char *placed = NULL;
        if (j->media.n && !hr__media_expand(j->m, text, &j->media, &placed,
                                                   f->err)) {
            free(text);
            f->bad = true;
            return false;
        }
        if (placed) {
            free(text);
            text = placed;
        }
    } else {
        const json_t *p = field(f, "prompt");
        if (!json_is_string(p))
            return fail(f, "prompt", "%s is required and must be a string", "prompt");
        text = strdup(json_string_value(p));
        flags = HR_TOK_ADD_SPECIAL;
    }
    if (!text) {
        *f->err = hr__error_reply(500, "server_error", NULL, "out of memory");
        f->bad = true;
        return false;
    }
    int rc = hr_tokenizer_encode(j->m->tok, text, strlen(text), flags, &j->prompt, &e);
    free(text);
    if (rc)
        return fail_rc(f, rc, chat ? "messages" : "prompt", e.msg);
    if (j->prompt.n == 0)
        return fail(f, chat ? "messages" : "prompt", "%s", "the prompt is empty");
    if (j->media.n && !hr__media_attach(j->m, &j->prompt, &j->media, f->err)) {
        f->bad = true;
        return false;
    }
    return true;
}

/* ---- defaults: generation_config.json, then flags, then the request ---------------- */

typedef struct defaults {
    double temp, top_p, min_p, rep;
    int top_k, max_tokens;
} defaults;

static defaults resolve_defaults(const hr_server *s, const hr_served *m) {
    const hr_gen_defaults *g = &m->llm->defaults; /* generation_config.json, read at load */
    defaults d = {.temp = g->temp, .top_p = g->top_p, .min_p = g->min_p, .rep = g->rep,
                  .top_k = g->top_k, .max_tokens = g->max_tokens};
    if (s->o.temp >= 0)
        d.temp = s->o.temp;
    if (s->o.top_p >= 0)
        d.top_p = s->o.top_p;
    if (s->o.min_p >= 0)
        d.min_p = s->o.min_p;
    if (s->o.top_k >= 0)
        d.top_k = s->o.top_k;
    if (s->o.max_tokens >= 0)
        d.max_tokens = s->o.max_tokens;
    return d;
}

/* ---- the request ------------------------------------------------------------------- */

static bool parse_stops(fields *f, hr_job *j) {
    const json_t *st = field(f, "stop");
    if (!st)
        return true;
    if (json_is_string(st)) {
        j->stops[j->n_stops++] = strdup(json_string_value(st));
        return true;
    }
    if (!json_is_array(st) || json_array_size(st) > HR_MAX_STOPS)
        return fail(f, "stop", "%s must be a string or a list of at most 16 strings", "stop");
    size_t i;
    json_t *v;
    json_array_foreach(st, i, v) {
        if (!json_is_string(v))
            return fail(f, "stop", "%s must be a string or a list of strings", "stop");
        j->stops[j->n_stops++] = strdup(json_string_value(v));
    }
    return true;
}

/* A logit_bias key is a token id written canonically: "5", never "05",
 * "+5", " 5" or "5.0" (each would name the same token as "5" and their
 * biases would add up). Returns the id, or -1. */
static long canonical_id(const char *key) {
    if (key[0] < '0' || key[0] > '9' || (key[0] == '0' && key[1]))
        return -1;
    long id = 0;
    for (const char *c = key; *c; c++) {
        if (*c < '0' || *c > '9' || id > (INT32_MAX - 9) / 10)
            return -1;
        id = id * 10 + (*c - '0');
    }
    return id;
}

/* logit_bias: {"token id": bias}, bias in [-100, 100] as OpenAI has it. */
static bool parse_bias(fields *f, hr_job *j) {
    const json_t *b = field(f, "logit_bias");
    if (!b)
        return true;
    if (!json_is_object(b))
        return fail(f, "logit_bias", "%s must be an object of token id to bias", "logit_bias");
    size_t n = json_object_size(b);
    j->bias_ids = malloc((n ? n : 1) * sizeof *j->bias_ids);
    j->bias_vals = malloc((n ? n : 1) * sizeof *j->bias_vals);
    if (!j->bias_ids || !j->bias_vals)
        return fail_rc(f, HR_ENOMEM, "logit_bias", "logit_bias: out of memory");
    const char *key;
    json_t *v;
    int k = 0;
    json_object_foreach((json_t *)b, key, v) {
        long id = canonical_id(key);
        if (id < 0)
            return fail(f, "logit_bias", "logit_bias keys must be token ids written as "
                        "decimal integers without sign, spaces or leading zeros (got '%.40s')",
                        key);
        if (!json_is_number(v))
            return fail(f, "logit_bias", "%s must map token ids to numbers", "logit_bias");
        if (id >= j->m->model->hp.n_vocab)
            return fail(f, "logit_bias", "%s names a token id outside the vocabulary",
                        "logit_bias");
        double x = json_number_value(v);
        if (!(x >= -100 && x <= 100))
            return fail(f, "logit_bias", "%s values must be in [-100, 100]", "logit_bias");
        j->bias_ids[k] = (int32_t)id;
        j->bias_vals[k++] = (float)x;
    }
    j->rp.sampler.bias_ids = j->bias_ids;
    j->rp.sampler.bias_values = j->bias_vals;
    j->rp.sampler.n_bias = k;
    return true;
}

/* tools + tool_choice: "auto" (default) parses calls from the output in the
 * template's format; "none" leaves the output as text; "required" and a
 * named function force a call with a grammar over that format
 * (hr__llm_tool_grammar, as the API does). */
static bool parse_tool_choice(fields *f, hr_job *j) {
    const json_t *tools = field(f, "tools");
    if (tools && !json_is_array(tools))
        return fail(f, "tools", "%s must be an array of tools", "tools");
    const json_t *tc = field(f, "tool_choice");
    const char *choice = "auto";
    if (tc && json_is_string(tc))
        choice = json_string_value(tc);
    else if (tc && json_is_object(tc))
        choice = "named";
    else if (tc)
        return fail(f, "tool_choice", "%s must be a string or an object", "tool_choice");
    if (strcmp(choice, "auto") && strcmp(choice, "none") && strcmp(choice, "required") &&
        strcmp(choice, "named"))
        return fail(f, "tool_choice", "%s must be \"auto\", \"none\", \"required\" or a "
                    "function", "tool_choice");
    if (!strcmp(choice, "required") || !strcmp(choice, "named")) {
        /* a call is forced: the family's markers around a call object */
        const char *only = NULL;
        if (!strcmp(choice, "named")) {
            only = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
            if (!only)
                return fail(f, "tool_choice", "%s: a named choice needs function.name",
                            "tool_choice");
        }
        if (!tools || json_array_size(tools) == 0)
            return fail(f, "tool_choice", "%s needs tools", "tool_choice");
        hr_error e = {0};
        int grc = hr__llm_tool_grammar(j->m->llm, tools, only, &j->grammar, &e);
        if (grc)
            return fail_rc(f, grc, "tool_choice", e.msg);
        j->forced_tool = true;
    }
    if (tools && json_array_size(tools) > 0 && strcmp(choice, "none") && j->m->tool_format)
        j->tools = json_incref((json_t *)tools);
    return true;
}

/* A JSON Schema given as an object or as JSON text. */
static int schema_grammar(const json_t *v, hr_grammar **g, hr_error *err) {
    if (json_is_string(v)) {
        json_error_t je;
        json_t *parsed = json_loads(json_string_value(v), 0, &je);
        if (!parsed)
            return hr_err(err, HR_EINVAL, "the schema is not valid JSON: %s", je.text);
        int rc = hr_grammar_from_json_schema(g, parsed, err);
        json_decref(parsed);
        return rc;
    }
    if (!json_is_object(v) && !json_is_boolean(v))
        return hr_err(err, HR_EINVAL, "the schema must be a JSON object");
    return hr_grammar_from_json_schema(g, v, err);
}

static int choices_grammar(const json_t *v, hr_grammar **g, hr_error *err) {
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 4096)
        return hr_err(err, HR_EINVAL, "the choices must be a non-empty list of strings");
    const char *c[4096];
    for (size_t i = 0; i < json_array_size(v); i++)
        if (!(c[i] = json_string_value(json_array_get(v, i))))
            return hr_err(err, HR_EINVAL, "the choices must be strings");
    return hr_grammar_from_choices(g, c, (int)json_array_size(v), err);
}

/* response_format and the guided-decoding fields of vLLM / mlx-bun:
 * guided_json, guided_regex, guided_choice, guided_grammar, and
 * structured_outputs {json, regex, choice, grammar}. At most one. */
static bool parse_constraint(fields *f, hr_server *s, hr_job *j) {
    static const char *keys[] = {"response_format", "guided_json", "guided_regex",
                                 "guided_choice", "guided_grammar", "structured_outputs"};
    const char *which = NULL;
    const json_t *v = NULL;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const json_t *x = field(f, keys[i]);
        if (!x)
            continue;
        if (which)
            return fail(f, keys[i], "%s: give only one of response_format and the guided_* "
                        "fields", keys[i]);
        which = keys[i];
        v = x;
    }
    hr_error e = {0};
    int rc = 0;
    if (!which && !j->grammar)
        return true;
    if (which && j->grammar)
        return fail(f, which, "%s cannot be combined with tool_choice \"required\" or a "
                    "named function", which);
    if (!which)
        goto attach; /* the forced tool call's grammar */
    if (!strcmp(which, "response_format")) {
        const char *type = json_string_value(json_object_get(v, "type"));
        if (!json_is_object(v) || !type)
            return fail(f, which, "%s must be an object with a \"type\"", which);
        if (!strcmp(type, "text"))
            return true;
        if (!strcmp(type, "json_object")) {
            rc = hr_grammar_json_object(&j->grammar, &e);
        } else if (!strcmp(type, "json_schema")) {
            const json_t *js = json_object_get(v, "json_schema");
            const json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
            if (!schema)
                return fail(f, which, "%s: json_schema needs a \"schema\"", which);
            rc = schema_grammar(schema, &j->grammar, &e);
        } else {
            return fail(f, which, "%s: type must be text, json_object or json_schema", which);
        }
    } else if (!strcmp(which, "guided_json")) {
        rc = schema_grammar(v, &j->grammar, &e);
    } else if (!strcmp(which, "guided_regex") || !strcmp(which, "guided_grammar")) {
        if (!json_is_string(v))
            return fail(f, which, "%s must be a string", which);
        const char *src = json_string_value(v);
        rc = !strcmp(which, "guided_regex") ? hr_grammar_from_regex(&j->grammar, src, &e)
                                            : hr_grammar_from_gbnf(&j->grammar, src, strlen(src), &e);
    } else if (!strcmp(which, "guided_choice")) {
        rc = choices_grammar(v, &j->grammar, &e);
    } else { /* structured_outputs */
        const json_t *x;
        if (!json_is_object(v))
            return fail(f, which, "%s must be an object", which);
        if ((x = json_object_get(v, "json")))
            rc = schema_grammar(x, &j->grammar, &e);
        else if ((x = json_object_get(v, "regex")) && json_is_string(x))
            rc = hr_grammar_from_regex(&j->grammar, json_string_value(x), &e);
        else if ((x = json_object_get(v, "choice")))
            rc = choices_grammar(x, &j->grammar, &e);
        else if ((x = json_object_get(v, "grammar")) && json_is_string(x))
            rc = hr_grammar_from_gbnf(&j->grammar, json_string_value(x),
                                      strlen(json_string_value(x)), &e);
        else
            return fail(f, which, "%s needs json, regex, choice or grammar", which);
    }
    if (rc)
        return fail_rc(f, rc, which, e.msg);
attach:;
    const char *param = which ? which : "tool_choice";
    if (s->grammar_off)
        return fail(f, param, "%s: constrained decoding is turned off on this server "
                    "(HEARTH_GRAMMAR=0)", param);
    /* the vocabulary, and the grammar's mask cache filled here, on the HTTP
     * thread, not in the engine's token loop */
    const hr_grammar_vocab *gv = NULL;
    if (hr__llm_grammar_ready(j->m->llm, j->grammar, &gv, &e)) {
        *f->err = hr__error_reply(500, "server_error", param, "%s", e.msg);
        f->bad = true;
        return false;
    }
    j->rp.grammar = j->grammar;
    j->rp.gvocab = gv;
    return true;
}

/* The model name picks (hr__pool_resolve), loaded and held in *out (let
 * go with hr__pool_release); else false with *err: a 404 listing the
 * models, or a 500 when it cannot be loaded. */
bool hr__model_hold(hr_server *s, const char *name, hr_served **out, hr_reply *err) {
    int i = hr__pool_resolve(s->pool, name);
    if (i < 0) {
        char *names = hr__pool_names(s->pool);
        *err = hr__error_reply(404, "invalid_request_error", "model",
                               "The model '%s' does not exist; this server serves %s",
                               name, names ? names : "other models");
        free(names);
        return false;
    }
    hr_error e = {0};
    if (hr__pool_acquire(s->pool, i, out, &e)) {
        *err = hr__error_reply(500, "server_error", "model", "cannot load the model '%s': %s",
                               hr__pool_id(s->pool, i), e.msg);
        return false;
    }
    return true;
}

/* The model j->model names, held in j->m; "base:adapter" (a name no model
 * has) picks base and the adapter named after the last ':' (j->adapter_name,
 * in j->model). */
static bool hold_model(hr_server *s, hr_job *j, hr_reply *err) {
    char *colon = strrchr(j->model, ':');
    if (colon && hr__pool_resolve(s->pool, j->model) < 0) {
        *colon = 0;
        if (hr__pool_resolve(s->pool, j->model) >= 0)
            j->adapter_name = colon + 1;
        else
            *colon = ':';
    }
    bool ok = hr__model_hold(s, j->model, &j->m, err);
    if (j->adapter_name)
        *colon = ':';
    if (!ok)
        return false;
    j->pool = s->pool;
    return true;
}

json_t *hr__body_parse(const char *body, size_t len, hr_reply *err) {
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) {
        *err = hr__error_reply(400, "invalid_request_error", NULL,
                               "Invalid JSON in request body: %s (line %d, column %d)",
                               je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        *err = hr__error_reply(400, "invalid_request_error", NULL,
                               "Request should be a JSON dictionary");
        return NULL;
    }
    return root;
}

/* Speculative decoding: spec ("off", "ngram", "draft"), num_draft_tokens and
 * mlx_lm.server's draft_model ("default_model" or the loaded one). */
static bool parse_spec(fields *f, hr_server *s, hr_job *j) {
    const json_t *sp = field(f, "spec"), *dm = field(f, "draft_model");
    if (sp && !json_is_string(sp))
        return fail(f, "spec", "%s must be \"off\", \"ngram\" or \"draft\"", "spec");
    if (dm && !json_is_string(dm))
        return fail(f, "draft_model", "%s must be a string", "draft_model");
    long k = integer(f, "num_draft_tokens", -1, 0, HR_SPEC_MAX_K);
    if (f->bad)
        return false;
    hr_error e = {0};
    if (hr__session_spec(j->m->session, sp ? json_string_value(sp) : NULL, (int)k,
                         dm ? json_string_value(dm) : NULL, &j->rp.spec, &j->rp.num_draft, &e)) {
        const char *param = !strncmp(e.msg, "draft_model", 11) ? "draft_model"
                            : !strncmp(e.msg, "num_draft", 9)  ? "num_draft_tokens"
                                                               : "spec";
        return fail(f, param, "%s", e.msg);
    }
    return true;
}

/* The LoRA adapter: "adapter" (or mlx_lm.server's "adapters"), a name the
 * server registered (--adapter-path, --adapters, POST /v1/adapters), or the
 * model field's "base:adapter"; none: the server's default. Loaded on first
 * use; an unknown name is a 404 like an unknown model. */
static bool parse_adapter(fields *f, hr_server *s, hr_job *j, hr_reply *err) {
    const char *key = field(f, "adapter") ? "adapter" : "adapters";
    const json_t *a = field(f, key);
    if (a && !json_is_string(a))
        return fail(f, key, "%s must be a string", key);
    const char *name = a ? json_string_value(a) : j->adapter_name;
    hr_error e = {0};
    int rc = hr__session_adapter_get(j->m->session, name, &j->rp.adapter, &e);
    if (rc == HR_ENOTFOUND) {
        *err = hr__error_reply(404, "invalid_request_error", a ? key : "model", "%s", e.msg);
        return false;
    }
    if (rc) {
        *err = hr__error_reply(400, "invalid_request_error", a ? key : "model", "%s", e.msg);
        return false;
    }
    return true;
}

bool hr__job_parse(hr_server *s, bool chat, const char *body, size_t len, hr_job *j,
                   hr_reply *err) {
    memset(j, 0, sizeof *j);
    json_t *root = hr__body_parse(body, len, err);
    if (!root)
        return false;
    bool ok = hr__job_from_json(s, chat, root, j, err);
    json_decref(root);
    return ok;
}

bool hr__job_from_json(hr_server *s, bool chat, const json_t *root, hr_job *j,
                       hr_reply *err) {
    memset(j, 0, sizeof *j);
    j->chat = chat;
    fields f = {root, err, false};
    const json_t *m = field(&f, "model");
    if (m && !json_is_string(m))
        fail(&f, "model", "%s must be a string", "model");
    j->model = strdup(m && json_is_string(m) ? json_string_value(m) : "default_model");
    if (f.bad || !j->model || !hold_model(s, j, err))
        return false;
    defaults d = resolve_defaults(s, j->m);
    hr_sampler_params *sp = &j->rp.sampler;
    hr_sampler_params_default(sp);
    j->stream = boolean(&f, "stream", false);
    const json_t *so = field(&f, "stream_options");
    if (so && !json_is_object(so))
        fail(&f, "stream_options", "%s must be an object", "stream_options");
    j->include_usage = so && json_is_true(json_object_get(so, "include_usage"));
    /* any non-negative count: the engine caps it to what the context leaves
     * after the prompt (n_ctx - prompt tokens, as llama-server and vLLM) */
    j->rp.max_tokens = count(&f, "max_tokens", d.max_tokens);
    if (field(&f, "max_completion_tokens"))
        j->rp.max_tokens = count(&f, "max_completion_tokens", j->rp.max_tokens);
    sp->temp = (float)number(&f, "temperature", d.temp, 0, 1e6);
    sp->top_p = (float)number(&f, "top_p", d.top_p, 0, 1);
    sp->top_k = (int)integer(&f, "top_k", d.top_k, 0, 1L << 30);
    sp->min_p = (float)number(&f, "min_p", d.min_p, 0, 1);
    sp->repetition_penalty = (float)number(&f, "repetition_penalty", d.rep, 0, 1e6);
    sp->repetition_context_size = (int)integer(&f, "repetition_context_size", 20, 0, 1L << 30);
    sp->presence_penalty = (float)number(&f, "presence_penalty", 0, -1e6, 1e6);
    sp->presence_context_size = (int)integer(&f, "presence_context_size", 20, 0, 1L << 30);
    sp->frequency_penalty = (float)number(&f, "frequency_penalty", 0, -1e6, 1e6);
    sp->frequency_context_size = (int)integer(&f, "frequency_context_size", 20, 0, 1L << 30);
    sp->xtc_probability = (float)number(&f, "xtc_probability", 0, 0, 1);
    sp->xtc_threshold = (float)number(&f, "xtc_threshold", 0.1, 0, 0.5);
    if (sp->top_k >= j->m->model->hp.n_vocab)
        fail(&f, "top_k", "%s must be smaller than the vocabulary", "top_k");
    const json_t *seed = field(&f, "seed");
    if (seed && !json_is_integer(seed))
        fail(&f, "seed", "%s must be an integer", "seed");
    sp->seed = seed ? (uint64_t)json_integer_value(seed) : (uint64_t)(hr_now() * 1e9);
    j->logprobs = boolean(&f, "logprobs", false);
    j->top_logprobs = (int)integer(&f, "top_logprobs", -1, -1, HR_API_MAX_TOP_LOGPROBS);
    if (j->top_logprobs < 0)
        j->top_logprobs = 0;
    j->rp.top_logprobs = j->top_logprobs;
    j->n = (int)integer(&f, "n", 1, 1, HR_API_MAX_N);
    if (!f.bad)
        parse_spec(&f, s, j);
    if (!f.bad && !parse_adapter(&f, s, j, err))
        return false;
    if (!f.bad)
        parse_stops(&f, j);
    if (!f.bad)
        parse_bias(&f, j);
    if (!f.bad && chat)
        parse_tool_choice(&f, j);
    if (!f.bad)
        parse_constraint(&f, s, j);
    if (!f.bad)
        build_prompt(s, &f, chat, j);
    if (f.bad)
        return false;
    /* XTC never removes end-of-sequence tokens (mlx-lm adds "\n" too) */
    sp->xtc_special = j->m->stop_ids;
    sp->n_xtc_special = j->m->n_stop_ids;
    j->rp.prompt = j->prompt.ids;
    j->rp.n_prompt = (int)j->prompt.n;
    j->rp.stop_ids = j->m->stop_ids;
    j->rp.n_stop_ids = j->m->n_stop_ids;
    j->rp.images = j->media.req;
    j->rp.n_images = j->media.n;
    return true;
}

void hr__job_free(hr_job *j) {
    hr_adapter_unref(j->rp.adapter);
    j->rp.adapter = NULL;
    if (j->m)
        hr__pool_release(j->pool, j->m);
    j->m = NULL;
    json_decref(j->tools);
    hr__job_media_free(&j->media);
    hr_grammar_free(j->grammar);
    hr_tokens_free(&j->prompt);
    free(j->bias_ids);
    free(j->bias_vals);
    for (int i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    free(j->model);
}
