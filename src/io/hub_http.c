/* hearth get's HTTP exchanges over libcurl (io/hub_http.h). */
#include "io/hub_http.h"
#include "core/error.h"
#include "core/header_line.h"
#include "core/timer.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define API_MAX (16u << 20) /* largest revision listing read */

/* ---- one HTTP exchange ---------------------------------------------------------------- */

static void header_value(char *dst, size_t n, const char *v, size_t len) {
    size_t k = 0;
    for (size_t i = 0; i < len && k + 1 < n; i++)
        if ((unsigned char)v[i] >= 0x20 && v[i] != 0x7f)
            dst[k++] = v[i];
    dst[k] = 0;
}

static int64_t header_int(const char *v, size_t len) {
    int64_t x = 0;
    size_t i = 0;
    if (!len)
        return -1;
    for (; i < len && isdigit((unsigned char)v[i]); i++) {
        if (x > (INT64_MAX - 9) / 10)
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    return i == len && i ? x : -1;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *u) {
    hr__hub *h = u;
    hr__resp *r = h->r;
    size_t n = size * nmemb, len = n;
    while (len && (p[len - 1] == '\r' || p[len - 1] == '\n'))
        len--;
    if (len > 5 && !strncmp(p, "HTTP/", 5)) { /* a new response (after 100 Continue) */
        memset(r, 0, sizeof *r);
        r->linked_size = r->content_length = -1;
        const char *sp = memchr(p, ' ', len);
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        return n;
    }
    hr_header_line l;
    if (!hr_header_line_split(p, len, &l))
        return n;
    const char *v = l.value;
    size_t vl = l.value_len;
    if (hr_header_line_is(&l, "ETag"))
        header_value(r->etag, sizeof r->etag, v, vl);
    else if (hr_header_line_is(&l, "X-Linked-Etag"))
        header_value(r->linked_etag, sizeof r->linked_etag, v, vl);
    else if (hr_header_line_is(&l, "X-Repo-Commit"))
        header_value(r->commit, sizeof r->commit, v, vl);
    else if (hr_header_line_is(&l, "Location"))
        header_value(r->location, sizeof r->location, v, vl);
    else if (hr_header_line_is(&l, "X-Error-Code"))
        header_value(r->error_code, sizeof r->error_code, v, vl);
    else if (hr_header_line_is(&l, "X-Error-Message"))
        header_value(r->error_msg, sizeof r->error_msg, v, vl);
    else if (hr_header_line_is(&l, "Content-Range"))
        header_value(r->content_range, sizeof r->content_range, v, vl);
    else if (hr_header_line_is(&l, "X-Linked-Size"))
        r->linked_size = header_int(v, vl);
    else if (hr_header_line_is(&l, "Content-Length"))
        r->content_length = header_int(v, vl);
    return n;
}

/* Writes to the blob only the body of a 200 or 206 (error bodies go to
 * mem); a 200 to a ranged request starts the file over. */
static size_t on_body(char *p, size_t size, size_t nmemb, void *u) {
    hr__hub *h = u;
    size_t n = size * nmemb;
    if (h->fd < 0 || (h->r->status != 200 && h->r->status != 206)) {
        size_t room = h->cap - h->len;
        if (n > room) {
            size_t cap = h->cap ? h->cap : 4096;
            while (cap - h->len < n && cap <= API_MAX)
                cap *= 2;
            if (cap - h->len < n)
                return 0; /* too large */
            char *m = realloc(h->mem, cap + 1);
            if (!m)
                return 0;
            h->mem = m;
            h->cap = cap;
        }
        memcpy(h->mem + h->len, p, n);
        h->len += n;
        h->mem[h->len] = 0;
        return n;
    }
    if (h->off == h->start && h->start > 0) {
        long long from = -1;
        if (h->r->status == 200) { /* the range was ignored */
            if (ftruncate(h->fd, 0) != 0) {
                h->werr = errno;
                return 0;
            }
            h->off = h->start = 0;
        } else if (sscanf(h->r->content_range, "bytes %lld-", &from) != 1 || from != h->start) {
            h->werr = -1;
            return 0;
        }
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = pwrite(h->fd, p + done, n - done, (off_t)h->off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            h->werr = w < 0 ? errno : ENOSPC;
            return 0;
        }
        done += (size_t)w;
        h->off += w;
        h->res->bytes += (uint64_t)w;
    }
    return n;
}

void hr__hub_show(hr__hub *h, bool last) {
    double now = hr_now();
    if (!h->progress || (!last && now - h->t_shown < 0.25))
        return;
    h->t_shown = now;
    double mb = 1e-6 * (double)h->off, tot = 1e-6 * (double)h->total;
    double rate = now > h->t0 ? 1e-6 * (double)(h->off - h->start) / (now - h->t0) : 0;
    int pct = h->total > 0 ? (int)(100.0 * (double)h->off / (double)h->total) : 100;
    fprintf(h->progress, "\r  %-36.36s %9.1f / %.1f MB %3d%% %7.1f MB/s%s", h->name, mb, tot,
            pct, rate, last ? "\n" : "");
    fflush(h->progress);
}

static int on_progress(void *u, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    (void)dt, (void)dn, (void)ut, (void)un;
    hr__hub *h = u;
    if (h->fd >= 0)
        hr__hub_show(h, false);
    return 0;
}

/* One request, no redirect followed. from >= 0 asks for bytes from..end. */
CURLcode hr__hub_perform(hr__hub *h, bool head, const char *url, bool auth, int64_t from,
                         hr__resp *r) {
    CURL *c = h->curl;
    curl_easy_reset(c);
    memset(r, 0, sizeof *r);
    r->linked_size = r->content_length = -1;
    h->r = r;
    h->len = 0;
    h->werr = 0;
    struct curl_slist *hd = NULL;
    if (auth && h->auth[0])
        hd = curl_slist_append(hd, h->auth);
    hd = curl_slist_append(hd, "Accept-Encoding: identity");
    char range[64];
    if (from > 0) {
        snprintf(range, sizeof range, "Range: bytes=%lld-", (long long)from);
        hd = curl_slist_append(hd, range);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOBODY, head ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "hearth/0.1.0 libcurl/" LIBCURL_VERSION);
    /* only the listing follows redirects (a renamed repo); curl sends the
     * Authorization header to the same host only */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, h->fd < 0 && !head ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* stalled 30 s: a cut connection */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 30L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, h->fd >= 0 && h->progress ? 0L : 1L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, h);
    CURLcode cc = curl_easy_perform(c);
    if (!r->status) {
        long st = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
        r->status = st;
    }
    curl_slist_free_all(hd);
    return cc;
}

/* ---- errors ---------------------------------------------------------------------------- */

int hr__hub_transport_error(CURLcode cc, const char *url, hr_error *err) {
    return hr_err(err, HR_EIO, "%.300s: %s", url, curl_easy_strerror(cc));
}

/* An HTTP error in huggingface_hub's terms (X-Error-Code first). file is
 * NULL for the revision listing. */
int hr__hub_http_error(hr__hub *h, const hr__resp *r, const char *rev, const char *file,
                       hr_error *err) {
    const char *code = r->error_code, *tok = h->auth[0] ? "HF_TOKEN has no access to it"
                                                         : "it is private or gated: set HF_TOKEN";
    if (!strcmp(code, "RevisionNotFound"))
        return hr_err(err, HR_ENOTFOUND, "'%s' has no revision '%s' on the hub (HTTP %ld)",
                      h->repo, rev, r->status);
    if (!strcmp(code, "EntryNotFound") || (file && r->status == 404 && !code[0]))
        return hr_err(err, HR_ENOTFOUND, "'%s' has no file '%s' at %s (HTTP %ld)", h->repo,
                      file ? file : "?", rev, r->status);
    if (!strcmp(code, "GatedRepo"))
        return hr_err(err, HR_EINVAL, "'%s' is gated: accept its conditions on the hub and set "
                      "HF_TOKEN (HTTP %ld)", h->repo, r->status);
    if (!strcmp(code, "RepoNotFound") || r->status == 401 || r->status == 404)
        return hr_err(err, r->status == 401 ? HR_EINVAL : HR_ENOTFOUND,
                      "repository '%s' not found, or %s (HTTP %ld)", h->repo, tok, r->status);
    if (r->status == 403)
        return hr_err(err, HR_EINVAL, "'%s': access denied%s%s (HTTP 403)", h->repo,
                      r->error_msg[0] ? ": " : "", r->error_msg);
    return hr_err(err, HR_EIO, "'%s'%s%s: HTTP %ld%s%s", h->repo, file ? " " : "",
                  file ? file : "", r->status, r->error_msg[0] ? ": " : "", r->error_msg);
}
