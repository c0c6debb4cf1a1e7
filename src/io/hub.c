/* hearth get's transport: the hub's HTTP API over libcurl, into the cache. */
#include "io/hub.h"
#include "core/error.h"
#include "core/file.h"
#include "core/timer.h"
#include "io/hfcache.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define API_MAX (16u << 20) /* largest revision listing read */
#define TRIES 5             /* consecutive failed tries of one file that received nothing */

/* ---- one HTTP exchange ---------------------------------------------------------------- */

/* What we keep of a response's headers (values cut to fit, control bytes
 * dropped: they reach error messages). */
typedef struct resp {
    long status;
    char etag[160], linked_etag[160], commit[64], location[2048], error_code[64];
    char error_msg[200], content_range[96];
    int64_t linked_size, content_length;
} resp;

typedef struct hub {
    CURL *curl;
    char endpoint[1024];
    char auth[4200]; /* "Authorization: Bearer ..." or "" */
    const char *repo;
    char repo_dir[HR_HF_PATH_MAX], locks[HR_HF_PATH_MAX];
    FILE *progress;
    hr_hub_result *res;
    /* the body of the exchange in flight */
    resp *r;
    char *mem;                 /* API: the body in memory */
    size_t len, cap;
    int fd;                    /* file: written at off (-1: to mem) */
    int64_t off, start;        /* where the body goes; where it started */
    int werr;                  /* errno of a failed write, or -1: bad Content-Range */
    const char *name;          /* the file, for progress */
    int64_t total;
    double t0, t_shown;
} hub;

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
    hub *h = u;
    resp *r = h->r;
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
    const char *colon = memchr(p, ':', len);
    if (!colon)
        return n;
    size_t kl = (size_t)(colon - p);
    const char *v = colon + 1;
    while (v < p + len && (*v == ' ' || *v == '\t'))
        v++;
    size_t vl = (size_t)(p + len - v);
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
#define IS(name) (kl == sizeof(name) - 1 && !strncasecmp(p, name, kl))
    if (IS("ETag"))
        header_value(r->etag, sizeof r->etag, v, vl);
    else if (IS("X-Linked-Etag"))
        header_value(r->linked_etag, sizeof r->linked_etag, v, vl);
    else if (IS("X-Repo-Commit"))
        header_value(r->commit, sizeof r->commit, v, vl);
    else if (IS("Location"))
        header_value(r->location, sizeof r->location, v, vl);
    else if (IS("X-Error-Code"))
        header_value(r->error_code, sizeof r->error_code, v, vl);
    else if (IS("X-Error-Message"))
        header_value(r->error_msg, sizeof r->error_msg, v, vl);
    else if (IS("Content-Range"))
        header_value(r->content_range, sizeof r->content_range, v, vl);
    else if (IS("X-Linked-Size"))
        r->linked_size = header_int(v, vl);
    else if (IS("Content-Length"))
        r->content_length = header_int(v, vl);
#undef IS
    return n;
}

/* Writes to the blob only the body of a 200 or 206 (error bodies go to
 * mem); a 200 to a ranged request starts the file over. */
static size_t on_body(char *p, size_t size, size_t nmemb, void *u) {
    hub *h = u;
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

static void show(hub *h, bool last) {
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
    hub *h = u;
    if (h->fd >= 0)
        show(h, false);
    return 0;
}

/* One request, no redirect followed. from >= 0 asks for bytes from..end. */
static CURLcode perform(hub *h, bool head, const char *url, bool auth, int64_t from, resp *r) {
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

static int transport_error(CURLcode cc, const char *url, hr_error *err) {
    return hr_err(err, HR_EIO, "%.300s: %s", url, curl_easy_strerror(cc));
}

/* An HTTP error in huggingface_hub's terms (X-Error-Code first). file is
 * NULL for the revision listing. */
static int http_error(hub *h, const resp *r, const char *rev, const char *file, hr_error *err) {
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

/* ---- names and hashes ------------------------------------------------------------------ */

static int pathf(char *out, size_t n, hr_error *err, const char *f, ...)
    __attribute__((format(printf, 4, 5)));
static int pathf(char *out, size_t n, hr_error *err, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int w = vsnprintf(out, n, f, ap);
    va_end(ap);
    return w < 0 || (size_t)w >= n ? hr_err(err, HR_ERANGE, "path too long") : 0;
}

/* Percent-encodes s into out, keeping unreserved bytes (and '/' if keep_slash). */
static int url_quote(char *out, size_t n, const char *s, bool keep_slash) {
    size_t k = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (isalnum(c) || strchr("-._~", c) || (keep_slash && c == '/')) {
            if (k + 1 >= n)
                return HR_ERANGE;
            out[k++] = (char)c;
        } else {
            if (k + 3 >= n)
                return HR_ERANGE;
            k += (size_t)snprintf(out + k, 4, "%%%02X", c);
        }
    }
    out[k] = 0;
    return 0;
}

/* huggingface_hub's _normalize_etag: drop a W/ prefix and the quotes. The
 * result names a blob: letters, digits, '-', '_', '.', not leading '.'. */
static int etag_norm(char *out, size_t n, const char *etag, hr_error *err) {
    if (!strncmp(etag, "W/", 2))
        etag += 2;
    size_t len = strlen(etag);
    while (len && *etag == '"')
        etag++, len--;
    while (len && etag[len - 1] == '"')
        len--;
    if (!len || len >= n || etag[0] == '.')
        return hr_err(err, HR_EFORMAT, "the hub sent no usable ETag");
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)etag[i]) && !strchr("-_.", etag[i]))
            return hr_err(err, HR_EFORMAT, "the hub sent an ETag that is not a file name");
    memcpy(out, etag, len);
    out[len] = 0;
    return 0;
}

static bool all_hex(const char *s, size_t len) {
    size_t i = 0;
    for (; s[i]; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return i == len;
}

/* The digest the etag promises for the file at path: sha256 for 64 hex
 * digits (LFS), git's blob sha1 for 40; kind is "" when it promises none. */
static int file_digest(const char *path, const char *etag, int64_t size, char *hex,
                       const char **kind, hr_error *err) {
    const EVP_MD *md = all_hex(etag, 64) ? EVP_sha256() : all_hex(etag, 40) ? EVP_sha1() : NULL;
    *kind = md == NULL ? "" : all_hex(etag, 64) ? "sha256" : "git sha1";
    hex[0] = 0;
    if (!md)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hr_err(err, HR_EIO, "%s: %s", path, strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    char *buf = malloc(1 << 20);
    int rc = 0;
    if (!ctx || !buf || !EVP_DigestInit_ex(ctx, md, NULL)) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    if (md == EVP_sha1()) {
        char head[40];
        int hl = snprintf(head, sizeof head, "blob %lld", (long long)size);
        EVP_DigestUpdate(ctx, head, (size_t)hl + 1); /* with its NUL */
    }
    for (;;) {
        ssize_t got = read(fd, buf, 1 << 20);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            rc = hr_err(err, HR_EIO, "%s: %s", path, strerror(errno));
            goto done;
        }
        if (!got)
            break;
        EVP_DigestUpdate(ctx, buf, (size_t)got);
    }
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned dl = 0;
    EVP_DigestFinal_ex(ctx, d, &dl);
    for (unsigned i = 0; i < dl; i++)
        sprintf(hex + 2 * i, "%02x", d[i]);
done:
    free(buf);
    EVP_MD_CTX_free(ctx);
    close(fd);
    return rc;
}

/* ---- one file -------------------------------------------------------------------------- */

static bool same_host(const char *a, const char *b) {
    CURLU *ua = curl_url(), *ub = curl_url();
    char *ha = NULL, *hb = NULL, *pa = NULL, *pb = NULL;
    bool same = ua && ub && !curl_url_set(ua, CURLUPART_URL, a, 0) &&
                !curl_url_set(ub, CURLUPART_URL, b, 0) &&
                !curl_url_get(ua, CURLUPART_HOST, &ha, 0) &&
                !curl_url_get(ub, CURLUPART_HOST, &hb, 0) &&
                !curl_url_get(ua, CURLUPART_PORT, &pa, CURLU_DEFAULT_PORT) &&
                !curl_url_get(ub, CURLUPART_PORT, &pb, CURLU_DEFAULT_PORT) &&
                !strcasecmp(ha, hb) && !strcmp(pa, pb);
    curl_free(ha), curl_free(hb), curl_free(pa), curl_free(pb);
    curl_url_cleanup(ua), curl_url_cleanup(ub);
    return same;
}

/* base's origin + a Location that starts with '/'. */
static int join_origin(char *out, size_t n, const char *base, const char *loc) {
    const char *p = strstr(base, "://");
    p = p ? strchr(p + 3, '/') : NULL;
    int len = p ? (int)(p - base) : (int)strlen(base);
    int w = snprintf(out, n, "%.*s%s", len, base, loc);
    return w < 0 || (size_t)w >= n ? HR_ERANGE : 0;
}

/* Downloads url into blob (via blob.incomplete, resumed), checks its size and
 * digest, renames it into place. */
static int fetch_blob(hub *h, const char *url, bool auth, const char *file, const char *etag,
                      int64_t size, const char *blob, hr_error *err) {
    char inc[HR_HF_PATH_MAX], hex[2 * EVP_MAX_MD_SIZE + 1];
    int rc = pathf(inc, sizeof inc, err, "%s.incomplete", blob);
    if (rc)
        return rc;
    bool fresh = false; /* started from byte 0 at least once */
    for (;;) {
        int fd = open(inc, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0)
            return hr_err(err, HR_EIO, "%s: %s", inc, strerror(errno));
        struct stat st;
        int64_t have = fstat(fd, &st) == 0 ? (int64_t)st.st_size : 0;
        if (have > size && ftruncate(fd, 0) == 0)
            have = 0;
        int64_t from0 = have;
        h->fd = fd;
        h->off = h->start = have;
        h->name = file;
        h->total = size;
        h->t0 = hr_now();
        h->t_shown = 0;
        for (int fails = 0; have < size && fails < TRIES;) {
            resp r;
            h->start = h->off = have;
            CURLcode cc = perform(h, false, url, auth, have, &r);
            if (h->werr) {
                int e = h->werr;
                close(fd);
                h->fd = -1;
                if (e == -1)
                    return hr_err(err, HR_EIO, "'%s': the server answered a range request with "
                                  "the wrong range ('%s')", file, r.content_range);
                if (e == ENOSPC || e == EDQUOT || e == EFBIG)
                    return hr_err(err, HR_EIO, "'%s': disk full writing %s (%s); free space and "
                                  "run again to resume", file, inc, strerror(e));
                return hr_err(err, HR_EIO, "'%s': writing %s: %s", file, inc, strerror(e));
            }
            if (cc == CURLE_OK && r.status == 416) { /* have > what the server holds */
                if (ftruncate(fd, 0) != 0)
                    break;
                have = 0;
                fails++;
                continue;
            }
            if (cc == CURLE_OK && (r.status == 429 || r.status >= 500) && ++fails < TRIES) {
                struct timespec ts = {0, 200000000L * fails}; /* busy or down: wait, retry */
                nanosleep(&ts, NULL);
                continue;
            }
            if (cc == CURLE_OK && r.status != 200 && r.status != 206) {
                close(fd);
                h->fd = -1;
                return http_error(h, &r, "its commit", file, err);
            }
            fails = h->off > have ? 0 : fails + 1;
            have = h->off;
            if (have < size) {
                if (fails >= TRIES) {
                    close(fd);
                    h->fd = -1;
                    if (h->progress)
                        fputc('\n', h->progress);
                    return hr_err(err, HR_EIO, "'%s': download interrupted at %lld of %lld "
                                  "bytes (%s); run again to resume", file, (long long)have,
                                  (long long)size, curl_easy_strerror(cc));
                }
                struct timespec ts = {0, 100000000L * fails};
                nanosleep(&ts, NULL);
            }
        }
        show(h, true);
        h->fd = -1;
        if (from0 == 0)
            fresh = true;
        if (fsync(fd) != 0 || fstat(fd, &st) != 0) {
            rc = hr_err(err, HR_EIO, "%s: %s", inc, strerror(errno));
            close(fd);
            return rc;
        }
        close(fd);
        const char *kind = "";
        if ((int64_t)st.st_size != size) {
            unlink(inc);
            return hr_err(err, HR_EIO, "'%s': got %lld bytes, the hub said %lld; the download "
                          "was removed, run again", file, (long long)st.st_size,
                          (long long)size);
        }
        if ((rc = file_digest(inc, etag, size, hex, &kind, err)))
            return rc;
        if (!kind[0] || !strcmp(hex, etag))
            break;
        unlink(inc);
        if (fresh)
            return hr_err(err, HR_EFORMAT, "'%s': %s mismatch (the hub says %s, the bytes "
                          "are %s); the download was removed", file, kind, etag, hex);
        /* the resumed part may be what was wrong: once more from byte 0 */
    }
    if (rename(inc, blob) != 0)
        return hr_err(err, HR_EIO, "%s: rename: %s", blob, strerror(errno));
    return 0;
}

/* snapshots/<commit>/<file> -> ../../blobs/<etag> (one more ../ per folder
 * level of file), made under a temporary name and renamed over. */
static int place_pointer(const char *pointer, const char *file, const char *etag,
                         hr_error *err) {
    char target[HR_HF_PATH_MAX], tmp[HR_HF_PATH_MAX];
    size_t k = 0;
    for (const char *c = file; *c; c++)
        if (*c == '/')
            k += 3;
    if (k + 2 * 3 + 7 + strlen(etag) >= sizeof target)
        return hr_err(err, HR_ERANGE, "path too long");
    target[0] = 0;
    for (const char *c = file; *c; c++)
        if (*c == '/')
            strcat(target, "../");
    strcat(target, "../../blobs/");
    strcat(target, etag);
    int rc = pathf(tmp, sizeof tmp, err, "%s.tmp.%d", pointer, (int)getpid());
    if (rc)
        return rc;
    unlink(tmp);
    if (symlink(target, tmp) != 0)
        return hr_err(err, HR_EIO, "%s: symlink: %s", tmp, strerror(errno));
    if (rename(tmp, pointer) != 0) {
        rc = hr_err(err, HR_EIO, "%s: rename: %s", pointer, strerror(errno));
        unlink(tmp);
    }
    return rc;
}

static int fetch_file(hub *h, const char *commit, const char *file, hr_error *err) {
    char pointer[HR_HF_PATH_MAX], url[8192], qfile[4096], blob[HR_HF_PATH_MAX];
    char lock[HR_HF_PATH_MAX], dir[HR_HF_PATH_MAX], etag[161];
    int rc;
    struct stat st;
    if ((rc = pathf(pointer, sizeof pointer, err, "%s/snapshots/%s/%s", h->repo_dir, commit,
                    file)))
        return rc;
    if (stat(pointer, &st) == 0)
        return 0; /* cached (the link resolves) */
    if (url_quote(qfile, sizeof qfile, file, true) ||
        (rc = pathf(url, sizeof url, err, "%s/%s/resolve/%s/%s", h->endpoint, h->repo, commit,
                    qfile)))
        return hr_err(err, HR_ERANGE, "'%s': name too long", file);
    /* HEAD, following relative redirects (a renamed repo) */
    resp r;
    for (int hop = 0;; hop++) {
        CURLcode cc = perform(h, true, url, true, -1, &r);
        if (cc != CURLE_OK)
            return transport_error(cc, url, err);
        if (r.status < 300 || r.status >= 400 || r.location[0] != '/')
            break;
        char next[sizeof url];
        if (hop == 5 || join_origin(next, sizeof next, url, r.location))
            return hr_err(err, HR_EIO, "'%s': too many redirects", file);
        memcpy(url, next, sizeof url);
    }
    if (r.status >= 400 || r.status < 200)
        return http_error(h, &r, commit, file, err);
    bool redirect = r.status >= 300;
    if (redirect && !r.location[0])
        return hr_err(err, HR_EIO, "'%s': HTTP %ld without a Location", file, r.status);
    if (!r.commit[0])
        return hr_err(err, HR_EFORMAT, "'%s': no X-Repo-Commit header: %s is not a Hugging Face "
                      "hub (check HF_ENDPOINT)", file, h->endpoint);
    if ((rc = etag_norm(etag, sizeof etag, r.linked_etag[0] ? r.linked_etag : r.etag, err)))
        return hr_err_wrap(err, "'%s'", file);
    int64_t size = r.linked_size >= 0 ? r.linked_size : redirect ? -1 : r.content_length;
    if (size < 0)
        return hr_err(err, HR_EFORMAT, "'%s': the hub sent no size", file);
    /* a redirect to another host (a CDN's signed URL) gets no token */
    const char *get_url = redirect ? r.location : url;
    bool auth = !redirect || same_host(url, r.location);
    char get_buf[2048];
    snprintf(get_buf, sizeof get_buf, "%s", get_url);

    if ((rc = pathf(blob, sizeof blob, err, "%s/blobs/%s", h->repo_dir, etag)) ||
        (rc = pathf(lock, sizeof lock, err, "%s/%s.lock", h->locks, etag)) ||
        (rc = hr_hf_mkdirs(h->locks, err)))
        return rc;
    snprintf(dir, sizeof dir, "%s/blobs", h->repo_dir);
    if ((rc = hr_hf_mkdirs(dir, err)))
        return rc;
    snprintf(dir, sizeof dir, "%s", pointer);
    *strrchr(dir, '/') = 0;
    if ((rc = hr_hf_mkdirs(dir, err)))
        return rc;
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lfd < 0 || flock(lfd, LOCK_EX) != 0) {
        rc = hr_err(err, HR_EIO, "%s: %s", lock, strerror(errno));
        if (lfd >= 0)
            close(lfd);
        return rc;
    }
    if (stat(blob, &st) != 0) {
        rc = fetch_blob(h, get_buf, auth, file, etag, size, blob, err);
        if (!rc)
            h->res->n_fetched++;
    }
    if (!rc)
        rc = place_pointer(pointer, file, etag, err);
    close(lfd); /* releases the lock */
    return rc;
}

/* ---- the snapshot ----------------------------------------------------------------------- */

static int read_token(char *out, size_t n) {
    const char *t = getenv("HF_TOKEN");
    char path[HR_HF_PATH_MAX], *buf = NULL;
    out[0] = 0;
    if (t && *t) {
        snprintf(out, n, "%s", t);
    } else {
        const char *tp = getenv("HF_TOKEN_PATH"), *home = getenv("HF_HOME");
        const char *uh = getenv("HOME");
        if (tp && *tp)
            snprintf(path, sizeof path, "%s", tp);
        else if (home && *home)
            snprintf(path, sizeof path, "%s/token", home);
        else
            snprintf(path, sizeof path, "%s/.cache/huggingface/token", uh ? uh : "");
        size_t len = 0;
        if (hr_file_read(path, &buf, &len, NULL) == 0)
            snprintf(out, n, "%s", buf);
        free(buf);
    }
    size_t len = strlen(out);
    while (len && isspace((unsigned char)out[len - 1]))
        out[--len] = 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)out[i] < 0x21 || out[i] == 0x7f)
            return HR_EINVAL;
    return 0;
}

static int list_revision(hub *h, const char *rev, hr_hub_info *info, hr_error *err) {
    char qrev[1024], url[4096];
    resp r;
    if (url_quote(qrev, sizeof qrev, rev, false) ||
        pathf(url, sizeof url, err, "%s/api/models/%s/revision/%s", h->endpoint, h->repo, qrev))
        return hr_err(err, HR_ERANGE, "revision too long");
    h->fd = -1;
    CURLcode cc = perform(h, false, url, true, -1, &r);
    if (cc != CURLE_OK)
        return cc == CURLE_WRITE_ERROR ? hr_err(err, HR_EFORMAT, "%s: listing over 16 MiB", url)
                                       : transport_error(cc, url, err);
    if (r.status != 200)
        return http_error(h, &r, rev, NULL, err);
    int rc = hr_hub_info_parse(info, h->mem ? h->mem : "", h->len, err);
    return rc ? hr_err_wrap(err, "'%s'", h->repo) : 0;
}

static bool wanted(const hr_hub_opts *o, const char *file) {
    if (!o->n_include)
        return true;
    for (int i = 0; i < o->n_include; i++)
        if (hr_hub_glob_match(o->include[i], file))
            return true;
    return false;
}

static void tag_cache(const char *cache) {
    static const char tag[] = "Signature: 8a477f597d28d172789f06886806bc55\n"
                              "# This file is a cache directory tag (https://bford.info/cachedir/).\n";
    char p[HR_HF_PATH_MAX];
    if (!hr_path_join(p, sizeof p, cache, "CACHEDIR.TAG") && !hr_file_exists(p))
        hr_file_write_atomic(p, tag, sizeof tag - 1, NULL);
}

static int download(hub *h, const hr_hub_opts *o, const char *rev, hr_error *err) {
    hr_hub_info info = {0};
    char cache[HR_HF_PATH_MAX], ref[HR_HF_PATH_MAX], *cur = NULL;
    int rc;
    if (o->cache)
        snprintf(cache, sizeof cache, "%s", o->cache);
    else if ((rc = hr_hf_cache_dir(cache, sizeof cache, err)))
        return rc;
    if ((rc = hr_hf_repo_dir(h->repo_dir, sizeof h->repo_dir, cache, h->repo, err)) ||
        (rc = pathf(h->locks, sizeof h->locks, err, "%s/.locks/%s", cache,
                    strrchr(h->repo_dir, '/') + 1)) ||
        (rc = list_revision(h, rev, &info, err)))
        return rc;
    hr_hub_result *res = h->res;
    strcpy(res->commit, info.sha);
    if ((rc = pathf(res->snapshot, sizeof res->snapshot, err, "%s/snapshots/%s", h->repo_dir,
                    info.sha)))
        goto done;
    for (int i = 0; i < info.n_files; i++)
        res->n_files += wanted(o, info.files[i]);
    if (!res->n_files) {
        rc = o->n_include ? hr_err(err, HR_ENOTFOUND, "no file of '%s' at %s matches --include",
                                   h->repo, rev)
                          : hr_err(err, HR_ENOTFOUND, "'%s' has no files at %s", h->repo, rev);
        goto done;
    }
    if ((rc = hr_hf_mkdirs(res->snapshot, err)))
        goto done;
    tag_cache(cache);
    if (h->progress)
        fprintf(h->progress, "%s@%s: %d files\n", h->repo, info.sha, res->n_files);
    for (int i = 0; i < info.n_files && !rc; i++)
        if (wanted(o, info.files[i]))
            rc = fetch_file(h, info.sha, info.files[i], err);
    if (rc || !strcmp(rev, info.sha))
        goto done;
    /* every file is in place: the revision may now name the commit */
    if ((rc = pathf(ref, sizeof ref, err, "%s/refs/%s", h->repo_dir, rev)))
        goto done;
    size_t len = 0;
    if (hr_file_read(ref, &cur, &len, NULL) == 0 && !strcmp(cur, info.sha))
        goto done;
    char dir[HR_HF_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", ref);
    *strrchr(dir, '/') = 0;
    if (!(rc = hr_hf_mkdirs(dir, err)))
        rc = hr_file_write_atomic(ref, info.sha, 40, err);
done:
    free(cur);
    hr_hub_info_deinit(&info);
    return rc;
}

int hr_hub_download(const char *repo, const hr_hub_opts *o, hr_hub_result *res,
                    hr_error *err) {
    hr_hub_result dummy;
    res = res ? res : &dummy;
    memset(res, 0, sizeof *res);
    const char *rev = o->revision ? o->revision : "main";
    int rc;
    if ((rc = hr_hf_repo_check(repo, err)) || (rc = hr_hf_revision_check(rev, err)))
        return rc;
    const char *off = getenv("HF_HUB_OFFLINE");
    if (off && (!strcmp(off, "1") || !strcasecmp(off, "true") || !strcasecmp(off, "yes") ||
                !strcasecmp(off, "on")))
        return hr_err(err, HR_EINVAL, "HF_HUB_OFFLINE is set: no download");
    hub *h = calloc(1, sizeof *h);
    if (!h)
        return hr_err(err, HR_ENOMEM, "out of memory");
    h->repo = repo;
    h->res = res;
    h->fd = -1;
    h->progress = o->progress;
    const char *ep = o->endpoint ? o->endpoint : getenv("HF_ENDPOINT");
    snprintf(h->endpoint, sizeof h->endpoint, "%s", ep && *ep ? ep : "https://huggingface.co");
    for (size_t l = strlen(h->endpoint); l && h->endpoint[l - 1] == '/'; l--)
        h->endpoint[l - 1] = 0;
    char tok[4096];
    if (o->token)
        snprintf(tok, sizeof tok, "%s", o->token);
    else if (read_token(tok, sizeof tok)) {
        free(h);
        return hr_err(err, HR_EINVAL, "the token (HF_TOKEN) has a space or control character");
    }
    if (tok[0])
        snprintf(h->auth, sizeof h->auth, "Authorization: Bearer %s", tok);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(h->curl = curl_easy_init())) {
        free(h);
        return hr_err(err, HR_ENOMEM, "libcurl failed to start");
    }
    rc = download(h, o, rev, err);
    curl_easy_cleanup(h->curl);
    curl_global_cleanup();
    free(h->mem);
    free(h);
    return rc;
}
