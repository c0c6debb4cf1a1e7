/* Chat front end: JSON request pieces -> template variables -> prompt, and
 * finding a model directory's chat template. */
#include "chat/chat.h"
#include "chat/jinja.h"
#include "core/error.h"
#include "core/file.h"
#include "tokenizer/tokenizer.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct hr_chat_template {
    hr_jinja *j;
};

int hr_chat_template_new(hr_chat_template **out, const char *src, size_t len, hr_error *err) {
    *out = NULL;
    hr_chat_template *t = calloc(1, sizeof *t);
    if (!t)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int rc = hr_jinja_compile(&t->j, src, len, err);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void hr_chat_template_free(hr_chat_template *t) {
    if (!t)
        return;
    hr_jinja_free(t->j);
    free(t);
}

/* ---- variables ----------------------------------------------------------------- */

static int set_json(hr_jv vars, const char *key, const json_t *j, hr_error *err) {
    hr_jv v;
    int rc = hr_jinja_value_from_json(j, &v, err);
    if (rc)
        return hr_err_wrap(err, "%s", key);
    hr_jv k = hr__jv_cstr(key);
    if (hr__jv_oom(k)) {
        hr__jv_unref(v);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    rc = hr__jv_dict_set(vars, k, v);
    return rc ? hr_err(err, rc, "out of memory") : 0;
}

static int set_value(hr_jv vars, const char *key, hr_jv v, hr_error *err) {
    hr_jv k = hr__jv_cstr(key);
    if (hr__jv_oom(k) || hr__jv_oom(v)) {
        hr__jv_unref(k);
        hr__jv_unref(v);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    int rc = hr__jv_dict_set(vars, k, v);
    return rc ? hr_err(err, rc, "out of memory") : 0;
}

static int reserved(const char *key) {
    return !strcmp(key, "messages") || !strcmp(key, "tools") || !strcmp(key, "documents") ||
           !strcmp(key, "add_generation_prompt");
}

static int add_kwargs(hr_jv vars, const json_t *kw, hr_error *err) {
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)kw, key, val) {
        if (!strcmp(key, "chat_template_kwargs") && json_is_object(val)) {
            int rc = add_kwargs(vars, val, err);
            if (rc)
                return rc;
            continue;
        }
        if (reserved(key))
            return hr_err(err, HR_EINVAL, "kwargs: '%s' cannot be overridden", key);
        int rc = set_json(vars, key, val, err);
        if (rc)
            return rc;
    }
    return 0;
}

int hr_chat_template_render(const hr_chat_template *t, const json_t *messages,
                            const json_t *tools, const json_t *kwargs,
                            const hr_chat_opts *opts, char **out, hr_error *err) {
    *out = NULL;
    hr_chat_opts o = {0};
    if (opts)
        o = *opts;
    if (!messages || !json_is_array(messages))
        return hr_err(err, HR_EINVAL, "messages must be a JSON array");
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return hr_err(err, HR_EINVAL, "tools must be a JSON array");
    if (kwargs && !json_is_object(kwargs))
        return hr_err(err, HR_EINVAL, "kwargs must be a JSON object");
    hr_jv vars = hr__jv_dict(16);
    if (hr__jv_oom(vars))
        return hr_err(err, HR_ENOMEM, "out of memory");
    int rc = 0;
    if (o.bos_token)
        rc = set_value(vars, "bos_token", hr__jv_cstr(o.bos_token), err);
    if (!rc && o.eos_token)
        rc = set_value(vars, "eos_token", hr__jv_cstr(o.eos_token), err);
    if (!rc && kwargs)
        rc = add_kwargs(vars, kwargs, err);
    if (!rc)
        rc = set_json(vars, "messages", messages, err);
    if (!rc)
        rc = tools && !json_is_null(tools) ? set_json(vars, "tools", tools, err)
                                            : set_value(vars, "tools", hr__jv_none(), err);
    if (!rc)
        rc = set_value(vars, "documents", hr__jv_none(), err);
    if (!rc)
        rc = set_value(vars, "add_generation_prompt", hr__jv_bool(o.add_generation_prompt), err);
    if (!rc) {
        hr_jinja_opts jo = {.max_output = o.max_output, .max_steps = o.max_steps,
                           .has_now = o.has_now, .now = o.now};
        rc = hr_jinja_render(t->j, vars, &jo, out, NULL, err);
    }
    hr__jv_unref(vars);
    return rc;
}

int hr_chat_render(const char *template_src, const json_t *messages, const json_t *tools,
                   const json_t *kwargs, const hr_chat_opts *opts, char **out,
                   hr_error *err) {
    hr_chat_template *t;
    *out = NULL;
    int rc = hr_chat_template_new(&t, template_src, strlen(template_src), err);
    if (rc)
        return rc;
    rc = hr_chat_template_render(t, messages, tools, kwargs, opts, out, err);
    hr_chat_template_free(t);
    return rc;
}

/* ---- model directories ---------------------------------------------------------------- */

static json_t *load_json(const char *dir, const char *name, hr_error *err, int *rc) {
    char path[PATH_MAX];
    *rc = 0;
    if (hr_path_join(path, sizeof path, dir, name))
        return *rc = hr_err(err, HR_ERANGE, "path too long: %s/%s", dir, name), NULL;
    if (!hr_file_exists(path))
        return NULL;
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        *rc = hr_err(err, HR_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
    return j;
}

/* A special token: "text" or {"content": "text", ...}. */
static char *token_text(const json_t *v) {
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static int pick_template(const json_t *ct, const char *name, int has_tools, char **out,
                         hr_error *err) {
    if (json_is_string(ct)) {
        *out = strdup(json_string_value(ct));
        return *out ? 0 : hr_err(err, HR_ENOMEM, "out of memory");
    }
    if (!json_is_array(ct))
        return hr_err(err, HR_EFORMAT, "chat_template must be a string or a list of templates");
    const char *want[3] = {name, NULL, NULL};
    if (!name) {
        want[0] = has_tools ? "tool_use" : "default";
        want[1] = "default";
    }
    for (int w = 0; w < 2 && want[w]; w++) {
        size_t i;
        json_t *e;
        json_array_foreach(ct, i, e) {
            const char *n = json_string_value(json_object_get(e, "name"));
            const char *tpl = json_string_value(json_object_get(e, "template"));
            if (n && tpl && !strcmp(n, want[w])) {
                *out = strdup(tpl);
                return *out ? 0 : hr_err(err, HR_ENOMEM, "out of memory");
            }
        }
    }
    return hr_err(err, HR_ENOTFOUND, "no chat template named '%s'", name ? name : "default");
}

int hr_chat_model_load(hr_chat_model_files *out, const char *dir, const char *name,
                       int has_tools, hr_error *err) {
    memset(out, 0, sizeof *out);
    int rc = 0;
    char path[PATH_MAX];
    json_t *cfg = load_json(dir, "tokenizer_config.json", err, &rc), *stm = NULL, *ctj = NULL;
    if (rc)
        goto fail;
    if ((rc = hr_path_join(path, sizeof path, dir, "chat_template.jinja"))) {
        rc = hr_err(err, rc, "path too long");
        goto fail;
    }
    if (hr_file_exists(path)) {
        if ((rc = hr_file_read(path, &out->template_src, NULL, err)))
            goto fail;
    } else if ((ctj = load_json(dir, "chat_template.json", err, &rc)) || rc) {
        if (rc)
            goto fail;
        if ((rc = pick_template(json_object_get(ctj, "chat_template"), name, has_tools,
                                &out->template_src, err)))
            goto fail;
    } else if (cfg && json_object_get(cfg, "chat_template")) {
        if ((rc = pick_template(json_object_get(cfg, "chat_template"), name, has_tools,
                                &out->template_src, err)))
            goto fail;
    } else {
        rc = hr_err(err, HR_ENOTFOUND,
                    "%s: no chat template (chat_template.jinja, chat_template.json or "
                    "tokenizer_config.json \"chat_template\")", dir);
        goto fail;
    }
    if (cfg) {
        out->bos_token = token_text(json_object_get(cfg, "bos_token"));
        out->eos_token = token_text(json_object_get(cfg, "eos_token"));
    }
    if (!out->bos_token || !out->eos_token) {
        stm = load_json(dir, "special_tokens_map.json", err, &rc);
        if (rc)
            goto fail;
        if (stm && !out->bos_token)
            out->bos_token = token_text(json_object_get(stm, "bos_token"));
        if (stm && !out->eos_token)
            out->eos_token = token_text(json_object_get(stm, "eos_token"));
    }
    json_decref(cfg);
    json_decref(stm);
    json_decref(ctj);
    return 0;
fail:
    json_decref(cfg);
    json_decref(stm);
    json_decref(ctj);
    hr_chat_model_files_free(out);
    return rc;
}

void hr_chat_model_files_free(hr_chat_model_files *f) {
    if (!f)
        return;
    free(f->template_src);
    free(f->bos_token);
    free(f->eos_token);
    memset(f, 0, sizeof *f);
}

bool hr_chat_is_gguf(const char *path) {
    size_t n = strlen(path);
    return n > 5 && !strcmp(path + n - 5, ".gguf");
}

int hr_chat_gguf_load(hr_chat_model_files *f, const hr_tokenizer *t, const char *path,
                      bool have_override, hr_error *err) {
    const char *tmpl = hr_tokenizer_chat_template(t);
    if (!tmpl && !have_override)
        return hr_err(err, HR_ENOTFOUND, "%s: no chat template (tokenizer.chat_template)", path);
    int32_t ids[2] = {hr_tokenizer_bos(t), hr_tokenizer_eos(t)};
    char **dst[2] = {&f->bos_token, &f->eos_token};
    for (int i = 0; i < 2; i++) {
        size_t len;
        const char *p = ids[i] >= 0 ? hr_tokenizer_token_to_piece(t, ids[i], &len) : NULL;
        if (p && !(*dst[i] = strndup(p, len)))
            goto oom;
    }
    if (tmpl && !(f->template_src = strdup(tmpl)))
        goto oom;
    return 0;
oom:
    hr_chat_model_files_free(f);
    return hr_err(err, HR_ENOMEM, "out of memory");
}
