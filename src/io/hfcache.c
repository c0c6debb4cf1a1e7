#include "io/hfcache.h"
#include "core/error.h"
#include "core/file.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- paths ------------------------------------------------------------------------------ */

static int fmt(char *out, size_t n, hr_error *err, const char *f, ...)
    __attribute__((format(printf, 4, 5)));
static int fmt(char *out, size_t n, hr_error *err, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int w = vsnprintf(out, n, f, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n)
        return hr_err(err, HR_ERANGE, "path too long");
    return 0;
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* v with a leading "~/" (or a lone "~") replaced by $HOME. */
static int expand_home(char *out, size_t n, const char *v, const char *tail, hr_error *err) {
    const char *home = env("HOME");
    if (v[0] == '~' && (v[1] == '/' || !v[1]) && home)
        return fmt(out, n, err, "%s%s%s", home, v + 1, tail);
    return fmt(out, n, err, "%s%s", v, tail);
}

int hr_hf_cache_dir(char *out, size_t n, hr_error *err) {
    const char *v;
    if ((v = env("HF_HUB_CACHE")) || (v = env("HUGGINGFACE_HUB_CACHE")))
        return expand_home(out, n, v, "", err);
    if ((v = env("HF_HOME")))
        return expand_home(out, n, v, "/hub", err);
    if ((v = env("XDG_CACHE_HOME")))
        return expand_home(out, n, v, "/huggingface/hub", err);
    return expand_home(out, n, "~", "/.cache/huggingface/hub", err);
}

int hr_hf_mkdirs(const char *dir, hr_error *err) {
    char p[HR_HF_PATH_MAX];
    if (fmt(p, sizeof p, err, "%s", dir))
        return HR_ERANGE;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s)
            continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST)
            return hr_err(err, HR_EIO, "%s: %s", p, strerror(errno));
        if (!c)
            break;
        *s = c;
    }
    if (!hr_dir_exists(dir))
        return hr_err(err, HR_EIO, "%s: not a directory", dir);
    return 0;
}

/* ---- names -------------------------------------------------------------------------------- */

static bool word_char(char c) {
    return isalnum((unsigned char)c) || c == '_';
}

static int part_check(const char *s, size_t len, const char *repo, hr_error *err) {
    if (!len || !word_char(s[0]) || !word_char(s[len - 1]))
        return hr_err(err, HR_EINVAL, "'%s': not a repo id (ORG/NAME, each starting and ending "
                      "with a letter or digit)", repo);
    for (size_t i = 0; i < len; i++)
        if (!word_char(s[i]) && s[i] != '-' && s[i] != '.')
            return hr_err(err, HR_EINVAL, "'%s': not a repo id (letters, digits, '-', '_', '.')",
                          repo);
    return 0;
}

int hr_hf_repo_check(const char *repo, hr_error *err) {
    const char *slash = strchr(repo, '/');
    size_t len = strlen(repo);
    if (!slash || strchr(slash + 1, '/'))
        return hr_err(err, HR_EINVAL, "'%s': not a repo id (ORG/NAME)", repo);
    if (len > 96)
        return hr_err(err, HR_EINVAL, "'%s': a repo id is at most 96 characters", repo);
    if (strstr(repo, "--") || strstr(repo, ".."))
        return hr_err(err, HR_EINVAL, "'%s': a repo id has no '--' or '..'", repo);
    int rc = part_check(repo, (size_t)(slash - repo), repo, err);
    return rc ? rc : part_check(slash + 1, strlen(slash + 1), repo, err);
}

int hr_hf_revision_check(const char *rev, hr_error *err) {
    size_t len = strlen(rev);
    if (!len || len > 200)
        return hr_err(err, HR_EINVAL, "revision '%s': 1 to 200 characters", rev);
    bool start = true;
    for (const char *c = rev; *c; c++) {
        if (*c == '/') {
            if (start || !c[1])
                return hr_err(err, HR_EINVAL, "revision '%s': empty path component", rev);
            start = true;
            continue;
        }
        if (start && *c == '.')
            return hr_err(err, HR_EINVAL, "revision '%s': a component starts with '.'", rev);
        if (!isalnum((unsigned char)*c) && !strchr("_.+=-", *c))
            return hr_err(err, HR_EINVAL, "revision '%s': character '%c' not allowed", rev,
                          isprint((unsigned char)*c) ? *c : '?');
        start = false;
    }
    return 0;
}

bool hr_hf_is_commit(const char *rev) {
    size_t i = 0;
    for (; rev[i]; i++)
        if (!isdigit((unsigned char)rev[i]) && !(rev[i] >= 'a' && rev[i] <= 'f'))
            return false;
    return i == 40;
}

int hr_hf_ref_parse(hr_hf_ref *ref, const char *s, hr_error *err) {
    memset(ref, 0, sizeof *ref);
    const char *at = strchr(s, '@');
    size_t rl = at ? (size_t)(at - s) : strlen(s);
    if (rl >= sizeof ref->repo)
        return hr_err(err, HR_EINVAL, "'%s': not a repo id (too long)", s);
    memcpy(ref->repo, s, rl);
    int rc = hr_hf_repo_check(ref->repo, err);
    if (rc)
        return rc;
    const char *rev = at ? at + 1 : "main";
    if (strlen(rev) >= sizeof ref->revision)
        return hr_err(err, HR_EINVAL, "revision '%s' too long", rev);
    strcpy(ref->revision, rev);
    return hr_hf_revision_check(ref->revision, err);
}

int hr_hf_repo_dir(char *out, size_t n, const char *cache, const char *repo, hr_error *err) {
    int rc = hr_hf_repo_check(repo, err);
    if (rc)
        return rc;
    const char *slash = strchr(repo, '/');
    return fmt(out, n, err, "%s/models--%.*s--%s", cache, (int)(slash - repo), repo, slash + 1);
}

/* ---- resolution --------------------------------------------------------------------------- */

int hr_hf_snapshot(char *out, size_t n, char *commit, const char *cache, const hr_hf_ref *ref,
                   hr_error *err) {
    char repo[HR_HF_PATH_MAX], path[HR_HF_PATH_MAX], hash[41];
    int rc = hr_hf_repo_dir(repo, sizeof repo, cache, ref->repo, err);
    if (rc)
        return rc;
    if (!hr_dir_exists(repo))
        return hr_err(err, HR_ENOTFOUND, "'%s' is not in the Hugging Face cache (%s); "
                      "`hearth get %s` downloads it", ref->repo, cache, ref->repo);
    if (hr_hf_is_commit(ref->revision)) {
        strcpy(hash, ref->revision);
    } else {
        char *buf = NULL;
        size_t len = 0;
        if ((rc = fmt(path, sizeof path, err, "%s/refs/%s", repo, ref->revision)))
            return rc;
        if (hr_file_read(path, &buf, &len, NULL))
            return hr_err(err, HR_ENOTFOUND, "'%s' has no revision '%s' in the Hugging Face "
                          "cache (no %s)", ref->repo, ref->revision, path);
        while (len && isspace((unsigned char)buf[len - 1]))
            buf[--len] = 0;
        bool ok = hr_hf_is_commit(buf);
        if (ok)
            strcpy(hash, buf);
        free(buf);
        if (!ok)
            return hr_err(err, HR_EFORMAT, "%s: not a commit hash", path);
    }
    if ((rc = fmt(out, n, err, "%s/snapshots/%s", repo, hash)))
        return rc;
    if (!hr_dir_exists(out))
        return hr_err(err, HR_ENOTFOUND, "'%s@%s': snapshot %s is missing from the cache",
                      ref->repo, ref->revision, hash);
    if (commit)
        strcpy(commit, hash);
    return 0;
}

/* The one *.gguf file directly in dir when dir has no config.json; else 0. */
static int lone_gguf(char *out, size_t n, const char *dir) {
    char p[HR_HF_PATH_MAX];
    if (hr_path_join(p, sizeof p, dir, "config.json") || hr_file_exists(p))
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".gguf") && found++ == 0 &&
            hr_path_join(out, n, dir, e->d_name))
            found = 2; /* too long: treat as ambiguous */
    }
    closedir(d);
    return found == 1;
}

static bool path_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

int hr_hf_model_path(char *out, size_t n, const char *arg, hr_error *err) {
    hr_hf_ref ref;
    if (path_exists(arg) || arg[0] == '/' || arg[0] == '.' ||
        hr_hf_ref_parse(&ref, arg, NULL) != 0)
        return fmt(out, n, err, "%s", arg);
    char cache[HR_HF_PATH_MAX], snap[HR_HF_PATH_MAX];
    int rc;
    if ((rc = hr_hf_cache_dir(cache, sizeof cache, err)) ||
        (rc = hr_hf_snapshot(snap, sizeof snap, NULL, cache, &ref, err))) {
        if (rc == HR_ENOTFOUND)
            hr_err_wrap(err, "no model '%s' (not a path)", arg);
        return rc;
    }
    if (lone_gguf(out, n, snap))
        return 0;
    return fmt(out, n, err, "%s", snap);
}

int hr_hf_repo_of_path(char *out, size_t n, const char *path) {
    const char *p = path, *hit = NULL;
    while ((p = strstr(p, "models--"))) {
        if (p == path || p[-1] == '/')
            hit = p;
        p++;
    }
    if (!hit)
        return HR_ENOTFOUND;
    const char *name = hit + 8, *sep = strstr(name, "--"), *end = strchr(name, '/');
    if (!sep || !end || sep > end || strncmp(end, "/snapshots/", 11) || !end[11])
        return HR_ENOTFOUND;
    int w = snprintf(out, n, "%.*s/%.*s", (int)(sep - name), name, (int)(end - sep - 2), sep + 2);
    if (w < 0 || (size_t)w >= n || hr_hf_repo_check(out, NULL))
        return HR_ENOTFOUND;
    return 0;
}
