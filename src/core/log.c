#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <strings.h>

static hr_log_level g_level = HR_LOG_WARN;

void hr_log_set_level(hr_log_level level) { g_level = level; }

int hr_log_parse_level(const char *name) {
    static const struct { const char *name; hr_log_level level; } names[] = {
        {"debug", HR_LOG_DEBUG}, {"info", HR_LOG_INFO},
        {"warning", HR_LOG_WARN}, {"warn", HR_LOG_WARN},
        {"error", HR_LOG_ERROR}, {"critical", HR_LOG_ERROR},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(name, names[i].name))
            return (int)names[i].level;
    return -1;
}

void hr_log(hr_log_level level, const char *fmt, ...) {
    if (level < g_level)
        return;
    static const char *tag[] = {"debug", "info", "warning", "error"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "hearth %s: %s\n", tag[level], line);
}
