/* A session's LoRA adapters (include/hearth.h hr_session_adapter_*): a
 * registry of name -> directory, each loaded (model/adapter.h) on first
 * use and shared by every request that names it. Requests hold their own
 * reference (engine.h hr_req_params.adapter), so an adapter in use cannot
 * be removed and a removed one lives until its last request ends. */
#include "api/api.h"
#include "core/error.h"
#include "core/file.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

struct hr_adapter_slot {
    char *name, *path;
    hr_adapter *ad; /* NULL until first use */
};

static struct hr_adapter_slot *find(hr_session *s, const char *name) {
    for (int i = 0; i < s->n_ads; i++)
        if (!strcmp(s->ads[i].name, name))
            return &s->ads[i];
    return NULL;
}

static int load_slot(hr_session *s, struct hr_adapter_slot *a, hr_error *err) {
    if (a->ad)
        return 0;
    int rc = hr_adapter_open(&a->ad, s->llm->model, a->path, a->name, err);
    return rc ? hr_err_wrap(err, "adapter %s", a->name) : 0;
}

static bool name_ok(const char *n) {
    size_t len = strlen(n);
    if (len == 0 || len > 64 || !strcmp(n, "base") || !strcmp(n, "default_model"))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)n[i]) && !strchr("._-", n[i]))
            return false;
    return true;
}

/* under ad_mu */
static int add(hr_session *s, const char *name, const char *path, bool load_now,
               hr_error *err) {
    if (!name_ok(name))
        return hr_err(err, HR_EINVAL, "adapter name '%s': use 1-64 letters, digits, '.', '_' "
                      "or '-' (not \"base\" or \"default_model\")", name);
    if (find(s, name))
        return hr_err(err, HR_EINVAL, "adapter '%s' exists already (remove it first)", name);
    if (s->n_ads == s->cap_ads) {
        int cap = s->cap_ads ? 2 * s->cap_ads : 8;
        struct hr_adapter_slot *n = realloc(s->ads, (size_t)cap * sizeof *n);
        if (!n)
            return hr_err(err, HR_ENOMEM, "out of memory");
        s->ads = n;
        s->cap_ads = cap;
    }
    struct hr_adapter_slot a = {strdup(name), strdup(path), NULL};
    int rc = !a.name || !a.path ? hr_err(err, HR_ENOMEM, "out of memory")
             : load_now        ? load_slot(s, &a, err)
                               : 0;
    if (!rc && !load_now && !hr_dir_exists(path))
        rc = hr_err(err, HR_ENOTFOUND, "adapter %s: directory %s does not exist", name, path);
    if (rc) {
        free(a.name);
        free(a.path);
        hr_adapter_unref(a.ad);
        return rc;
    }
    s->ads[s->n_ads++] = a;
    return 0;
}

int hr__session_adapters_init(hr_session *s, const hr_session_opts *o, hr_error *err) {
    pthread_mutex_init(&s->ad_mu, NULL);
    s->ad_default = -1;
    s->ad_init = true;
    if (!o)
        return 0;
    int rc = 0;
    if (o->adapters) {
        char *list = strdup(o->adapters), *save = NULL;
        if (!list)
            return hr_err(err, HR_ENOMEM, "out of memory");
        for (char *tok = strtok_r(list, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(tok, '=');
            if (!eq || eq == tok || !eq[1]) {
                rc = hr_err(err, HR_EINVAL, "--adapters: '%s' is not name=DIR", tok);
                break;
            }
            *eq = 0;
            rc = add(s, tok, eq + 1, false, err);
        }
        free(list);
        if (rc)
            return rc;
    }
    if (o->adapter_path) {
        /* named after its directory, unless that name is taken */
        const char *base = strrchr(o->adapter_path, '/');
        base = base && base[1] ? base + 1 : o->adapter_path;
        char name[65];
        snprintf(name, sizeof name, "%s", base);
        if (!name_ok(name) || find(s, name))
            snprintf(name, sizeof name, "default");
        if ((rc = add(s, name, o->adapter_path, true, err)))
            return hr_err_wrap(err, "--adapter-path");
        s->ad_default = s->n_ads - 1;
    }
    return 0;
}

void hr__session_adapters_free(hr_session *s) {
    if (!s->ad_init)
        return;
    for (int i = 0; i < s->n_ads; i++) {
        free(s->ads[i].name);
        free(s->ads[i].path);
        hr_adapter_unref(s->ads[i].ad);
    }
    free(s->ads);
    pthread_mutex_destroy(&s->ad_mu);
}

int hr__session_adapter_get(hr_session *s, const char *name, hr_adapter **out,
                            hr_error *err) {
    *out = NULL;
    if (name && (!*name || !strcmp(name, "base")))
        return 0;
    pthread_mutex_lock(&s->ad_mu);
    int rc = 0;
    struct hr_adapter_slot *a = NULL;
    if (!name) {
        a = s->ad_default >= 0 ? &s->ads[s->ad_default] : NULL;
    } else if (!(a = find(s, name))) {
        for (int i = 0; i < s->n_ads && !a; i++) /* mlx_lm.server's field is a path */
            if (!strcmp(s->ads[i].path, name))
                a = &s->ads[i];
        if (!a)
            rc = hr_err(err, HR_ENOTFOUND, "adapter '%s' is not loaded (start with --adapters "
                        "%s=DIR, or POST /v1/adapters)", name, name);
    }
    if (a && !(rc = load_slot(s, a, err))) {
        hr_adapter_ref(a->ad);
        *out = a->ad;
    }
    pthread_mutex_unlock(&s->ad_mu);
    return rc;
}

int hr_session_adapter_add(hr_session *s, const char *name, const char *path, int load_now,
                           hr_error *err) {
    if (!s || !name || !path)
        return hr_err(err, HR_EINVAL, "hr_session_adapter_add: NULL argument");
    pthread_mutex_lock(&s->ad_mu);
    int rc = add(s, name, path, load_now != 0, err);
    pthread_mutex_unlock(&s->ad_mu);
    return rc;
}

int hr_session_adapter_remove(hr_session *s, const char *name, hr_error *err) {
    if (!s || !name)
        return hr_err(err, HR_EINVAL, "hr_session_adapter_remove: NULL argument");
    pthread_mutex_lock(&s->ad_mu);
    int rc = 0;
    struct hr_adapter_slot *a = find(s, name);
    if (!a) {
        rc = hr_err(err, HR_ENOTFOUND, "adapter '%s' is not loaded", name);
    } else if (a->ad && atomic_load(&a->ad->refs) > 1) {
        rc = hr_err(err, HR_EBUSY, "adapter '%s' is in use by %d request(s); remove it when "
                    "they end", name, atomic_load(&a->ad->refs) - 1);
    } else {
        int i = (int)(a - s->ads);
        free(a->name);
        free(a->path);
        hr_adapter_unref(a->ad);
        memmove(a, a + 1, (size_t)(s->n_ads - i - 1) * sizeof *a);
        s->n_ads--;
        if (s->ad_default == i)
            s->ad_default = -1;
        else if (s->ad_default > i)
            s->ad_default--;
    }
    pthread_mutex_unlock(&s->ad_mu);
    return rc;
}

char *hr_session_adapters_json(hr_session *s) {
    json_t *arr = json_array();
    pthread_mutex_lock(&s->ad_mu);
    for (int i = 0; arr && i < s->n_ads; i++) {
        const struct hr_adapter_slot *a = &s->ads[i];
        json_t *o = json_pack("{s:s,s:s,s:s,s:b,s:b}", "id", a->name, "object", "adapter",
                              "path", a->path, "loaded", a->ad != NULL, "default",
                              i == s->ad_default);
        if (o && a->ad) {
            json_object_set_new(o, "format", json_string(a->ad->format));
            json_object_set_new(o, "rank", json_integer(a->ad->max_rank));
            json_object_set_new(o, "dora", json_boolean(a->ad->dora));
        }
        json_array_append_new(arr, o);
    }
    pthread_mutex_unlock(&s->ad_mu);
    char *out = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return out;
}
