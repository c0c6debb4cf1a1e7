/* The server's models (pool.h): names, loading on first use, least-recently-
 * used eviction under --pool-bytes. */
#include "server/pool.h"
#include "server/media.h"
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/timer.h"
#include "io/hfcache.h"

#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_NAMES 8 /* names of one model: its id and aliases */

typedef struct entry {
    char *names[MAX_NAMES]; /* names[0]: its id; then aliases */
    int n_names;
    char *spec;             /* as given on the command line */
    char *path;             /* its files */
    char *real;             /* realpath of path (NULL when it has none) */
    hr_served *m;           /* loaded, or NULL */
    int refs;               /* requests holding m */
    bool loading;
    double last_used;
    size_t bytes;           /* weights + KV pool + grammar mask cache, as last counted
                             * (0: not loaded yet) */
} entry;

struct hr_pool {
    const hr_server_opts *o;
    entry *e;
    int n;
    size_t budget, loaded_bytes;
    long loads, evictions;
    char dead[256];         /* hr__pool_dead's answer */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* ---- names ------------------------------------------------------------------------------ */

/* What /v1/models calls a model: "org/name" for a Hugging Face cache
 * snapshot, else the path's last component (a GGUF file's without .gguf
 * only in a --model-dir; as given elsewhere). */
static char *id_of_path(const char *path) {
    char repo[256];
    if (!hr_hf_repo_of_path(repo, sizeof repo, path))
        return strdup(repo);
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    return strndup(path + b, n - b);
}

int hr__pool_resolve(const hr_pool *p, const char *name) {
    if (!name || !*name || !strcmp(name, "default_model"))
        return p->n ? 0 : -1;
    for (int i = 0; i < p->n; i++) {
        const entry *e = &p->e[i];
        for (int k = 0; k < e->n_names; k++)
            if (!strcmp(name, e->names[k]))
                return i;
        if (!strcmp(name, e->spec) || !strcmp(name, e->path))
            return i;
    }
    /* a path or an ORG/NAME[@REV] that resolves to a served model's files */
    char named[HR_HF_PATH_MAX];
    char *rm = realpath(name, NULL);
    if (!rm && !hr_hf_model_path(named, sizeof named, name, NULL))
        rm = realpath(named, NULL);
    int found = -1;
    for (int i = 0; rm && i < p->n && found < 0; i++)
        if (p->e[i].real && !strcmp(rm, p->e[i].real))
            found = i;
    free(rm);
    return found;
}

int hr__pool_size(const hr_pool *p) { return p->n; }
const char *hr__pool_id(const hr_pool *p, int i) { return p->e[i].names[0]; }

char *hr__pool_names(const hr_pool *p) {
    size_t len = 1;
    for (int i = 0; i < p->n; i++)
        len += strlen(p->e[i].names[0]) + 4;
    char *s = malloc(len), *w = s;
    if (!s)
        return NULL;
    *w = 0;
    for (int i = 0; i < p->n; i++)
        w += sprintf(w, "%s'%s'", i ? ", " : "", p->e[i].names[0]);
    return s;
}

/* ---- loading and eviction (under mu unless said) ---------------------------------------- */

static void served_free(hr_served *m) {
    if (!m)
        return;
    hr_session_free(m->session);
    hr_llm_free(m->llm);
    free(m);
}

/* Not under mu: loading takes time. */
static int load(const hr_server_opts *o, entry *e, int index, hr_served **out,
                hr_error *err) {
    *out = NULL;
    hr_served *m = calloc(1, sizeof *m);
    if (!m)
        return hr_err(err, HR_ENOMEM, "out of memory");
    m->id = e->names[0];
    m->index = index;
    int rc;
    hr_llm_opts lo = {.n_threads = o->n_threads, .chat_template = o->chat_template,
                      .device = o->device};
    if ((rc = hr_llm_load(&m->llm, e->path, &lo, err)))
        goto fail;
    if (!m->llm->tok) { /* without a chat template, chat requests get a 400 */
        rc = hr_err(err, HR_ENOTFOUND, "%s", m->llm->tok_err);
        goto fail;
    }
    if (m->llm->tmpl_err[0])
        hr_log(HR_LOG_WARN, "%s: /v1/completions serves; chat requests get a 400 "
               "(--chat-template gives one)", m->llm->tmpl_err);
    m->model = m->llm->model;
    m->tok = m->llm->tok;
    m->tmpl = m->llm->tmpl;
    m->tool_format = m->llm->tool_format;
    m->modalities = hr__modalities_of_model(m->model);
    m->stop_ids = m->llm->stop_ids;
    m->n_stop_ids = m->llm->n_stop_ids;
    hr_session_opts so = {.n_threads = o->n_threads, .max_batch = o->batch, .n_ctx = o->n_ctx,
                          .kv_bytes = o->kv_bytes, .prefill_chunk = o->prefill_step,
                          .prompt_cache = o->cache_blocks < 0 ? -1 : 0,
                          .prompt_cache_size = o->cache_size,
                          .prompt_cache_bytes = o->cache_bytes, .ssd_dir = o->ssd_cache,
                          .ssd_max_bytes = o->ssd_cache_max,
                          .ssd_demote_idle = o->ssd_demote_idle, .kv_bits = o->kv_bits,
                          .kv_group = o->kv_group, .kv_quant = o->kv_quant,
                          .quantized_kv_start = o->kv_start, .kv_residual = o->kv_residual,
                          .draft_model = o->draft_model,
                          .spec = o->spec, .num_draft_tokens = o->num_draft_tokens,
                          .adapter_path = o->adapter_path, .adapters = o->adapters,
                          .warmup = !o->no_warmup};
    if ((rc = hr__kv_types_from_names(o->kv_dtype, o->cache_type_k, o->cache_type_v,
                                      &so.kv_dtype, &so.kv_dtype_v, err)) ||
        (rc = hr_session_new(&m->session, m->llm, &so, err)))
        goto fail;
    m->engine = m->session->engine;
    *out = m;
    return 0;
fail:
    served_free(m);
    return rc;
}

/* What a loaded model holds: its weights, its KV pool and its grammar mask
 * cache (which grows with the structured requests it serves). */
static size_t served_bytes(const hr_served *m) {
    hr_engine_stats st;
    hr_engine_stats_get(m->engine, &st);
    return m->model->weight_bytes + st.kv_bytes + hr__llm_mask_cache_bytes(m->llm);
}

/* Count the loaded models again (mu held): their mask caches move. */
static void recount(hr_pool *p) {
    p->loaded_bytes = 0;
    for (int i = 0; i < p->n; i++)
        if (p->e[i].m)
            p->loaded_bytes += p->e[i].bytes = served_bytes(p->e[i].m);
}

/* A model's size before it is loaded: its files (what the weights take). */
static size_t disk_bytes(const char *path) {
    struct stat st;
    if (stat(path, &st))
        return 0;
    if (!S_ISDIR(st.st_mode))
        return (size_t)st.st_size;
    size_t sum = 0;
    DIR *d = opendir(path);
    struct dirent *de;
    char f[PATH_MAX];
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.' && !hr_path_join(f, sizeof f, path, de->d_name) &&
            !stat(f, &st) && S_ISREG(st.st_mode))
            sum += (size_t)st.st_size;
    if (d)
        closedir(d);
    return sum;
}

/* Evict idle models, least recently used first, until the loaded ones and
 * `incoming` bytes fit the budget; keep is never evicted. The evicted go
 * to victims (freed by the caller outside mu). */
static int make_room(hr_pool *p, int keep, size_t incoming, hr_served **victims) {
    int nv = 0;
    if (p->budget)
        recount(p);
    while (p->budget && p->loaded_bytes + incoming > p->budget) {
        int lru = -1;
        for (int i = 0; i < p->n; i++) {
            entry *e = &p->e[i];
            if (i != keep && e->m && e->refs == 0 &&
                (lru < 0 || e->last_used < p->e[lru].last_used))
                lru = i;
        }
        if (lru < 0)
            break; /* everything else is in use: over budget until released */
        entry *e = &p->e[lru];
        hr_log(HR_LOG_INFO, "pool: evicting %s (%zu bytes)", e->names[0], e->bytes);
        victims[nv++] = e->m;
        e->m = NULL;
        p->loaded_bytes -= e->bytes;
        p->evictions++;
    }
    return nv;
}

static void free_victims(hr_served **v, int n) {
    for (int i = 0; i < n; i++)
        served_free(v[i]);
}

int hr__pool_acquire(hr_pool *p, int i, hr_served **out, hr_error *err) {
    *out = NULL;
    if (i < 0 || i >= p->n)
        return hr_err(err, HR_EINVAL, "no such model");
    entry *e = &p->e[i];
    hr_served *victims[p->n ? p->n : 1];
    pthread_mutex_lock(&p->mu);
    while (e->loading)
        pthread_cond_wait(&p->cv, &p->mu);
    if (e->m) {
        e->refs++;
        e->last_used = hr_now();
        *out = e->m;
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    e->loading = true;
    int nv = make_room(p, i, e->bytes ? e->bytes : disk_bytes(e->path), victims);
    pthread_mutex_unlock(&p->mu);
    free_victims(victims, nv);
    hr_log(HR_LOG_INFO, "pool: loading %s (%s)", e->names[0], e->path);
    hr_served *m = NULL;
    int rc = load(p->o, e, i, &m, err);
    size_t bytes = m ? served_bytes(m) : 0;
    pthread_mutex_lock(&p->mu);
    e->loading = false;
    nv = 0;
    if (!rc) {
        e->m = m;
        e->bytes = bytes;
        e->refs = 1;
        e->last_used = hr_now();
        p->loaded_bytes += bytes;
        p->loads++;
        nv = make_room(p, i, 0, victims); /* the estimate was short */
        *out = m;
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    free_victims(victims, nv);
    return rc;
}

/* Let go of m; used: a request ran on it (its place in the LRU order moves). */
static void let_go(hr_pool *p, hr_served *m, bool used) {
    if (!m)
        return;
    hr_served *victims[p->n];
    pthread_mutex_lock(&p->mu);
    entry *e = &p->e[m->index];
    e->refs--;
    if (used)
        e->last_used = hr_now();
    int nv = make_room(p, -1, 0, victims); /* one that was in use may go now */
    pthread_mutex_unlock(&p->mu);
    free_victims(victims, nv);
}

void hr__pool_release(hr_pool *p, hr_served *m) { let_go(p, m, true); }
void hr__pool_unpeek(hr_pool *p, hr_served *m) { let_go(p, m, false); }

hr_served *hr__pool_peek(hr_pool *p, int i) {
    pthread_mutex_lock(&p->mu);
    hr_served *m = i >= 0 && i < p->n && !p->e[i].loading ? p->e[i].m : NULL;
    if (m)
        p->e[i].refs++;
    pthread_mutex_unlock(&p->mu);
    return m;
}

/* ---- listings ----------------------------------------------------------------------------- */

json_t *hr__pool_models_json(hr_pool *p, bool loaded_only) {
    json_t *a = json_array();
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->n; i++) {
        entry *e = &p->e[i];
        if (loaded_only && !e->m)
            continue;
        json_t *names = json_array();
        for (int k = 1; k < e->n_names; k++)
            json_array_append_new(names, json_string(e->names[k]));
        unsigned mod = e->m ? e->m->modalities : hr__modalities_of_path(e->path);
        json_array_append_new(a, json_pack("{s:s,s:s,s:I,s:s,s:b,s:o,s:o}", "id", e->names[0],
                                           "object", "model", "created",
                                           (json_int_t)time(NULL), "owned_by", "hearth",
                                           "loaded", e->m != NULL, "aliases", names,
                                           "modalities", hr__modalities_json(mod)));
    }
    pthread_mutex_unlock(&p->mu);
    return a;
}

json_t *hr__pool_stats_json(hr_pool *p) {
    pthread_mutex_lock(&p->mu);
    recount(p);
    int loaded = 0;
    for (int i = 0; i < p->n; i++)
        loaded += p->e[i].m != NULL;
    json_t *o = json_pack("{s:i,s:i,s:I,s:I,s:I,s:I}", "models", p->n, "loaded", loaded,
                          "budget_bytes", (json_int_t)p->budget, "loaded_bytes",
                          (json_int_t)p->loaded_bytes, "loads", (json_int_t)p->loads,
                          "evictions", (json_int_t)p->evictions);
    pthread_mutex_unlock(&p->mu);
    return o;
}

const char *hr__pool_dead(hr_pool *p) {
    bool dead = false;
    for (int i = 0; i < p->n && !dead; i++) {
        hr_served *m = hr__pool_peek(p, i);
        if (m) {
            hr_engine_stats st;
            hr_engine_stats_get(m->engine, &st);
            if ((dead = st.dead != NULL)) {
                pthread_mutex_lock(&p->mu);
                snprintf(p->dead, sizeof p->dead, "%s", st.dead);
                pthread_mutex_unlock(&p->mu);
            }
            hr__pool_unpeek(p, m);
        }
    }
    return dead ? p->dead : NULL;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static int add(hr_pool *p, const char *spec, const char *path, char *id, hr_error *err) {
    if (!id)
        return hr_err(err, HR_ENOMEM, "out of memory");
    entry *e = &p->e[p->n];
    memset(e, 0, sizeof *e);
    e->names[e->n_names++] = id;
    e->spec = strdup(spec);
    e->path = strdup(path);
    e->real = realpath(path, NULL);
    p->n++;
    if (!e->spec || !e->path)
        return hr_err(err, HR_ENOMEM, "out of memory");
    if (!e->real)
        return hr_err(err, HR_ENOTFOUND, "model '%s': %s does not exist", spec, path);
    return 0;
}

/* --model-dir: every model directory (config.json) and GGUF file in dir,
 * named by its file name (a GGUF's without ".gguf"), in name order. */
static int scan_dir(hr_pool *p, const char *dir, int cap, hr_error *err) {
    struct dirent **list = NULL;
    int n = scandir(dir, &list, NULL, alphasort), rc = 0;
    if (n < 0)
        return hr_err(err, HR_ENOTFOUND, "--model-dir %s: cannot read it", dir);
    for (int i = 0; i < n; i++) {
        const char *name = list[i]->d_name;
        char path[PATH_MAX], cfg[PATH_MAX];
        size_t len = strlen(name);
        bool gguf = len > 5 && !strcmp(name + len - 5, ".gguf");
        if (!rc && name[0] != '.' && !hr_path_join(path, sizeof path, dir, name) &&
            (gguf || (hr_dir_exists(path) && !hr_path_join(cfg, sizeof cfg, path, "config.json") &&
                      hr_file_exists(cfg)))) {
            if (p->n == cap)
                rc = hr_err(err, HR_EFULL, "--model-dir %s: more than %d models", dir, cap);
            else
                rc = add(p, path, path, strndup(name, gguf ? len - 5 : len), err);
        }
        free(list[i]);
    }
    free(list);
    if (!rc && p->n == 0)
        rc = hr_err(err, HR_ENOTFOUND, "--model-dir %s: no model directory (config.json) or "
                    ".gguf file in it", dir);
    return rc;
}

/* --served-model-name: with one model, vLLM's list (the first is its id,
 * every one answers); with --models, one name per model, in order. */
static int apply_names(hr_pool *p, const hr_server_opts *o, hr_error *err) {
    if (!o->n_served_names)
        return 0;
    if (p->n == 1) {
        if (o->n_served_names > MAX_NAMES - 1)
            return hr_err(err, HR_EINVAL, "--served-model-name: at most %d names", MAX_NAMES - 1);
        entry *e = &p->e[0];
        char *old = e->names[0];
        e->n_names = 0;
        for (int k = 0; k < o->n_served_names; k++)
            if (!(e->names[e->n_names++] = strdup(o->served_names[k])))
                return hr_err(err, HR_ENOMEM, "out of memory");
        if (e->n_names < MAX_NAMES)
            e->names[e->n_names++] = old; /* still answers to its own name */
        else
            free(old);
        return 0;
    }
    if (o->n_served_names != p->n)
        return hr_err(err, HR_EINVAL, "--served-model-name: %d names for %d models (one per "
                      "model of --models, in order)", o->n_served_names, p->n);
    for (int i = 0; i < p->n; i++) {
        entry *e = &p->e[i];
        char *n = strdup(o->served_names[i]);
        if (!n)
            return hr_err(err, HR_ENOMEM, "out of memory");
        e->names[e->n_names++] = e->names[0]; /* the file name stays an alias */
        e->names[0] = n;
    }
    return 0;
}

static int check_unique(const hr_pool *p, hr_error *err) {
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->e[i].n_names; k++)
            for (int j = i + 1; j < p->n; j++)
                for (int l = 0; l < p->e[j].n_names; l++)
                    if (!strcmp(p->e[i].names[k], p->e[j].names[l]))
                        return hr_err(err, HR_EINVAL, "two models are called '%s' (rename one "
                                      "with --served-model-name)", p->e[i].names[k]);
    return 0;
}

int hr__pool_new(hr_pool **out, const hr_server_opts *o, hr_error *err) {
    *out = NULL;
    int n_models = o->model_dir ? 256 : o->n_models ? o->n_models : 1;
    hr_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->e = calloc((size_t)n_models, sizeof *p->e))) {
        free(p);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    p->o = o;
    p->budget = o->model_dir || o->n_models ? o->pool_bytes : 0; /* a pool's bound */
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int rc = 0;
    if (o->model_dir)
        rc = scan_dir(p, o->model_dir, n_models, err);
    else if (o->n_models)
        for (int i = 0; i < o->n_models && !rc; i++)
            rc = add(p, o->model_specs ? o->model_specs[i] : o->models[i], o->models[i],
                     id_of_path(o->models[i]), err);
    else
        rc = add(p, o->model, o->model, id_of_path(o->model), err);
    if (!rc)
        rc = apply_names(p, o, err);
    if (!rc)
        rc = check_unique(p, err);
    if (!rc && !o->model_dir && !o->n_models) { /* one model: loaded now */
        hr_served *m;
        if (!(rc = hr__pool_acquire(p, 0, &m, err)))
            hr__pool_release(p, m);
    }
    if (rc) {
        hr__pool_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void hr__pool_free(hr_pool *p) {
    if (!p)
        return;
    for (int i = 0; i < p->n; i++) {
        entry *e = &p->e[i];
        served_free(e->m);
        for (int k = 0; k < e->n_names; k++)
            free(e->names[k]);
        free(e->spec);
        free(e->path);
        free(e->real);
    }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->e);
    free(p);
}
