/* A chat request's media parts (server/media.h). */
#include "server/media.h"
#include "server/internal.h"
#include "media/dataurl.h"
#include "media/media.h"
#include "core/file.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool refuse(hr_reply *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool refuse(hr_reply *err, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
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

/* An input_audio part ({"input_audio": {"data": base64, "format": "wav"}})
 * as clip n of out: false with *err set (a 400 naming the part, or a 500
 * when out of memory). */
static bool load_audio(hr_server *s, const hr_served *m, const json_t *part, size_t i, size_t k,
                       hr_job_media *out, hr_reply *err) {
    const json_t *ia = json_object_get(part, "input_audio");
    const char *data = json_string_value(json_object_get(ia, "data"));
    const char *format = json_string_value(json_object_get(ia, "format"));
    if (!data || !format)
        return refuse(err, "messages.%zu.content.%zu: an input_audio part needs input_audio.data "
                      "(base64) and input_audio.format, strings", i, k);
    if (strcmp(format, "wav"))
        return refuse(err, "messages.%zu.content.%zu: input_audio: not supported yet: format "
                      "'%.40s' (wav is)", i, k, format);
    size_t max = s->o.media.max_bytes ? s->o.media.max_bytes : HR_MEDIA_DEFAULT_MAX_BYTES;
    size_t len = strlen(data), n = 0;
    if (len / 4 * 3 > max + 3)
        return refuse(err, "messages.%zu.content.%zu: input_audio: the data holds more than %zu "
                      "bytes (--media-max-mb)", i, k, max);
    uint8_t *buf = malloc(len / 4 * 3 + 3);
    hr_audio *a = buf ? realloc(out->audio, sizeof *a * (size_t)(out->n + 1)) : NULL;
    if (!a) {
        free(buf);
        *err = hr__error_reply(500, "server_error", NULL, "out of memory");
        return false;
    }
    out->audio = a;
    long bad = hr_base64_decode(data, len, buf, &n);
    if (bad >= 0) {
        free(buf);
        return refuse(err, "messages.%zu.content.%zu: input_audio: data has bad base64 at byte "
                      "%ld", i, k, bad);
    }
    hr_error e = {0};
    int rc = hr__audio_load(m->llm, buf, n, &a[out->n], &e);
    free(buf);
    if (rc == HR_ENOMEM) {
        *err = hr__error_reply(500, "server_error", NULL, "out of memory");
        return false;
    }
    if (rc)
        return refuse(err, "messages.%zu.content.%zu: input_audio: %s", i, k, e.msg);
    out->n++;
    return true;
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
            if (!strcmp(type, "audio_url")) {
                hr__job_media_free(out);
                return refuse(err, "messages.%zu.content.%zu: not supported yet: audio_url parts "
                              "(send the bytes as an input_audio part)", i, k);
            }
            if (!strcmp(type, "input_audio")) {
                const char *other = m->modalities & HR_MODALITY_IMAGE ? "text and images" : "text only";
                if (!(m->modalities & HR_MODALITY_AUDIO)) {
                    hr__job_media_free(out);
                    return refuse(err, "messages.%zu.content.%zu: the model '%s' does not accept "
                                  "audio (input_audio parts); its input is %s", i, k, m->id, other);
                }
                if (out->n == HR_IMAGES_MAX) {
                    hr__job_media_free(out);
                    return refuse(err, "messages.%zu.content.%zu: at most 8 audio clips a "
                                  "request", i, k);
                }
                if (!load_audio(s, m, part, i, k, out, err)) {
                    hr__job_media_free(out);
                    return false;
                }
                continue;
            }
            if (strcmp(type, "image_url") && strcmp(type, "image"))
                continue;
            if (!(m->modalities & HR_MODALITY_IMAGE)) {
                hr__job_media_free(out);
                return refuse(err, "messages.%zu.content.%zu: the model '%s' does not accept "
                              "images (%s parts); its input is %s", i, k, m->id, type,
                              m->modalities & HR_MODALITY_AUDIO ? "text and audio" : "text only");
            }
            if (out->n == HR_IMAGES_MAX) {
                hr__job_media_free(out);
                return refuse(err, "messages.%zu.content.%zu: at most 8 images a request", i, k);
            }
            const char *url = part_url(part);
            if (!url) {
                hr__job_media_free(out);
                return refuse(err, "messages.%zu.content.%zu: an image_url part needs "
                              "image_url.url, a string", i, k);
            }
            hr_image *g = realloc(out->images, sizeof *g * (size_t)(out->n + 1));
            if (!g) {
                hr__job_media_free(out);
                *err = hr__error_reply(500, "server_error", NULL, "out of memory");
                return false;
            }
            out->images = g;
            hr_error e = {0};
            int rc = hr_media_load_image(url, &s->o.media, &g[out->n], &e);
            if (rc) {
                hr__job_media_free(out);
                if (rc == HR_ENOMEM) {
                    *err = hr__error_reply(500, "server_error", NULL, "out of memory");
                    return false;
                }
                return refuse(err, "messages.%zu.content.%zu: image_url: %s", i, k, e.msg);
            }
            out->n++;
        }
    }
    return true;
}

void hr__job_media_free(hr_job_media *jm) { hr__images_free(jm); }

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
    return HR_MODALITY_TEXT | (m && (m->mm || m->mm_qwen) ? HR_MODALITY_IMAGE : 0) |
           (m && m->mm_audio ? HR_MODALITY_AUDIO : 0);
}

/* Without loading it: a model directory whose config.json describes a
 * Gemma-3 with a vision tower (what hr_model_open gives an image side). */
unsigned hr__modalities_of_path(const char *path) {
    char cfg[4096];
    if (!path || !hr_dir_exists(path) || hr_path_join(cfg, sizeof cfg, path, "config.json"))
        return HR_MODALITY_TEXT;
    json_t *c = json_load_file(cfg, 0, NULL);
    const char *mt = json_string_value(json_object_get(c, "model_type"));
    bool img = mt && (!strcmp(mt, "gemma3") || !strcmp(mt, "qwen2_5_vl")) &&
               json_is_object(json_object_get(c, "vision_config"));
    bool audio = mt && !strcmp(mt, "qwen2_audio") &&
                 json_is_object(json_object_get(c, "audio_config"));
    json_decref(c);
    return HR_MODALITY_TEXT | (img ? HR_MODALITY_IMAGE : 0) | (audio ? HR_MODALITY_AUDIO : 0);
}

/* ---- placing images in the prompt ---------------------------------------------------------- */

static bool as_reply(hr_reply *err, int rc, const hr_error *e) {
    *err = rc == HR_EINVAL ? hr__error_reply(400, "invalid_request_error", "messages", "%s", e->msg)
                           : hr__error_reply(500, "server_error", NULL, "%s", e->msg);
    return false;
}

bool hr__media_expand(const hr_served *m, const char *text, const hr_job_media *jm, char **out,
                      hr_reply *err) {
    hr_error e = {0};
    int rc = hr__images_expand(m->llm, text, jm, out, &e);
    return rc ? as_reply(err, rc, &e) : true;
}

bool hr__media_attach(const hr_served *m, const hr_tokens *prompt, hr_job_media *jm,
                      hr_reply *err) {
    hr_error e = {0};
    int rc = hr__images_attach(m->llm, prompt->ids, prompt->n, jm, &e);
    return rc ? as_reply(err, rc, &e) : true;
}
