/* libFuzzer: request bodies of /v1/messages and /v1/responses (the first
 * byte picks the API, the rest is the body) through their translation into
 * a chat request. A translation must succeed with a chat request that has
 * messages, or fail with a 400 reply that reshapes into Anthropic's error
 * shape. Any crash, leak or sanitizer report is a bug. */
#include "server/internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    bool anthropic = data[0] & 1;
    json_t *req = json_loadb((const char *)data + 1, size - 1, 0, NULL);
    if (!json_is_object(req)) {
        json_decref(req);
        return 0;
    }
    hr_reply err = {0};
    json_t *chat = anthropic ? hr__messages_to_chat(req, &err) : hr__responses_to_chat(req, NULL, &err);
    if (chat) {
        if (!json_is_array(json_object_get(chat, "messages")) || err.body)
            abort();
        char *s = json_dumps(chat, 0);
        if (!s)
            abort();
        free(s);
        json_decref(chat);
    } else {
        if (err.status != 400 || !err.body)
            abort();
        hr_reply a = hr__anthropic_error(err);
        json_t *o = json_loads(a.body, 0, NULL);
        if (!json_is_string(json_object_get(json_object_get(o, "error"), "message")))
            abort();
        json_decref(o);
        free(a.body);
    }
    json_decref(req);
    return 0;
}
