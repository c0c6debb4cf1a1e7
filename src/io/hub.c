/* hearth get: the hub's protocol (listing, HEAD, resumable GET) and the
 * checked, atomic placement in the cache; the exchanges are in hub_http.c. */
#include "io/hub.h"
#include "core/error.h"
#include "core/file.h"
#include "core/timer.h"
#include "io/hfcache.h"
#include "io/hub_http.h"

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

#define TRIES 5             /* consecutive failed tries of one file that received nothing */

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
static int fetch_blob(hr__hub *h, const char *url, bool auth, const char *file, const char *etag,
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
            hr__resp r;
            h->start = h->off = have;
            CURLcode cc = hr__hub_perform(h, false, url, auth, have, &r);
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
                return hr__hub_http_error(h, &r, "its commit", file, err);
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
        hr__hub_show(h, true);
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

static int fetch_file(hr__hub *h, const char *commit, const char *file, hr_error *err) {
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
    hr__resp r;
    for (int hop = 0;; hop++) {
        CURLcode cc = hr__hub_perform(h, true, url, true, -1, &r);
        if (cc != CURLE_OK)
            return hr__hub_transport_error(cc, url, err);
        if (r.status < 300 || r.status >= 400 || r.location[0] != '/')
            break;
        char next[sizeof url];
        if (hop == 5 || join_origin(next, sizeof next, url, r.location))
            return hr_err(err, HR_EIO, "'%s': too many redirects", file);
        memcpy(url, next, sizeof url);
    }
    if (r.status >= 400 || r.status < 200)
        return hr__hub_http_error(h, &r, commit, file, err);
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

static int list_revision(hr__hub *h, const char *rev, hr_hub_info *info, hr_error *err) {
    char qrev[1024], url[4096];
    hr__resp r;
    if (url_quote(qrev, sizeof qrev, rev, false) ||
        pathf(url, sizeof url, err, "%s/api/models/%s/revision/%s", h->endpoint, h->repo, qrev))
        return hr_err(err, HR_ERANGE, "revision too long");
    h->fd = -1;
    CURLcode cc = hr__hub_perform(h, false, url, true, -1, &r);
    if (cc != CURLE_OK)
        return cc == CURLE_WRITE_ERROR ? hr_err(err, HR_EFORMAT, "%s: listing over 16 MiB", url)
                                       : hr__hub_transport_error(cc, url, err);
    if (r.status != 200)
        return hr__hub_http_error(h, &r, rev, NULL, err);
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
                              "# A cache directory tag: https://bford.info/cachedir/\n";
    char p[HR_HF_PATH_MAX];
    if (!hr_path_join(p, sizeof p, cache, "CACHEDIR.TAG") && !hr_file_exists(p))
        hr_file_write_atomic(p, tag, sizeof tag - 1, NULL);
}

static int download(hr__hub *h, const hr_hub_opts *o, const char *rev, hr_error *err) {
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
    hr__hub *h = calloc(1, sizeof *h);
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
