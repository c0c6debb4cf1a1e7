/* The media parts of a chat request (docs/images.md): image_url parts are
 * checked against the model's modalities and loaded (media/media.h);
 * input_audio parts are refused (not supported yet). */
#ifndef HR_SERVER_MEDIA_H
#define HR_SERVER_MEDIA_H

#include "api/images.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>

struct hr_server;
struct hr_served;
struct hr_reply;


/* What a served model accepts (/v1/models "modalities"). */
enum {
    HR_MODALITY_TEXT = 1,
    HR_MODALITY_IMAGE = 2,
    HR_MODALITY_AUDIO = 4,
};

/* The request's images, in the order their parts appear (api/images.h). */
typedef hr_images hr_job_media;

/* Walks msgs (the request's raw "messages"): every image_url part is
 * refused with a 400 naming the part and the modality when the model does
 * not accept images, else loaded into *out (its url a data: URL or an
 * http(s) URL fetched under the server's media options; a bad URL, a
 * refused fetch or bad bytes: a 400 naming the part); every input_audio
 * part is a 400 (not supported yet). false with *err set on failure (*out
 * then holds nothing). */
bool hr__media_load_parts(struct hr_server *s, const struct hr_served *m, const json_t *msgs,
                          hr_job_media *out, struct hr_reply *err);
void hr__job_media_free(hr_job_media *jm);

/* hr__images_expand and hr__images_attach (api/images.h) with their
 * errors as replies (a 400 naming "messages", or a 500). */
bool hr__media_expand(const struct hr_served *m, const char *text, const hr_job_media *jm,
                      char **out, struct hr_reply *err);
bool hr__media_attach(const struct hr_served *m, const hr_tokens *prompt, hr_job_media *jm,
                      struct hr_reply *err);

/* What a loaded model accepts; what the model at path (a directory or a
 * GGUF file, not loaded) will accept, from its config.json. */
struct hr_model;
unsigned hr__modalities_of_model(const struct hr_model *m);
unsigned hr__modalities_of_path(const char *path);

/* ["text", "image", ...] for a modalities mask. */
json_t *hr__modalities_json(unsigned mask);

#endif
