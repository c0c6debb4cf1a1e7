/* What the HTTP layer checks before a route sees a request (http.c calls
 * these): the request's framing (RFC 9112: one Host, one Content-Length,
 * no transfer codings, a body within --max-body-mb), a URL decoding that
 * never makes a NUL byte, and the admin routes' gate (loopback unless
 * --admin-remote; Bearer --admin-token). */
#include "core/error.h"
#include "server/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define DISCARD_MAX ((unsigned long long)64 << 20) /* body bytes read past the cap, dropped */

/* ---- request framing (RFC 9112) ------------------------------------------------------------- */

typedef struct framing {
    int n_length;       /* Content-Length fields */
    bool lengths_differ;
    char length[32];
    const char *te;     /* Transfer-Encoding */
    int n_host;
    bool bad_name;      /* whitespace in a field name ("Host : x") */
} framing;

static enum MHD_Result framing_cb(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
    (void)kind;
    framing *f = cls;
    if (strpbrk(key, " \t"))
        f->bad_name = true;
    if (!strcasecmp(key, "Content-Length")) {
        if (f->n_length++ && strcmp(f->length, value ? value : ""))
            f->lengths_differ = true;
        snprintf(f->length, sizeof f->length, "%s", value ? value : "");
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        f->te = value ? value : "";
    } else if (!strcasecmp(key, "Host")) {
        f->n_host++;
    }
    return MHD_YES;
}

/* An error decided from the headers alone (answered before any body is
 * read, and the connection then closes), or 0. */
unsigned hr__check_framing(hr_server *s, struct MHD_Connection *c, const char *version,
                              hr_reply *rep) {
    framing f = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, framing_cb, &f);
    /* libmicrohttpd runs lenient (MHD_OPTION_STRICT_FOR_CLIENT 0) so that
     * these reach us and get the API's error shape, not its HTML page */
    if (f.bad_name) {
        *rep = hr__error_reply(400, "invalid_request_error", NULL,
                               "whitespace between a header field's name and its colon");
        return 400;
    }
    if (!strcmp(version, MHD_HTTP_VERSION_1_1) && f.n_host != 1) {
        *rep = hr__error_reply(400, "invalid_request_error", NULL,
                               "an HTTP/1.1 request needs exactly one Host header");
        return 400;
    }
    if (f.lengths_differ || (f.n_length && f.te)) {
        *rep = hr__error_reply(400, "invalid_request_error", NULL,
                               "conflicting Content-Length / Transfer-Encoding headers");
        return 400;
    }
    if (f.te) {
        if (strcasecmp(f.te, "chunked")) {
            *rep = hr__error_reply(400, "invalid_request_error", NULL,
                                   "Transfer-Encoding '%.64s' is not supported", f.te);
            return 400;
        }
        /* mlx_lm.server reads Content-Length only; so does this server
         * (no chunk parser to abuse with huge sizes or extensions) */
        *rep = hr__error_reply(411, "invalid_request_error", NULL,
                               "chunked request bodies are not supported: send Content-Length");
        return 411;
    }
    if (f.n_length) {
        char *end;
        unsigned long long n = strtoull(f.length, &end, 10);
        if (end == f.length || *end || f.length[0] == '-') {
            *rep = hr__error_reply(400, "invalid_request_error", NULL,
                                   "Content-Length is not a number");
            return 400;
        }
        /* too large: answered now when the client waits for a 100
         * Continue or would send far too much; else its body is read and
         * dropped, and the 413 comes after it (clients that send first
         * and read later see it) */
        const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
        if (n > s->o.max_body && (expect || n > s->o.max_body + DISCARD_MAX)) {
            *rep = hr__error_reply(413, "invalid_request_error", NULL,
                                   "The request body exceeds %zu bytes", s->o.max_body);
            return 413;
        }
    }
    return 0;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decoding of the URL that never makes a NUL byte: "%00" stays as
 * it is, so "/v1/chat/completions%00.txt" is no route (404). */
size_t hr__unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls;
    (void)c;
    char *w = s;
    for (const char *r = s; *r; r++) {
        int hi, lo;
        if (*r == '%' && (hi = hexval(r[1])) >= 0 && (lo = hexval(r[2])) >= 0 &&
            (hi | lo)) {
            *w++ = (char)(hi << 4 | lo);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
    return (size_t)(w - s);
}

/* ---- admin routes --------------------------------------------------------------------------- */

static bool from_loopback(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return false;
    const struct sockaddr *a = ci->client_addr;
    if (a->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    if (a->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
    return false;
}

static bool token_ok(const char *want, const char *auth) {
    if (!auth || strncasecmp(auth, "Bearer ", 7))
        return false;
    auth += 7;
    size_t n = strlen(want), m = strlen(auth);
    unsigned diff = n != m;
    for (size_t i = 0; i < n; i++) /* the same time whatever the prefix matched */
        diff |= (unsigned char)want[i] ^ (unsigned char)(i < m ? auth[i] : 0);
    return !diff;
}

hr_reply hr__route_admin(hr_server *s, struct MHD_Connection *c, const char *method,
                            const char *url) {
    if (!s->o.admin_remote && !from_loopback(c))
        return hr__error_reply(403, "permission_error", NULL,
                               "admin routes answer only on loopback (--admin-remote)");
    if (s->o.admin_token &&
        !token_ok(s->o.admin_token,
                  MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization")))
        return hr__error_reply(401, "authentication_error", NULL,
                               "admin routes need Authorization: Bearer <--admin-token>");
    if (!strcmp(url, "/admin/drain") && !strcmp(method, "POST")) {
        hr_server_drain_begin(s);
        return hr__json_reply(202, json_pack("{s:s,s:i}", "status", "draining", "running",
                                             atomic_load(&s->active)));
    }
    return hr__error_reply(404, "invalid_request_error", NULL, "Unknown route: %s %s", method,
                           url);
}

