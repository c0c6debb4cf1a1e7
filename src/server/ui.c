/* The web chat UI's static files, from the table tools/embed-web.cmake
 * generates out of web/. */
#include "server/ui.h"
#include "server/internal.h"

#include <string.h>

/* Everything comes from this origin; nothing runs inline; no frames. */
#define UI_CSP                                                                          \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "   \
    "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; "    \
    "frame-ancestors 'none'"

const hr_ui_asset *hr_ui_find(const char *url) {
    for (int i = 0; i < hr__ui_n_assets; i++)
        if (!strcmp(hr__ui_assets[i].path, url))
            return &hr__ui_assets[i];
    return NULL;
}

/* If-None-Match: "*" or a comma-separated list of (possibly weak) tags. */
static bool etag_matches(const char *header, const char *etag) {
    if (!header)
        return false;
    if (!strcmp(header, "*"))
        return true;
    size_t n = strlen(etag);
    for (const char *p = strstr(header, etag); p; p = strstr(p + 1, etag)) {
        char after = p[n];
        if (after == 0 || after == ',' || after == ' ')
            return true;
    }
    return false;
}

bool hr__ui_route(struct MHD_Connection *c, const char *url, hr_reply *out) {
    const hr_ui_asset *a = hr_ui_find(url);
    if (!a)
        return false;
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-None-Match");
    bool fresh = etag_matches(inm, a->etag);
    struct MHD_Response *r =
        fresh ? MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT)
              : MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) {
        *out = hr__error_reply(500, "server_error", NULL, "out of memory");
        return true;
    }
    if (!fresh)
        MHD_add_response_header(r, "Content-Type", a->content_type);
    MHD_add_response_header(r, "ETag", a->etag);
    /* revalidate every time: a new binary may bring a new UI at the same URL */
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "Content-Security-Policy", UI_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    *out = (hr_reply){.status = fresh ? 304 : 200, .stream = r};
    return true;
}
