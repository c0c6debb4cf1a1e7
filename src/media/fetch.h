/* Fetching an image_url part's http(s) URL through the SSRF guard (libcurl).
 *
 * Every hop (the URL, then each redirect, followed one by one) is resolved
 * first; when any address the name resolves to is private, loopback,
 * link-local, multicast, unspecified or reserved (media/netaddr.h) the
 * fetch is refused, unless allow_private is set or the host is in
 * allow_hosts. The connection goes only to the checked addresses (pinned
 * with CURLOPT_RESOLVE; an opensocket callback checks the address again),
 * never through a proxy. The body is bounded in bytes and the whole fetch,
 * redirects included, in time; the reply must be 200 with an image/ media
 * type. */
#ifndef HR_MEDIA_FETCH_H
#define HR_MEDIA_FETCH_H

#include "hearth.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HR_MEDIA_DEFAULT_MAX_BYTES (20u << 20)
#define HR_MEDIA_DEFAULT_TIMEOUT_S 10.0
#define HR_MEDIA_MAX_REDIRECTS 5

typedef struct hr_media_opts {
    size_t max_bytes;        /* the body's bound; 0: HR_MEDIA_DEFAULT_MAX_BYTES */
    double timeout_s;        /* the whole fetch; 0: HR_MEDIA_DEFAULT_TIMEOUT_S */
    bool allow_private;      /* --allow-private-media: no address is refused */
    const char *allow_hosts; /* comma-separated host names whose addresses are
                              * not checked (--media-allow-host), or NULL */
} hr_media_opts;

/* GETs url. *out: the body (malloc'd, caller frees), *n its length, mime
 * (mime_n bytes) the reply's media type, lowercased, without parameters.
 * HR_EINVAL: a malformed URL, a refused address (the message names the host,
 * the address and its class), a non-200 reply, a reply that is not an
 * image; HR_EUNSUPPORTED: a scheme other than http/https; HR_ERANGE: a body
 * past max_bytes or too many redirects; HR_EIO: a network failure or the
 * time limit; HR_ENOMEM. */
int hr_media_fetch(const char *url, const hr_media_opts *o, uint8_t **out, size_t *n, char *mime,
                   size_t mime_n, hr_error *err);

#endif
