/* The media fetch and its SSRF guard (media/fetch.h). */
#include "media/fetch.h"
#include "media/netaddr.h"
#include "core/error.h"
#include "core/header_line.h"
#include "core/timer.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define MAX_ADDRS 16

/* One hop's state, shared with curl's callbacks. */
typedef struct hop {
    const hr_media_opts *o;
    bool checked;            /* the host's addresses are checked (not allow-listed) */
    struct sockaddr_storage addr[MAX_ADDRS];
    int n_addr;
    char refused[160];       /* set by the opensocket callback */
    uint8_t *body;
    size_t n, cap, max;
    bool too_big;
    char ctype[128];
    char location[2048];
    bool loc_too_long;
} hop;

static bool host_allowed(const char *list, const char *host) {
    size_t hl = strlen(host);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == hl && !strncasecmp(p, host, l))
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

static void addr_text(const struct sockaddr *sa, char *buf, size_t n) {
    const void *a = sa->sa_family == AF_INET6
                        ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                        : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
    if (!inet_ntop(sa->sa_family, a, buf, (socklen_t)n))
        snprintf(buf, n, "?");
}

static bool same_addr(const struct sockaddr *a, const struct sockaddr_storage *b) {
    if (a->sa_family != b->ss_family)
        return false;
    if (a->sa_family == AF_INET)
        return !memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                       &((const struct sockaddr_in *)b)->sin_addr, 4);
    return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                   &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

/* ---- curl callbacks ------------------------------------------------------------------ */

/* The connection's last check: only an address resolve() checked, and only
 * of a class the options allow. */
static curl_socket_t on_open(void *u, curlsocktype purpose, struct curl_sockaddr *a) {
    hop *h = u;
    (void)purpose;
    const struct sockaddr *sa = &a->addr;
    if (h->checked) {
        hr_addr_class c = hr_addr_classify(sa);
        bool known = false;
        for (int i = 0; i < h->n_addr && !known; i++)
            known = same_addr(sa, &h->addr[i]);
        if (!known || (c != HR_ADDR_PUBLIC && !h->o->allow_private)) {
            char t[INET6_ADDRSTRLEN];
            addr_text(sa, t, sizeof t);
            snprintf(h->refused, sizeof h->refused, "the connection to %s (%s) was refused", t,
                     known ? hr_addr_class_name(c) : "not the address checked");
            return CURL_SOCKET_BAD;
        }
    }
    return socket(a->family, a->socktype, a->protocol);
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *u) {
    hop *h = u;
    size_t n = size * nmemb;
    if (n > h->max - h->n) {
        h->too_big = true;
        return 0; /* aborts the transfer */
    }
    if (h->n + n > h->cap) {
        size_t cap = h->cap ? h->cap : 64 << 10;
        while (cap < h->n + n)
            cap *= 2;
        if (cap > h->max)
            cap = h->max;
        uint8_t *b = realloc(h->body, cap);
        if (!b)
            return 0;
        h->body = b;
        h->cap = cap;
    }
    memcpy(h->body + h->n, p, n);
    h->n += n;
    return n;
}

static void header_copy(char *dst, size_t cap, const char *v, size_t len, bool *too_long) {
    if (len >= cap) {
        if (too_long)
            *too_long = true;
        len = cap - 1;
    }
    size_t k = 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)v[i] > 0x20 && v[i] != 0x7f)
            dst[k++] = v[i];
        else if (v[i] == ' ' && k)
            dst[k++] = ' ';
    dst[k] = 0;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *u) {
    hop *h = u;
    size_t n = size * nmemb;
    hr_header_line l;
    if (!hr_header_line_split(p, n, &l))
        return n;
    if (hr_header_line_is(&l, "Content-Type"))
        header_copy(h->ctype, sizeof h->ctype, l.value, l.value_len, NULL);
    else if (hr_header_line_is(&l, "Location"))
        header_copy(h->location, sizeof h->location, l.value, l.value_len, &h->loc_too_long);
    return n;
}

/* ---- one hop ------------------------------------------------------------------------- */

/* Resolves host and checks every address it has. *pin: a CURLOPT_RESOLVE
 * entry pinning the connection to them. */
static int resolve(hop *h, const char *host, long port, struct curl_slist **pin, hr_error *err) {
    char name[256];
    size_t hl = strlen(host);
    if (hl >= sizeof name)
        return hr_err(err, HR_EINVAL, "the host name is too long");
    /* an IPv6 literal comes bracketed */
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        memcpy(name, host + 1, hl - 2);
        name[hl - 2] = 0;
    } else {
        memcpy(name, host, hl + 1);
    }
    char *zone = strchr(name, '%');
    if (zone)
        return hr_err(err, HR_EINVAL, "refused: '%s' is a scoped (link-local) address", host);
    h->checked = !h->o->allow_hosts || !host_allowed(h->o->allow_hosts, name);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int g = getaddrinfo(name, NULL, &hints, &res);
    if (g)
        return hr_err(err, HR_EIO, "cannot resolve '%s': %s", name, gai_strerror(g));
    char entry[2400];
    int at = snprintf(entry, sizeof entry, "%s:%ld:", host, port);
    h->n_addr = 0;
    int rc = 0;
    for (struct addrinfo *a = res; a && h->n_addr < MAX_ADDRS; a = a->ai_next) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
            continue;
        hr_addr_class c = hr_addr_classify(a->ai_addr);
        char t[INET6_ADDRSTRLEN];
        addr_text(a->ai_addr, t, sizeof t);
        if (h->checked && c != HR_ADDR_PUBLIC && !h->o->allow_private) {
            rc = hr_err(err, HR_EINVAL,
                        "refused: '%s' resolves to the %s address %s (the server allows "
                        "such addresses with --allow-private-media or --media-allow-host)",
                        name, hr_addr_class_name(c), t);
            break;
        }
        memcpy(&h->addr[h->n_addr++], a->ai_addr, a->ai_addrlen);
        at += snprintf(entry + at, sizeof entry - (size_t)at,
                       a->ai_family == AF_INET6 ? "%s[%s]" : "%s%s", h->n_addr > 1 ? "," : "", t);
        if (at >= (int)sizeof entry - 64)
            break;
    }
    freeaddrinfo(res);
    if (rc)
        return rc;
    if (!h->n_addr)
        return hr_err(err, HR_EIO, "'%s' has no IPv4 or IPv6 address", name);
    *pin = curl_slist_append(NULL, entry);
    return *pin ? 0 : hr_err(err, HR_ENOMEM, "out of memory");
}

/* Lowercased media type without parameters. */
static void media_type(const char *ctype, char *mime, size_t mime_n) {
    size_t k = 0;
    for (const char *p = ctype; *p && *p != ';' && k + 1 < mime_n; p++)
        if (*p != ' ')
            mime[k++] = (char)tolower((unsigned char)*p);
    if (mime_n)
        mime[k] = 0;
}

/* One GET of the URL u holds, within the time left. *status: its HTTP status. */
static int get(CURLU *u, hop *h, double left, double limit, long *status, hr_error *err) {
    char *scheme = NULL, *host = NULL, *port = NULL;
    struct curl_slist *pin = NULL;
    CURL *c = NULL;
    int rc = 0;
    if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0)) {
        rc = hr_err(err, HR_EINVAL, "the URL has no scheme");
        goto done;
    }
    if (strcasecmp(scheme, "http") && strcasecmp(scheme, "https")) {
        rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: '%s' URLs (http, https and data "
                    "are)", scheme);
        goto done;
    }
    if (curl_url_get(u, CURLUPART_HOST, &host, 0) ||
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT)) {
        rc = hr_err(err, HR_EINVAL, "the URL has no host");
        goto done;
    }
    if ((rc = resolve(h, host, strtol(port, NULL, 10), &pin, err)))
        goto done;
    if (!(c = curl_easy_init())) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    long ms = (long)(left * 1000);
    curl_easy_setopt(c, CURLOPT_CURLU, u);
    curl_easy_setopt(c, CURLOPT_RESOLVE, pin);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms > 1 ? ms : 1L);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)h->max);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "hearth");
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
    CURLcode cr = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    if (h->refused[0])
        rc = hr_err(err, HR_EINVAL, "refused: %s", h->refused);
    else if (h->too_big || cr == CURLE_FILESIZE_EXCEEDED)
        rc = hr_err(err, HR_ERANGE, "the image at the URL is larger than %zu bytes", h->max);
    else if (cr == CURLE_OPERATION_TIMEDOUT)
        rc = hr_err(err, HR_EIO, "the fetch took longer than its time limit (%g s)", limit);
    else if (cr != CURLE_OK)
        rc = hr_err(err, HR_EIO, "the fetch failed: %s", curl_easy_strerror(cr));
done:
    curl_easy_cleanup(c);
    curl_slist_free_all(pin);
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    return rc;
}

int hr_media_fetch(const char *url, const hr_media_opts *o, uint8_t **out, size_t *n, char *mime,
                   size_t mime_n, hr_error *err) {
    *out = NULL;
    *n = 0;
    if (mime_n)
        mime[0] = 0;
    double limit = o->timeout_s > 0 ? o->timeout_s : HR_MEDIA_DEFAULT_TIMEOUT_S;
    double t0 = hr_now();
    CURLU *u = curl_url();
    if (!u)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int rc = 0;
    if (curl_url_set(u, CURLUPART_URL, url, 0)) {
        curl_url_cleanup(u);
        return hr_err(err, HR_EINVAL, "not a valid URL");
    }
    for (int hops = 0;; hops++) {
        hop h = {.o = o, .max = o->max_bytes ? o->max_bytes : HR_MEDIA_DEFAULT_MAX_BYTES};
        double left = limit - (hr_now() - t0);
        if (left <= 0) {
            rc = hr_err(err, HR_EIO, "the fetch took longer than its time limit (%g s)", limit);
            break;
        }
        long status = 0;
        rc = get(u, &h, left, limit, &status, err);
        if (!rc && status >= 300 && status < 400 && h.location[0]) {
            free(h.body);
            if (hops == HR_MEDIA_MAX_REDIRECTS) {
                rc = hr_err(err, HR_ERANGE, "more than %d redirects", HR_MEDIA_MAX_REDIRECTS);
                break;
            }
            /* the next hop, relative to this one, checked like the first */
            if (h.loc_too_long || curl_url_set(u, CURLUPART_URL, h.location, 0)) {
                rc = hr_err(err, HR_EINVAL, "a redirect to a malformed URL");
                break;
            }
            continue;
        }
        if (!rc && status != 200)
            rc = hr_err(err, HR_EINVAL, "the URL answered HTTP %ld", status);
        char type[64];
        media_type(h.ctype, type, sizeof type);
        if (!rc && (strlen(type) < 6 || memcmp(type, "image/", 6)))
            rc = hr_err(err, HR_EINVAL, "the URL's content type is '%s', not an image",
                        type[0] ? type : "(none)");
        if (!rc && !h.n)
            rc = hr_err(err, HR_EINVAL, "the URL answered an empty body");
        if (rc) {
            free(h.body);
            break;
        }
        snprintf(mime, mime_n, "%s", type);
        *out = h.body;
        *n = h.n;
        break;
    }
    curl_url_cleanup(u);
    return rc;
}
