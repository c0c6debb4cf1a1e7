#include "train/config.h"
#include "core/error.h"
#include "train/lora_params.h"
#include "train/loss.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hr_train_cfg_default(hr_train_cfg *c) {
    *c = (hr_train_cfg){.iters = 1000, .batch_size = 4, .num_layers = 16, .rank = 8,
                        .max_seq_length = 2048, .val_batches = 25, .steps_per_report = 10,
                        .steps_per_eval = 200, .save_every = 100, .seed = 0,
                        .learning_rate = 1e-5, .scale = 20.0, .weight_decay = 0.01,
                        .loss = HR_LOSS_SFT, .beta = 0.1, .grad_accum = 1};
    for (int s = 0; s < HR_LORA_SLOTS; s++)
        c->keys[s] = true;
}

void hr_train_cfg_deinit(hr_train_cfg *c) {
    json_decref(c->file);
    c->file = NULL;
}

/* ---- YAML subset -> JSON -------------------------------------------------------------- */

/* a scalar as YAML reads it: null, true/false, a number, else a string
 * (quotes removed) */
static json_t *scalar(const char *s, size_t n) {
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    while (n && isspace((unsigned char)*s))
        s++, n--;
    if (n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0])
        return json_stringn(s + 1, n - 2);
    char buf[64];
    if (n < sizeof buf) {
        memcpy(buf, s, n);
        buf[n] = 0;
        if (!n || !strcmp(buf, "null") || !strcmp(buf, "~"))
            return json_null();
        if (!strcmp(buf, "true") || !strcmp(buf, "True"))
            return json_true();
        if (!strcmp(buf, "false") || !strcmp(buf, "False"))
            return json_false();
        char *end;
        long long v = strtoll(buf, &end, 10);
        if (!*end)
            return json_integer(v);
        double d = strtod(buf, &end);
        if (!*end && isfinite(d))
            return json_real(d);
    }
    return json_stringn(s, n);
}

/* "[a, b]" -> array of scalars */
static json_t *flow_list(const char *s, size_t n) {
    json_t *a = json_array();
    size_t i = 1, j;
    while (a && i < n - 1) {
        for (j = i; j < n - 1 && s[j] != ','; j++)
            ;
        if (j > i)
            json_array_append_new(a, scalar(s + i, j - i));
        i = j + 1;
    }
    return a;
}

static int yaml_to_json(const char *name, const char *text, size_t len, json_t **out,
                        hr_error *err) {
    json_t *root = json_object(), *block = NULL, *list = NULL;
    int line = 0;
    for (size_t p = 0; p < len && root;) {
        const char *nl = memchr(text + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - text) : len;
        const char *s = text + p;
        size_t n = e - p;
        p = e + 1;
        line++;
        for (size_t i = 0; i < n; i++) /* comments (not inside quotes: none in mlx's) */
            if (s[i] == '#' && (i == 0 || isspace((unsigned char)s[i - 1]))) {
                n = i;
                break;
            }
        size_t ind = 0;
        while (ind < n && s[ind] == ' ')
            ind++;
        while (n > ind && isspace((unsigned char)s[n - 1]))
            n--;
        if (n == ind)
            continue;
        if (s[ind] == '-') { /* a list item of the key before */
            if (!list) {
                json_decref(root);
                return hr_err(err, HR_EFORMAT, "%s:%d: a list item without a key", name,
                              line);
            }
            json_array_append_new(list, scalar(s + ind + 1, n - ind - 1));
            continue;
        }
        const char *colon = memchr(s + ind, ':', n - ind);
        if (!colon) {
            json_decref(root);
            return hr_err(err, HR_EFORMAT, "%s:%d: expected 'key: value'", name, line);
        }
        if (ind == 0)
            block = NULL;
        else if (!block) {
            json_decref(root);
            return hr_err(err, HR_EFORMAT, "%s:%d: indented without a block above", name,
                          line);
        }
        json_t *obj = block ? block : root;
        char key[128];
        size_t kl = (size_t)(colon - (s + ind));
        if (kl >= sizeof key)
            kl = sizeof key - 1;
        memcpy(key, s + ind, kl);
        key[kl] = 0;
        const char *v = colon + 1;
        size_t vn = (size_t)(s + n - v);
        while (vn && isspace((unsigned char)*v))
            v++, vn--;
        list = NULL;
        if (vn == 0 && obj == root) { /* a block follows */
            block = json_object();
            json_object_set_new(root, key, block);
        } else if (vn == 0) { /* "- item" lines follow */
            list = json_array();
            json_object_set_new(obj, key, list);
        } else if (v[0] == '[' && v[vn - 1] == ']') {
            json_object_set_new(obj, key, flow_list(v, vn));
        } else if (v[0] == '{') {
            json_error_t je;
            json_t *o = json_loadb(v, vn, 0, &je);
            json_object_set_new(obj, key, o ? o : json_object());
        } else {
            json_object_set_new(obj, key, scalar(v, vn));
        }
    }
    if (!root)
        return hr_err(err, HR_ENOMEM, "out of memory");
    *out = root;
    return 0;
}

/* ---- JSON -> options ---------------------------------------------------------------------- */

static int num(const json_t *v, const char *name, const char *key, double *out, hr_error *err) {
    if (!json_is_number(v))
        return hr_err(err, HR_EINVAL, "%s: '%s' must be a number", name, key);
    *out = json_number_value(v);
    return 0;
}

static int lora_params(hr_train_cfg *c, const char *name, const json_t *lp, hr_error *err) {
    const char *k;
    const json_t *v;
    double d = 0;
    int rc = 0;
    json_object_foreach((json_t *)lp, k, v) {
        if (!strcmp(k, "rank")) {
            if (!(rc = num(v, name, "lora_parameters.rank", &d, err)))
                c->rank = (long)d;
        } else if (!strcmp(k, "scale")) {
            if (!(rc = num(v, name, "lora_parameters.scale", &d, err)))
                c->scale = d;
        } else if (!strcmp(k, "dropout")) {
            if (!(rc = num(v, name, "lora_parameters.dropout", &d, err)) && d != 0)
                rc = hr_err(err, HR_EUNSUPPORTED, "%s: not supported yet: LoRA dropout %g "
                            "(0 only)", name, d);
        } else if (!strcmp(k, "keys") && !json_is_null(v)) {
            if (!json_is_array(v))
                return hr_err(err, HR_EINVAL, "%s: lora_parameters.keys must be a list", name);
            for (int s = 0; s < HR_LORA_SLOTS; s++)
                c->keys[s] = false;
            size_t i;
            const json_t *e;
            json_array_foreach(v, i, e) {
                const char *ks = json_string_value(e);
                int slot = -1;
                for (int s = 0; s < HR_LORA_SLOTS && ks; s++)
                    if (!strcmp(ks, hr_lora_slot_path(s)))
                        slot = s;
                if (slot < 0)
                    return hr_err(err, HR_EUNSUPPORTED, "%s: lora_parameters.keys: '%s' "
                                  "(not supported yet: hearth trains self_attn.{q,k,v,o}_proj "
                                  "and mlp.{gate,up,down}_proj)", name, ks ? ks : "?");
                c->keys[slot] = true;
            }
        }
        if (rc)
            return rc;
    }
    return 0;
}

static int apply(hr_train_cfg *c, const char *name, const json_t *o, hr_error *err) {
    static const struct {
        const char *key;
        size_t off;
    } LONGS[] = {
        {"iters", offsetof(hr_train_cfg, iters)},
        {"batch_size", offsetof(hr_train_cfg, batch_size)},
        {"num_layers", offsetof(hr_train_cfg, num_layers)},
        {"max_seq_length", offsetof(hr_train_cfg, max_seq_length)},
        {"val_batches", offsetof(hr_train_cfg, val_batches)},
        {"steps_per_report", offsetof(hr_train_cfg, steps_per_report)},
        {"steps_per_eval", offsetof(hr_train_cfg, steps_per_eval)},
        {"save_every", offsetof(hr_train_cfg, save_every)},
        {"seed", offsetof(hr_train_cfg, seed)},
    };
    const char *k;
    const json_t *v;
    double d = 0;
    int rc = 0;
    json_object_foreach((json_t *)o, k, v) {
        for (size_t i = 0; i < sizeof LONGS / sizeof *LONGS; i++)
            if (!strcmp(k, LONGS[i].key)) {
                if ((rc = num(v, name, k, &d, err)))
                    return rc;
                *(long *)((char *)c + LONGS[i].off) = (long)d;
            }
        if (!strcmp(k, "learning_rate")) {
            if ((rc = num(v, name, k, &d, err)))
                return rc;
            c->learning_rate = d;
        } else if (!strcmp(k, "beta")) {
            if ((rc = num(v, name, k, &d, err)))
                return rc;
            c->beta = d;
        } else if ((!strcmp(k, "loss") || !strcmp(k, "train_mode")) && json_is_string(v)) {
            int kind = hr_loss_parse(json_string_value(v));
            if (kind < 0)
                return hr_err(err, HR_EUNSUPPORTED, "%s: not supported yet: %s '%s' (sft, "
                              "dpo, orpo)", name, k, json_string_value(v));
            c->loss = kind;
        } else if (!strcmp(k, "model") && json_is_string(v)) {
            c->model = json_string_value(v);
        } else if (!strcmp(k, "data") && json_is_string(v)) {
            c->data = json_string_value(v);
        } else if (!strcmp(k, "adapter_path") && json_is_string(v)) {
            c->out = json_string_value(v);
        } else if (!strcmp(k, "resume_adapter_file") && json_is_string(v)) {
            c->resume = json_string_value(v);
        } else if (!strcmp(k, "mask_prompt")) {
            c->mask_prompt = json_is_true(v);
        } else if (!strcmp(k, "grad_checkpoint")) {
            c->grad_checkpoint = json_is_true(v);
        } else if (!strcmp(k, "optimizer") && json_is_string(v)) {
            const char *s = json_string_value(v);
            if (strcmp(s, "adam") && strcmp(s, "adamw"))
                return hr_err(err, HR_EUNSUPPORTED, "%s: not supported yet: optimizer '%s' "
                              "(adam, adamw)", name, s);
            c->adamw = !strcmp(s, "adamw");
        } else if (!strcmp(k, "optimizer_config") && json_is_object(v)) {
            const json_t *w = json_object_get(json_object_get(v, "adamw"), "weight_decay");
            if (w && !(rc = num(w, name, "optimizer_config.adamw.weight_decay", &d, err)))
                c->weight_decay = d;
        } else if (!strcmp(k, "lora_parameters") && json_is_object(v)) {
            rc = lora_params(c, name, v, err);
        } else if (!strcmp(k, "fine_tune_type") && json_is_string(v) &&
                   strcmp(json_string_value(v), "lora")) {
            rc = hr_err(err, HR_EUNSUPPORTED, "%s: not supported yet: fine_tune_type '%s' "
                        "(lora)", name, json_string_value(v));
        } else if (!strcmp(k, "lr_schedule") && !json_is_null(v)) {
            if (!(rc = hr_sched_parse(&c->sched, v, name, err)))
                c->has_sched = true;
        } else if (!strcmp(k, "grad_accumulation_steps") && !json_is_null(v)) {
            if (!(rc = num(v, name, k, &d, err)) && !(d >= 1 && d <= 1e9))
                rc = hr_err(err, HR_EINVAL, "%s: grad_accumulation_steps must be >= 1", name);
            if (!rc)
                c->grad_accum = (long)d;
        }
        if (rc)
            return rc;
    }
    return 0;
}

int hr_train_cfg_parse(hr_train_cfg *c, const char *name, const char *text, size_t len,
                       hr_error *err) {
    size_t i = 0;
    while (i < len && isspace((unsigned char)text[i]))
        i++;
    json_t *o = NULL;
    int rc;
    if (i < len && text[i] == '{') {
        json_error_t je;
        if (!(o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je)))
            return hr_err(err, HR_EFORMAT, "%s:%d: %s", name, je.line, je.text);
        if (!json_is_object(o)) {
            json_decref(o);
            return hr_err(err, HR_EFORMAT, "%s: not a JSON object", name);
        }
    } else if ((rc = yaml_to_json(name, text, len, &o, err))) {
        return rc;
    }
    json_decref(c->file);
    c->file = o;
    return apply(c, name, o, err);
}

json_t *hr_train_cfg_json(const hr_train_cfg *c) {
    json_t *o = json_pack(
        "{s:s?, s:s?, s:s?, s:s?, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:b, s:b, "
        "s:s, s:b, s:s, s:f}",
        "model", c->model, "data", c->data, "adapter_path", c->out, "resume_adapter_file",
        c->resume, "iters", (json_int_t)c->iters, "batch_size", (json_int_t)c->batch_size,
        "max_seq_length", (json_int_t)c->max_seq_length, "val_batches",
        (json_int_t)c->val_batches, "steps_per_report", (json_int_t)c->steps_per_report,
        "steps_per_eval", (json_int_t)c->steps_per_eval, "save_every",
        (json_int_t)c->save_every, "seed", (json_int_t)c->seed, "grad_accumulation_steps",
        (json_int_t)c->grad_accum, "learning_rate", c->learning_rate, "mask_prompt", c->mask_prompt,
        "grad_checkpoint", c->grad_checkpoint, "optimizer", c->adamw ? "adamw" : "adam",
        "train", 1, "loss", hr_loss_name(c->loss), "beta", c->beta);
    if (o && c->has_sched)
        json_object_set_new(o, "lr_schedule", hr_sched_json(&c->sched));
    return o;
}
