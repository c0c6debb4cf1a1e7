/* A front's side of the HTTP layer (server/front.h): the request's
 * headers for it, and its answers through the box (http.h). */
#include "server/front.h"
#include "server/drive.h"
#include "server/http.h"

#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum MHD_Result header_line(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
    (void)kind;
    char **hb = cls;
    size_t len = *hb ? strlen(*hb) : 0, cap = len + 1;
    if (!*hb) {
        if (!(*hb = malloc(1)))
            return MHD_NO;
        (*hb)[0] = 0;
    }
    if (hr__buf_append(hb, &len, &cap, key, strlen(key)) ||
        hr__buf_append(hb, &len, &cap, ": ", 2) ||
        hr__buf_append(hb, &len, &cap, value ? value : "", value ? strlen(value) : 0) ||
        hr__buf_append(hb, &len, &cap, "\n", 1))
        return MHD_NO;
    return MHD_YES;
}

char *hr__front_headers(struct MHD_Connection *c) {
    char *hb = NULL;
    MHD_get_connection_values(c, MHD_HEADER_KIND, header_line, &hb);
    return hb ? hb : strdup("");
}

bool hr_front_gone(hr_outbox *b) {
    hr_client *cl = hr__outbox_client(b);
    if (atomic_load(&cl->gone))
        return true;
    if (cl->fd < 0)
        return false;
    struct pollfd p = {.fd = cl->fd, .events = 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

void hr_front_reply(hr_outbox *b, unsigned status, const char *ctype, char *body,
                    unsigned retry_after) {
    hr__outbox_reply(b, (hr_reply){.status = status, .body = body, .ctype = ctype,
                                   .retry_after = retry_after});
}

void hr_front_error(hr_outbox *b, const char *url, unsigned status, const char *type,
                    const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    hr_reply r = hr__error_reply(status, type, NULL, "%s", msg);
    if (!strncmp(url, "/v1/messages", 12))
        r = hr__anthropic_error(r);
    hr__outbox_reply(b, r);
}

void hr_front_stream(hr_outbox *b) { hr__outbox_stream(b); }

int hr_front_write(hr_outbox *b, const char *p, size_t n) {
    return hr__outbox_write(b, p, n, true);
}

void hr_front_end(hr_outbox *b, bool clean) { hr__outbox_end(b, clean); }
