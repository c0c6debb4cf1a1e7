/* Chat messages as the OpenAI API sends them, made ready for a template
 * (shared by the server's routes and the public API). */
#ifndef HR_CHAT_MESSAGES_H
#define HR_CHAT_MESSAGES_H

#include "hearth.h"

#include <jansson.h>
#include <stdbool.h>

/* msgs as the template sees them: a non-empty array of objects with a
 * string "role"; content as a list of text parts is joined, null content
 * becomes "", tool-call arguments given as JSON text are parsed. *out: a
 * new array (caller decrefs). HR_EINVAL with a message starting with
 * "messages" on a bad shape. */
int hr_chat_messages_normalize(const json_t *msgs, json_t **out, hr_error *err);
/* The same; with images (media: images or audio), a content list that
 * holds image_url or input_audio parts stays a list of {"type": "text",
 * "text"}, {"type": "image"} and {"type": "audio", "audio": "input_audio"}
 * parts, the shape the chat templates of image models (Gemma-3) and audio
 * models (Qwen2-Audio) read. */
int hr_chat_messages_normalize_images(const json_t *msgs, bool images, json_t **out,
                                      hr_error *err);

/* mlx-lm's convert_chat for models without a chat template: "USER: ...",
 * "ASSISTANT: " at the end. malloc'd; NULL when out of memory. */
char *hr_chat_plain(const json_t *msgs);

#endif
