/* A request's prefix in chunk hashes (prefix.h). */
#include "route/prefix.h"
#include <stdio.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct text {
    char *p;
    size_t len, cap;
    bool oom;
    size_t conv_end; /* the end of the first user message (0: none yet) */
} text;

static void put(text *t, const char *s, size_t n) {
    if (t->oom)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *q = realloc(t->p, cap);
        if (!q) {
            t->oom = true;
            return;
        }
        t->p = q;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
}

/* v as compact JSON with sorted keys, then a separator; NULL v: nothing. */
static void put_json(text *t, const char *tag, const json_t *v) {
    if (!v)
        return;
    char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (!s) {
        t->oom = true;
        return;
    }
    put(t, tag, strlen(tag));
    put(t, s, strlen(s));
    put(t, "\n", 1);
    free(s);
}

/* Messages (or /v1/responses' input items) in order; the first whose
 * role is "user" ends the conversation's key. */
static void put_messages(text *t, const json_t *msgs) {
    if (json_is_string(msgs)) { /* /v1/responses' input as one text: a user message */
        put_json(t, "u:", msgs);
        if (!t->conv_end)
            t->conv_end = t->len;
        return;
    }
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        put_json(t, "m:", m);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!t->conv_end && role && !strcmp(role, "user"))
            t->conv_end = t->len;
    }
}

static bool is(const char *url, const char *a) {
    return !strcmp(url, a) || (!strncmp(a, "/v1", 3) && !strcmp(url, a + 3));
}

bool hr_prefix_of(const char *url, const char *body, size_t len, size_t chunk_bytes,
                  hr_prefix *out) {
    out->n_chunks = 0;
    out->conv_chunk = 0;
    out->conv_key = 0;
    out->model[0] = out->prev_id[0] = 0;
    json_t *req = json_loadb(body, len, JSON_DECODE_ANY, NULL);
    if (!json_is_object(req)) {
        json_decref(req);
        return false;
    }
    const char *model = json_string_value(json_object_get(req, "model"));
    snprintf(out->model, sizeof out->model, "%s", model ? model : "");
    const char *prev = json_string_value(json_object_get(req, "previous_response_id"));
    snprintf(out->prev_id, sizeof out->prev_id, "%s", prev ? prev : "");
    text t = {0};
    put(&t, "model:", 6);
    put(&t, out->model, strlen(out->model));
    put(&t, "\n", 1);
    put_json(&t, "tools:", json_object_get(req, "tools"));
    if (is(url, "/v1/completions")) {
        const json_t *p = json_object_get(req, "prompt");
        if (json_is_string(p))
            put(&t, json_string_value(p), json_string_length(p));
        else
            put_json(&t, "p:", p);
        t.conv_end = t.len < chunk_bytes ? t.len : chunk_bytes;
    } else if (is(url, "/v1/responses")) {
        put_json(&t, "i:", json_object_get(req, "instructions"));
        put_messages(&t, json_object_get(req, "input"));
    } else { /* chat completions, messages */
        put_json(&t, "s:", json_object_get(req, "system"));
        put_messages(&t, json_object_get(req, "messages"));
    }
    json_decref(req);
    if (t.oom) {
        free(t.p);
        return false;
    }
    if (!t.conv_end)
        t.conv_end = t.len;
    out->conv_key = XXH3_64bits(t.p ? t.p : "", t.conv_end);
    out->conv_chunk = (int)((t.conv_end ? t.conv_end - 1 : 0) / chunk_bytes);
    uint64_t h = 0;
    for (size_t off = 0; off + chunk_bytes <= t.len && out->n_chunks < HR_PREFIX_MAX_CHUNKS;
         off += chunk_bytes)
        out->chunk[out->n_chunks++] = h = XXH3_64bits_withSeed(t.p + off, chunk_bytes, h);
    free(t.p);
    return true;
}
