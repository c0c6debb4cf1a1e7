/* The bounded store of /v1/responses results (store.h): a small array
 * searched linearly (a few hundred entries), one mutex, eviction of the
 * oldest entry. */
#include "server/store.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    char *id;             /* NULL: free slot */
    json_t *response, *conversation;
    size_t bytes;         /* their JSON text */
    uint64_t stamp;       /* insertion order */
} entry;

struct hr_resp_store {
    pthread_mutex_t mu;
    entry *e;
    int cap;
    size_t max_bytes, bytes;
    uint64_t clock;
};

hr_resp_store *hr__resp_store_new(int max_entries, size_t max_bytes) {
    hr_resp_store *st = calloc(1, sizeof *st);
    if (!st || !(st->e = calloc((size_t)(max_entries > 0 ? max_entries : 1), sizeof *st->e))) {
        free(st);
        return NULL;
    }
    st->cap = max_entries > 0 ? max_entries : 1;
    st->max_bytes = max_bytes;
    pthread_mutex_init(&st->mu, NULL);
    return st;
}

static void drop(hr_resp_store *st, entry *e) {
    st->bytes -= e->bytes;
    free(e->id);
    json_decref(e->response);
    json_decref(e->conversation);
    memset(e, 0, sizeof *e);
}

void hr__resp_store_free(hr_resp_store *st) {
    if (!st)
        return;
    for (int i = 0; i < st->cap; i++)
        if (st->e[i].id)
            drop(st, &st->e[i]);
    pthread_mutex_destroy(&st->mu);
    free(st->e);
    free(st);
}

static size_t text_bytes(const json_t *v) {
    char *s = json_dumps(v, JSON_COMPACT);
    size_t n = s ? strlen(s) : 0;
    free(s);
    return n;
}

static entry *find(hr_resp_store *st, const char *id) {
    for (int i = 0; i < st->cap; i++)
        if (st->e[i].id && !strcmp(st->e[i].id, id))
            return &st->e[i];
    return NULL;
}

static entry *oldest(hr_resp_store *st) {
    entry *o = NULL;
    for (int i = 0; i < st->cap; i++)
        if (st->e[i].id && (!o || st->e[i].stamp < o->stamp))
            o = &st->e[i];
    return o;
}

void hr__resp_store_put(hr_resp_store *st, const char *id, json_t *response,
                        json_t *conversation) {
    size_t bytes = text_bytes(response) + text_bytes(conversation);
    char *key = strdup(id);
    if (!key || bytes > st->max_bytes) {
        free(key);
        json_decref(response);
        json_decref(conversation);
        return;
    }
    pthread_mutex_lock(&st->mu);
    entry *e = find(st, id);
    if (e)
        drop(st, e);
    entry *o;
    while (st->bytes + bytes > st->max_bytes && (o = oldest(st)))
        drop(st, o);
    for (int i = 0; !e && i < st->cap; i++)
        if (!st->e[i].id)
            e = &st->e[i];
    if (!e) {
        e = oldest(st);
        drop(st, e);
    }
    *e = (entry){.id = key, .response = response, .conversation = conversation, .bytes = bytes,
                 .stamp = ++st->clock};
    st->bytes += bytes;
    pthread_mutex_unlock(&st->mu);
}

bool hr__resp_store_get(hr_resp_store *st, const char *id, json_t **response,
                        json_t **conversation) {
    pthread_mutex_lock(&st->mu);
    entry *e = find(st, id);
    if (e) {
        if (response)
            *response = json_deep_copy(e->response);
        if (conversation)
            *conversation = json_deep_copy(e->conversation);
    }
    pthread_mutex_unlock(&st->mu);
    return e != NULL;
}

bool hr__resp_store_delete(hr_resp_store *st, const char *id) {
    pthread_mutex_lock(&st->mu);
    entry *e = find(st, id);
    if (e)
        drop(st, e);
    pthread_mutex_unlock(&st->mu);
    return e != NULL;
}
