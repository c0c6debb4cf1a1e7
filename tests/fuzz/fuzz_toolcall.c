/* libFuzzer: the first byte picks a tool-call format, the second a chunk
 * size; the rest is model output fed to the streaming parser in chunks of
 * that size (and, for the same bytes, all at once). The two runs must give
 * the same content and calls. Any crash, leak or sanitizer report is a bug. */
#include "chat/toolcall.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static json_t *tools;

typedef struct out {
    char *text; /* content, then "\x01name\x02args\x03" per call */
    size_t n;
} out;

static void add(out *o, const char *s, size_t n) {
    char *t = realloc(o->text, o->n + n + 1);
    if (!t)
        abort();
    o->text = t;
    memcpy(o->text + o->n, s, n);
    o->n += n;
}

static void collect(out *o, const hr_tool_events *ev) {
    for (size_t i = 0; i < ev->n; i++) {
        const hr_tool_event *e = &ev->ev[i];
        switch (e->kind) {
        case HR_TOOL_EV_CONTENT: add(o, e->text, e->len); break;
        case HR_TOOL_EV_CALL_START:
            add(o, "\x01", 1);
            add(o, e->name, strlen(e->name));
            add(o, "\x02", 1);
            break;
        case HR_TOOL_EV_CALL_ARGS: add(o, e->text, e->len); break;
        case HR_TOOL_EV_CALL_END: add(o, "\x03", 1); break;
        }
    }
}

static out run(const hr_tool_format *f, const uint8_t *data, size_t size, size_t chunk) {
    hr_tool_parser *p;
    hr_tool_parser_opts opts = {.tools = tools, .seed = 1};
    out o = {0};
    if (hr_tool_parser_new(&p, f, &opts, NULL))
        abort();
    hr_tool_events ev = {0};
    for (size_t i = 0; i < size; i += chunk) {
        hr_tool_events_reset(&ev);
        if (hr_tool_parser_push(p, (const char *)data + i, size - i < chunk ? size - i : chunk, &ev))
            abort();
        collect(&o, &ev);
    }
    hr_tool_events_reset(&ev);
    if (hr_tool_parser_finish(p, &ev))
        abort();
    collect(&o, &ev);
    hr_tool_events_free(&ev);
    hr_tool_parser_free(p);
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!tools)
        tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                           "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"},"
                           "\"n\":{\"type\":[\"integer\",\"null\"]}}}}}]",
                           0, NULL);
    if (size < 2)
        return 0;
    const hr_tool_format *f = hr_tool_format_at(data[0] % hr_tool_format_count());
    size_t chunk = (size_t)data[1] % 17 + 1;
    data += 2;
    size -= 2;
    out a = run(f, data, size, chunk), b = run(f, data, size, size ? size : 1);
    if (a.n != b.n || (a.n && memcmp(a.text, b.text, a.n)))
        abort(); /* the chunking changed the result */
    free(a.text);
    free(b.text);
    return 0;
}
