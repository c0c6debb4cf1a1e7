/* sentence-transformers configuration of an embedding model, and its
 * pooling. The files, as sentence-transformers saves them:
 *   modules.json                      [{"type": "sentence_transformers.models.Transformer",
 *                                       "path": ""}, {"type": "...Pooling", "path":
 *                                       "1_Pooling"}, {"type": "...Normalize", ...}]
 *                                       (6: "sentence_transformers.base.modules....")
 *   1_Pooling/config.json             pooling_mode_cls_token / _mean_tokens /
 *                                       _lasttoken / ..., include_prompt (6:
 *                                       "pooling_mode": "cls" | "mean" | "lasttoken")
 *   config_sentence_transformers.json prompts {name: text}, default_prompt_name
 *   sentence_bert_config.json         max_seq_length (6: tokenizer_config.json's
 *                                       model_max_length) */
#include "api/embed_cfg.h"
#include "core/error.h"
#include "core/file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *load(const char *dir, const char *name) {
    char p[4096];
    if (hr_path_join(p, sizeof p, dir, name) || !hr_file_exists(p))
        return NULL;
    return json_load_file(p, 0, NULL);
}

static bool flag(const json_t *o, const char *k) { return json_is_true(json_object_get(o, k)); }

/* the Pooling module's config: sentence-transformers <= 5 writes a flag per
 * mode (pooling_mode_cls_token, ..., word_embedding_dimension), 6 one
 * "pooling_mode" string (cls, mean, lasttoken, ...; embedding_dimension) */
static void read_pooling(hr_embed_cfg *c, const char *dir, const char *sub, int dim) {
    char rel[512];
    snprintf(rel, sizeof rel, "%s/config.json", sub);
    json_t *p = load(dir, rel);
    if (!json_is_object(p)) {
        snprintf(c->err, sizeof c->err, "%s: missing or not JSON", rel);
        json_decref(p);
        return;
    }
    json_t *pm = json_object_get(p, "pooling_mode");
    if (json_is_array(pm) && json_array_size(pm) == 1)
        pm = json_array_get(pm, 0);
    bool cls, mean, last;
    const char *other = NULL;
    if (pm) { /* sentence-transformers 6 */
        const char *m = json_string_value(pm);
        cls = m && !strcmp(m, "cls");
        mean = m && !strcmp(m, "mean");
        last = m && !strcmp(m, "lasttoken");
        if (!cls && !mean && !last)
            other = m ? m : "(not a string)";
    } else {
        cls = flag(p, "pooling_mode_cls_token");
        mean = flag(p, "pooling_mode_mean_tokens");
        last = flag(p, "pooling_mode_lasttoken");
        other = flag(p, "pooling_mode_max_tokens")            ? "max_tokens"
                : flag(p, "pooling_mode_mean_sqrt_len_tokens") ? "mean_sqrt_len_tokens"
                : flag(p, "pooling_mode_weightedmean_tokens")  ? "weightedmean_tokens"
                                                               : NULL;
    }
    json_t *wd = json_object_get(p, "word_embedding_dimension");
    if (!wd)
        wd = json_object_get(p, "embedding_dimension");
    if (other)
        snprintf(c->err, sizeof c->err, "not supported yet: pooling mode %.60s", other);
    else if (cls + mean + last != 1)
        snprintf(c->err, sizeof c->err, "not supported yet: %d pooling modes at once "
                 "(one of cls_token, mean_tokens, lasttoken is)", cls + mean + last);
    else if (json_is_integer(wd) && json_integer_value(wd) != dim)
        snprintf(c->err, sizeof c->err, "%s: embedding dimension %lld, the model's "
                 "hidden size is %d", rel, (long long)json_integer_value(wd), dim);
    c->pooling = cls ? HR_POOL_CLS : mean ? HR_POOL_MEAN : HR_POOL_LAST;
    json_t *ip = json_object_get(p, "include_prompt");
    c->include_prompt = !json_is_false(ip);
    json_decref(p);
}

static void read_modules(hr_embed_cfg *c, const char *dir, json_t *mods, int dim) {
    bool pooled = false;
    size_t i;
    json_t *x;
    if (!json_is_array(mods)) {
        snprintf(c->err, sizeof c->err, "modules.json is not a list");
        return;
    }
    json_array_foreach(mods, i, x) {
        const char *type = json_string_value(json_object_get(x, "type"));
        const char *path = json_string_value(json_object_get(x, "path"));
        const char *dot = type ? strrchr(type, '.') : NULL;
        const char *name = dot ? dot + 1 : type ? type : "";
        if (!strcmp(name, "Transformer") && i == 0)
            continue;
        if (!strcmp(name, "Pooling") && path && !pooled) {
            pooled = true;
            read_pooling(c, dir, path, dim);
            continue;
        }
        if (!strcmp(name, "Normalize")) {
            c->normalize = true;
            continue;
        }
        snprintf(c->err, sizeof c->err, "not supported yet: sentence-transformers module "
                 "%.100s (module %zu)", type ? type : "(no type)", i);
        return;
    }
    if (!pooled && !c->err[0])
        snprintf(c->err, sizeof c->err, "modules.json has no Pooling module");
}

int hr__embed_cfg_load(hr_embed_cfg *c, const char *dir, bool encoder, int dim) {
    memset(c, 0, sizeof *c);
    c->pooling = encoder ? HR_POOL_MEAN : HR_POOL_LAST;
    c->normalize = !encoder;
    c->include_prompt = true;
    if (!hr_dir_exists(dir))
        return 0;
    json_t *mods = load(dir, "modules.json");
    if (!mods) {
        char p[4096];
        if (!hr_path_join(p, sizeof p, dir, "modules.json") && hr_file_exists(p))
            snprintf(c->err, sizeof c->err, "modules.json is not valid JSON");
        return 0;
    }
    c->from_st = true;
    c->normalize = false;
    read_modules(c, dir, mods, dim);
    json_decref(mods);
    /* max_seq_length: sentence_bert_config.json (sentence-transformers <= 5),
     * else the tokenizer's model_max_length (6 keeps it there) */
    json_t *sb = load(dir, "sentence_bert_config.json");
    json_t *ms = json_object_get(sb, "max_seq_length"), *tc = NULL;
    if (!json_is_integer(ms)) {
        tc = load(dir, "tokenizer_config.json");
        ms = json_object_get(tc, "model_max_length");
    }
    if (json_is_integer(ms) && json_integer_value(ms) > 0 && json_integer_value(ms) < 1 << 24)
        c->max_seq = (int)json_integer_value(ms);
    json_decref(tc);
    if (json_is_true(json_object_get(sb, "do_lower_case")) && !c->err[0])
        snprintf(c->err, sizeof c->err, "not supported yet: sentence_bert_config.json "
                 "do_lower_case (Python's str.lower before the tokenizer)");
    json_decref(sb);
    json_t *st = load(dir, "config_sentence_transformers.json");
    json_t *pr = json_object_get(st, "prompts");
    const char *dp = json_string_value(json_object_get(st, "default_prompt_name"));
    int rc = 0;
    if (json_is_object(pr)) {
        const char *k;
        json_t *v;
        json_object_foreach(pr, k, v)
            if (!json_is_string(v) && !c->err[0])
                snprintf(c->err, sizeof c->err, "config_sentence_transformers.json: prompt "
                         "'%.60s' is not a string", k);
        c->prompts = json_incref(pr);
    }
    if (dp && !(c->default_prompt = strdup(dp)))
        rc = HR_ENOMEM;
    if (dp && !c->err[0] && !json_is_string(json_object_get(c->prompts, dp)))
        snprintf(c->err, sizeof c->err, "config_sentence_transformers.json: "
                 "default_prompt_name '%.60s' is not one of its prompts", dp);
    json_decref(st);
    return rc;
}

void hr__embed_cfg_free(hr_embed_cfg *c) {
    json_decref(c->prompts);
    free(c->default_prompt);
    memset(c, 0, sizeof *c);
}

int hr__embed_prompt(const hr_embed_cfg *c, const char *prompt_name, const char **prompt,
                     hr_error *err) {
    *prompt = NULL;
    const char *name = prompt_name ? prompt_name : c->default_prompt;
    if (!name || !*name)
        return 0;
    json_t *v = json_object_get(c->prompts, name);
    if (!json_is_string(v)) {
        char known[160] = "";
        const char *k;
        json_t *x;
        json_object_foreach(c->prompts, k, x)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s'%s'",
                     known[0] ? ", " : "", k);
        return hr_err(err, HR_EINVAL, "unknown prompt_name '%.60s' (this model's prompts: %s)",
                      name, known[0] ? known : "none");
    }
    *prompt = json_string_value(v);
    return 0;
}

static void unit(float *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    double nrm = sqrt(s);
    float r = (float)(1.0 / (nrm > 1e-12 ? nrm : 1e-12)); /* torch F.normalize's eps */
    for (int i = 0; i < n; i++)
        v[i] *= r;
}

void hr__embed_pool(const hr_embed_cfg *c, const float *h, int n, int d, int dims,
                    float *full, float *out) {
    switch (c->pooling) {
    case HR_POOL_CLS:
        memcpy(full, h, (size_t)d * sizeof *h);
        break;
    case HR_POOL_LAST:
        memcpy(full, h + (size_t)(n - 1) * d, (size_t)d * sizeof *h);
        break;
    case HR_POOL_MEAN:
        for (int i = 0; i < d; i++) {
            double s = 0;
            for (int t = 0; t < n; t++)
                s += h[(size_t)t * d + i];
            full[i] = (float)(s / n);
        }
        break;
    }
    if (c->normalize)
        unit(full, d);
    memcpy(out, full, (size_t)dims * sizeof *out);
    if (dims < d) /* Matryoshka: the head, at unit length again */
        unit(out, dims);
}
