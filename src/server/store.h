/* A bounded, in-memory store of /v1/responses results, for
 * previous_response_id and GET / DELETE /v1/responses/{id}: each entry is
 * the response object and the conversation through it (chat messages:
 * the input, then the output as an assistant turn). At most max_entries
 * entries and max_bytes of their JSON text; the oldest go first. Thread
 * safe; nothing survives a restart. */
#ifndef HR_SERVER_STORE_H
#define HR_SERVER_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct hr_resp_store hr_resp_store;

/* NULL when out of memory. */
hr_resp_store *hr__resp_store_new(int max_entries, size_t max_bytes);
void hr__resp_store_free(hr_resp_store *st);
/* Keep response and conversation under id (steals both; replaces an entry
 * with the same id). An entry larger than max_bytes alone is dropped. */
void hr__resp_store_put(hr_resp_store *st, const char *id, json_t *response,
                        json_t *conversation);
/* Deep copies of what id holds (either pointer may be NULL: not wanted);
 * false when id is unknown (never stored, evicted or deleted). */
bool hr__resp_store_get(hr_resp_store *st, const char *id, json_t **response,
                        json_t **conversation);
/* false when id is unknown. */
bool hr__resp_store_delete(hr_resp_store *st, const char *id);

#endif
