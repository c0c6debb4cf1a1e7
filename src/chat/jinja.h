/* A Jinja interpreter for chat templates, configured the way Hugging Face
 * transformers configures jinja2 (ImmutableSandboxedEnvironment with
 * trim_blocks, lstrip_blocks, loopcontrols, its tojson, raise_exception
 * and strftime_now). docs/chat-templates.md lists what is supported.
 *
 * A compiled template is immutable: any number of threads may render it
 * at once. Errors (syntax or run time, including raise_exception) come back
 * as an hr_error whose pos is the byte offset in the template source. */
#ifndef HR_CHAT_JINJA_H
#define HR_CHAT_JINJA_H

#include "chat/jinja_value.h"
#include "hearth.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hr_jinja hr_jinja;

typedef struct hr_jinja_opts {
    size_t max_output; /* bytes of output and of any one string; 0 = 16 MiB */
    long max_steps;    /* evaluation steps before giving up; 0 = 20 million */
    int max_depth;     /* macro call depth; 0 = 100 */
    double max_seconds; /* CPU seconds of the rendering thread; 0 = 2 (a render
                         * that passes it fails with HR_ERANGE) */
    int has_now;       /* 1: strftime_now uses `now` instead of the clock */
    int64_t now;       /* unix seconds, formatted as UTC */
} hr_jinja_opts;

int hr_jinja_compile(hr_jinja **out, const char *src, size_t len, hr_error *err);
void hr_jinja_free(hr_jinja *t);

/* Render with the variables of dict `vars` (borrowed). *out is a malloc'd
 * NUL-terminated string the caller frees; *out_len (may be NULL) its
 * length. opts may be NULL. */
int hr_jinja_render(const hr_jinja *t, hr_jv vars, const hr_jinja_opts *opts,
                    char **out, size_t *out_len, hr_error *err);

/* Convert a JSON value into a Jinja value (a new reference). Objects keep
 * their key order; nesting deeper than HR_JV_MAX_DEPTH is an error. */
int hr_jinja_value_from_json(const json_t *j, hr_jv *out, hr_error *err);

#endif
