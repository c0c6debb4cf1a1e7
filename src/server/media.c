/* A chat request's media parts (server/media.h). */
#include "server/media.h"
#include "server/internal.h"
#include "media/media.h"

#include <stdlib.h>
#include <string.h>

static bool refuse(hr_reply *err, const char *fmt, size_t i, size_t k, const char *a,
                   const char *b) {
    char msg[512];
    snprintf(msg, sizeof msg, fmt, i, k, a, b);
    *err = hr__error_reply(400, "invalid_request_error", "messages", "%s", msg);
    return false;
}

/* The part's URL: {"image_url": {"url": "..."}} (OpenAI), or the string
 * itself (what some clients send). */
static const char *part_url(const json_t *part) {
    const json_t *iu = json_object_get(part, "image_url");
    if (json_is_string(iu))
        return json_string_value(iu);
    return json_string_value(json_object_get(iu, "url"));
}

bool hr__media_load_parts(hr_server *s, const hr_served *m, const json_t *msgs,
                          hr_job_media *out, hr_reply *err) {
    memset(out, 0, sizeof *out);
    size_t i, k;
    const json_t *msg, *part;
    json_array_foreach(msgs, i, msg) {
        const json_t *c = json_object_get(msg, "content");
        if (!json_is_array(c))
            continue;
        json_array_foreach(c, k, part) {
            const char *type = json_string_value(json_object_get(part, "type"));
            if (!type)
                continue; /* hr_chat_messages_normalize says what is wrong */
            if (!strcmp(type, "input_audio") || !strcmp(type, "audio_url")) {
                hr__job_media_free(out);
                return refuse(err, "messages.%zu.content.%zu: not supported yet: audio input "
                              "(%s%s parts)", i, k, type, "");
            }
            if (strcmp(type, "image_url") && strcmp(type, "image"))
                continue;
            if (!(m->modalities & HR_MODALITY_IMAGE)) {
                hr__job_media_free(out);
                return refuse(err, "messages.%zu.content.%zu: the model '%s' does not accept "
                              "images (%s parts); its input is text only", i, k, m->id, type);
            }
            const char *url = part_url(part);
            if (!url) {
                hr__job_media_free(out);
                return refuse(err, "messages.%zu.content.%zu: an image_url part needs "
                              "image_url.url, a string%s%s", i, k, "", "");
            }
            hr_image *g = realloc(out->images, sizeof *g * (size_t)(out->n_images + 1));
            if (!g) {
                hr__job_media_free(out);
                *err = hr__error_reply(500, "server_error", NULL, "out of memory");
                return false;
            }
            out->images = g;
            hr_error e = {0};
            int rc = hr_media_load_image(url, &s->o.media, &g[out->n_images], &e);
            if (rc) {
                hr__job_media_free(out);
                if (rc == HR_ENOMEM) {
                    *err = hr__error_reply(500, "server_error", NULL, "out of memory");
                    return false;
                }
                return refuse(err, "messages.%zu.content.%zu: image_url: %s%s", i, k, e.msg, "");
            }
            out->n_images++;
        }
    }
    return true;
}

void hr__job_media_free(hr_job_media *jm) {
    if (!jm)
        return;
    for (int i = 0; i < jm->n_images; i++)
        hr_image_deinit(&jm->images[i]);
    free(jm->images);
    jm->images = NULL;
    jm->n_images = 0;
}

json_t *hr__modalities_json(unsigned mask) {
    json_t *a = json_array();
    if (mask & HR_MODALITY_TEXT)
        json_array_append_new(a, json_string("text"));
    if (mask & HR_MODALITY_IMAGE)
        json_array_append_new(a, json_string("image"));
    if (mask & HR_MODALITY_AUDIO)
        json_array_append_new(a, json_string("audio"));
    return a;
}

unsigned hr__modalities_of_model(const struct hr_model *m) {
    (void)m;
    return HR_MODALITY_TEXT;
}

unsigned hr__modalities_of_path(const char *path) {
    (void)path;
    return HR_MODALITY_TEXT;
}
