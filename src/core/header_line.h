/* One HTTP header line as libcurl's header callback hands it ("Name: value\r\n"):
 * split at the colon, the line end and the value's surrounding blanks left out. */
#ifndef HR_CORE_HEADER_LINE_H
#define HR_CORE_HEADER_LINE_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

typedef struct hr_header_line {
    const char *name, *value;
    size_t name_len, value_len;
} hr_header_line;

/* false for a line without a colon (a status line, the blank line) */
static inline bool hr_header_line_split(const char *p, size_t n, hr_header_line *h) {
    while (n && (p[n - 1] == '\r' || p[n - 1] == '\n'))
        n--;
    const char *colon = memchr(p, ':', n);
    if (!colon)
        return false;
    const char *v = colon + 1, *end = p + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *h = (hr_header_line){.name = p, .name_len = (size_t)(colon - p), .value = v,
                          .value_len = (size_t)(end - v)};
    return true;
}

/* the line's name is `name` (ASCII, any case) */
static inline bool hr_header_line_is(const hr_header_line *h, const char *name) {
    size_t n = strlen(name);
    return h->name_len == n && !strncasecmp(h->name, name, n);
}

#endif
