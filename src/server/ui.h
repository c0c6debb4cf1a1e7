/* The web chat UI: files of web/ embedded at build time (tools/embed-web.cmake
 * writes the table), served at "/" and "/ui/<file>" unless --no-ui. */
#ifndef HR_SERVER_UI_H
#define HR_SERVER_UI_H

#include <stdbool.h>
#include <stddef.h>

typedef struct hr_ui_asset {
    const char *path;          /* URL path: "/" or "/ui/<file>" */
    const char *content_type;
    const char *etag;          /* quoted, from the file's SHA-256 */
    const unsigned char *data; /* static, NUL-terminated */
    size_t len;
} hr_ui_asset;

extern const hr_ui_asset hr__ui_assets[];
extern const int hr__ui_n_assets;

struct MHD_Connection;
struct hr_reply;

/* The asset at URL path `url` (no query string), or NULL. */
const hr_ui_asset *hr_ui_find(const char *url);

/* GET/HEAD of a UI path: fills *out (200 with the file, or 304 when the
 * request's If-None-Match names its ETag) and returns true; false when `url`
 * is no UI file. Every answer carries the UI's Content-Security-Policy. */
bool hr__ui_route(struct MHD_Connection *c, const char *url, struct hr_reply *out);

#endif
