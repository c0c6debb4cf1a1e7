#include "chat/messages.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_audio(const char *type) {
    return type && (!strcmp(type, "input_audio") || !strcmp(type, "audio"));
}

/* content with images or audio, for a model that takes them: the list as
 * the HF chat templates read it, {"type": "text", "text"}, {"type":
 * "image"} (an OpenAI image_url part) and {"type": "audio", "audio":
 * "input_audio"} (an input_audio part; Qwen2-Audio's template tests for
 * the "audio" key). */
static int image_parts(json_t *m, const json_t *c, hr_error *err) {
    json_t *list = json_array();
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        json_t *p = NULL;
        if (type && !strcmp(type, "text") && text)
            p = json_pack("{s:s,s:s}", "type", "text", "text", text);
        else if (type && (!strcmp(type, "image_url") || !strcmp(type, "image")))
            p = json_pack("{s:s}", "type", "image");
        else if (is_audio(type))
            p = json_pack("{s:s,s:s}", "type", "audio", "audio", "input_audio");
        if (!p || json_array_append_new(list, p)) {
            json_decref(list);
            return p ? hr_err(err, HR_ENOMEM, "out of memory")
                     : hr_err(err, HR_EINVAL, "messages: only 'text', 'image_url' and "
                              "'input_audio' content parts are supported");
        }
    }
    json_object_set_new(m, "content", list);
    return 0;
}

static bool has_image(const json_t *c) {
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (type && (!strcmp(type, "image_url") || !strcmp(type, "image") || is_audio(type)))
            return true;
    }
    return false;
}

/* content as a list of parts: the text parts joined. */
static int join_parts(json_t *m, const json_t *c, hr_error *err) {
    size_t k;
    json_t *part;
    char *joined = NULL;
    size_t jl = 0;
    json_array_foreach(c, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        if (!type || strcmp(type, "text") || !text) {
            free(joined);
            return hr_err(err, HR_EINVAL, "messages: only 'text' content parts are supported");
        }
        size_t tl = strlen(text);
        char *g = realloc(joined, jl + tl + 1);
        if (!g) {
            free(joined);
            return hr_err(err, HR_ENOMEM, "out of memory");
        }
        joined = g;
        memcpy(joined + jl, text, tl + 1);
        jl += tl;
    }
    json_object_set_new(m, "content", json_string(joined ? joined : ""));
    free(joined);
    return 0;
}

int hr_chat_messages_normalize(const json_t *msgs, json_t **out, hr_error *err) {
    return hr_chat_messages_normalize_images(msgs, false, out, err);
}

int hr_chat_messages_normalize_images(const json_t *msgs, bool images, json_t **out,
                                      hr_error *err) {
    *out = NULL;
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return hr_err(err, HR_EINVAL, "messages must be a non-empty array of messages");
    json_t *o = json_deep_copy(msgs);
    if (!o)
        return hr_err(err, HR_ENOMEM, "out of memory");
    size_t i;
    json_t *m;
    int rc = 0;
    json_array_foreach(o, i, m) {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) {
            rc = hr_err(err, HR_EINVAL, "messages: every message needs a string 'role'");
            break;
        }
        json_t *c = json_object_get(m, "content");
        if (!c || json_is_null(c))
            json_object_set_new(m, "content", json_string(""));
        else if (json_is_array(c))
            rc = images && has_image(c) ? image_parts(m, c, err) : join_parts(m, c, err);
        else if (!json_is_string(c))
            rc = hr_err(err, HR_EINVAL,
                        "messages: content must be a string, a list of parts or null");
        if (rc)
            break;
        json_t *calls = json_object_get(m, "tool_calls");
        size_t k;
        json_t *call;
        json_array_foreach(calls, k, call) {
            json_t *fn = json_object_get(call, "function");
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            if (args) {
                json_error_t je;
                json_t *parsed = json_loads(args, JSON_DECODE_ANY, &je);
                if (parsed)
                    json_object_set_new(fn, "arguments", parsed);
            }
        }
    }
    if (rc) {
        json_decref(o);
        return rc;
    }
    *out = o;
    return 0;
}

char *hr_chat_plain(const json_t *msgs) {
    static const struct { const char *role, *prefix; } map[] = {
        {"system", "ASSISTANT's RULE: "}, {"user", "USER: "}, {"assistant", "ASSISTANT: "}};
    size_t cap = 256, len = 0;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        const char *pre = "";
        for (size_t k = 0; k < 3; k++)
            if (role && !strcmp(role, map[k].role))
                pre = map[k].prefix;
        size_t need = len + strlen(pre) + strlen(content ? content : "") + 32;
        if (need > cap) {
            char *g = realloc(out, cap = need * 2);
            if (!g) {
                free(out);
                return NULL;
            }
            out = g;
        }
        len += (size_t)sprintf(out + len, "%s%s\n", pre, content ? content : "");
    }
    len += (size_t)sprintf(out + len, "ASSISTANT: ");
    while (len > 0 && (out[len - 1] == ' ' || out[len - 1] == '\n'))
        out[--len] = 0;
    return out;
}
