/* Tool calls: which format a chat template teaches its model, and a
 * streaming parser that splits the model's output into plain content and
 * OpenAI-style tool calls.
 *
 * A format (hr_tool_format) is one row of a static table
 * (toolcall_formats.c): the markers that identify it in a template's source,
 * and the syntaxes in which calls appear in the output. docs/tool-calling.md
 * lists every format, the templates that map to it and the output forms.
 *
 * The parser is fed decoded text as it is generated and returns events:
 * content text (outside any call), and for each call: START (id, name),
 * ARGS (a fragment of the arguments, JSON text) and END. A call is emitted
 * only once it is complete and valid, so its events arrive together; text
 * that may still become a marker is held back (as a stop-string matcher
 * holds it). A call that turns out malformed, or is still open when
 * generation ends, is returned as content, byte for byte: a bad call never
 * fails the stream. Concatenating every CONTENT event gives the output minus
 * the valid calls' regions; the result does not depend on how the output
 * was split into pushes. */
#ifndef HR_CHAT_TOOLCALL_H
#define HR_CHAT_TOOLCALL_H

#include "hearth.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* ---- formats ----------------------------------------------------------- */

/* A row of the static format table: never freed, valid for the process. */
typedef struct hr_tool_format hr_tool_format;

/* The format a chat template renders tools and calls in, from markers in
 * its source; NULL when the template renders no tool calls we can parse.
 * template_src may be NULL (NULL result). */
const hr_tool_format *hr_tool_format_detect(const char *template_src);

/* By table name ("hermes", "llama3", "mistral", ...); NULL when unknown.
 * For a model whose template is silent, or a user override. */
const hr_tool_format *hr_tool_format_by_name(const char *name);

/* The table, for listing: i in [0, hr_tool_format_count()). */
size_t hr_tool_format_count(void);
const hr_tool_format *hr_tool_format_at(size_t i);
const char *hr_tool_format_name(const hr_tool_format *f);

/* The shape of one valid call, for tool_choice "required" or a named
 * function, as JSON text (malloc'd, caller frees):
 *
 *   {"format": "<name>",
 *    "alternatives": [{"name": "<tool or null>", "prefix": "<literal>",
 *                      "schema": {JSON Schema}, "suffix": "<literal>"}, ...]}
 *
 * A valid output is: prefix, then one JSON document valid against schema,
 * then suffix, for one of the alternatives (the lead's grammar may repeat
 * that for parallel calls). Formats whose payload is a call object (or a
 * list of them) have one alternative (name null) whose schema is anyOf one
 * object schema per tool; formats that write the name outside the JSON
 * (Mistral [ARGS], Kimi, DeepSeek, ...) have one alternative per tool whose
 * schema is that tool's parameters. tools: the request's "tools" array;
 * only_name: the function tool_choice names, or NULL for any. Errors:
 * HR_EINVAL (tools not an array of functions, only_name not among them),
 * HR_EUNSUPPORTED (the format's arguments are not JSON: XML-style
 * parameters, Gemma 4's notation). */
int hr_tool_format_call_schema(const hr_tool_format *f, const json_t *tools,
                               const char *only_name, char **out, hr_error *err);

/* ---- events ------------------------------------------------------------ */

typedef enum hr_tool_event_kind {
    HR_TOOL_EV_CONTENT,    /* text, len: plain content */
    HR_TOOL_EV_CALL_START, /* index, id, name */
    HR_TOOL_EV_CALL_ARGS,  /* index, text, len: a fragment of the arguments' JSON */
    HR_TOOL_EV_CALL_END,   /* index */
} hr_tool_event_kind;

typedef struct hr_tool_event {
    hr_tool_event_kind kind;
    int index;        /* call number in this output, from 0 (calls only) */
    const char *text; /* CONTENT / CALL_ARGS: bytes, NUL-terminated */
    size_t len;
    const char *id;   /* CALL_START: "call_" + 24 alphanumerics */
    const char *name; /* CALL_START: the function's name */
} hr_tool_event;

/* Caller-owned, reusable event list. Zero-initialize it; each push / finish
 * appends. The strings live in the list and stay valid until the next
 * _reset or _free; _reset keeps the memory (no allocation once warm). */
typedef struct hr_tool_events {
    hr_tool_event *ev;
    size_t n, cap;
    char *buf; /* string storage (internal) */
    size_t buf_len, buf_cap;
} hr_tool_events;

void hr_tool_events_reset(hr_tool_events *e);
void hr_tool_events_free(hr_tool_events *e);

/* ---- parser ------------------------------------------------------------ */

typedef struct hr_tool_parser hr_tool_parser;

typedef struct hr_tool_parser_opts {
    const json_t *tools; /* the request's tools (may be NULL): parameter types
                            for formats whose values are untyped text */
    uint64_t seed;       /* call ids' random source; 0: seeded from the clock */
} hr_tool_parser_opts;

/* f must not be NULL; opts may be NULL. The parser keeps no reference to
 * opts->tools after _new returns. HR_ENOMEM on allocation failure. */
int hr_tool_parser_new(hr_tool_parser **out, const hr_tool_format *f,
                       const hr_tool_parser_opts *opts, hr_error *err);
void hr_tool_parser_free(hr_tool_parser *p);

/* Feed the next len bytes of output (any split, even inside a UTF-8
 * sequence or a marker) and append the events they complete to out.
 * Returns 0, or HR_ENOMEM (the parser is then unusable). */
int hr_tool_parser_push(hr_tool_parser *p, const char *text, size_t len, hr_tool_events *out);

/* End of generation: flush held-back text and report an unterminated call
 * as content. Call once; push after finish is HR_EINVAL. */
int hr_tool_parser_finish(hr_tool_parser *p, hr_tool_events *out);

/* Number of calls emitted so far: finish_reason is "tool_calls" when > 0. */
int hr_tool_parser_calls(const hr_tool_parser *p);

#endif
