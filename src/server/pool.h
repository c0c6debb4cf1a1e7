/* The models a server serves: one (--model) or a pool (--models A,B,C,
 * --model-dir DIR). A request's "model" picks one (hr__pool_resolve: the
 * one place a name becomes a model); a model is loaded on first use and
 * evicted least-recently-used when the loaded ones pass --pool-bytes, never
 * while a request holds it (hr__pool_acquire / hr__pool_release). One
 * engine per loaded model. Thread-safe: the HTTP threads share it. */
#ifndef HR_SERVER_POOL_H
#define HR_SERVER_POOL_H

#include "api/api.h"
#include "server/server.h"

#include <jansson.h>
#include <stdbool.h>

typedef struct hr_pool hr_pool;

/* A loaded model: what a request runs on. Fields borrowed from llm and
 * session; valid while the request holds it. */
typedef struct hr_served {
    const char *id;               /* what /v1/models and responses call it */
    hr_llm *llm;                  /* model, tokenizer, template (api/api.h) */
    hr_session *session;          /* the engine over it */
    hr_model *model;
    hr_tokenizer *tok;
    hr_chat_template *tmpl;       /* NULL: the model has no chat template */
    const hr_tool_format *tool_format; /* how the template's model writes calls; NULL */
    hr_engine *engine;
    const int32_t *stop_ids;      /* end-of-sequence tokens */
    int n_stop_ids;
    int index;                    /* in the pool */
    unsigned modalities;          /* HR_MODALITY_* (server/media.h) */
} hr_served;

/* The models o names (o->model, o->models, o->model_dir), checked (names
 * unique, paths exist); o must outlive the pool. With one model (--model)
 * it is loaded here, so a bad model stops the server at start. */
int hr__pool_new(hr_pool **out, const hr_server_opts *o, hr_error *err);
void hr__pool_free(hr_pool *p);

/* The model a request's "model" names: its id or an alias
 * (--served-model-name), "default_model" / NULL / "" (the first), the name
 * it was given by, or a path / ORG/NAME[@REV] that resolves to its files.
 * -1 when none. */
int hr__pool_resolve(const hr_pool *p, const char *name);
/* Model i loaded (now, if it was not; evicting idle ones to stay under the
 * budget) and held until hr__pool_release. HR_E* with err when it cannot be
 * loaded. */
int hr__pool_acquire(hr_pool *p, int i, hr_served **out, hr_error *err);
void hr__pool_release(hr_pool *p, hr_served *m);
/* Model i held when it is loaded, else NULL (never loads), to look at it
 * (/stats): let go with hr__pool_unpeek, which leaves its place in the LRU
 * order alone. */
hr_served *hr__pool_peek(hr_pool *p, int i);
void hr__pool_unpeek(hr_pool *p, hr_served *m);

int hr__pool_size(const hr_pool *p);
const char *hr__pool_id(const hr_pool *p, int i);
/* "a", "b", ... of every model, for a 404's message (malloc'd). */
char *hr__pool_names(const hr_pool *p);
/* /v1/models' data: every model ({id, object, created, owned_by, and
 * hearth's loaded, aliases}); loaded_only: only the loaded ones. */
json_t *hr__pool_models_json(hr_pool *p, bool loaded_only);
/* /stats' "pool": budget, loaded bytes, loads, evictions. */
json_t *hr__pool_stats_json(hr_pool *p);
/* The first dead engine's reason, or NULL. */
const char *hr__pool_dead(hr_pool *p);

#endif
