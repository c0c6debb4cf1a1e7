#include "io/hfscan.h"
#include "core/error.h"
#include "io/hfcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small helpers --------------------------------------------------------------------- */

static int grow(void **p, int n, size_t elem) {
    if (n & (n - 1) && n) /* not a power of two: room left */
        return 0;
    void *q = realloc(*p, (size_t)(n ? 2 * n : 1) * elem);
    if (!q)
        return HR_ENOMEM;
    *p = q;
    return 0;
}

static char *join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 2);
    if (s) {
        memcpy(s, a, la);
        s[la] = '/';
        memcpy(s + la + 1, b, lb + 1);
    }
    return s;
}

static int push_str(char ***v, int *n, const char *s) {
    char *d = strdup(s);
    if (!d || grow((void **)v, *n, sizeof **v)) {
        free(d);
        return HR_ENOMEM;
    }
    (*v)[(*n)++] = d;
    return 0;
}

static int cmp_blob(const void *a, const void *b) {
    return strcmp(((const hr_hf_blob *)a)->name, ((const hr_hf_blob *)b)->name);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_rev(const void *a, const void *b) {
    double x = ((const hr_hf_rev *)a)->mtime, y = ((const hr_hf_rev *)b)->mtime;
    return x < y ? 1 : x > y ? -1 : strcmp(((const hr_hf_rev *)a)->commit,
                                           ((const hr_hf_rev *)b)->commit);
}

static double mtime_of(const struct stat *st) {
    return (double)st->st_mtim.tv_sec + 1e-9 * (double)st->st_mtim.tv_nsec;
}

/* ---- one repo ---------------------------------------------------------------------------- */

static int scan_blobs(hr_hf_repo *r) {
    char *dir = join(r->dir, "blobs");
    if (!dir)
        return HR_ENOMEM;
    DIR *d = opendir(dir);
    struct dirent *e;
    int rc = 0;
    while (d && !rc && (e = readdir(d))) {
        struct stat st;
        char *p = join(dir, e->d_name);
        if (!p) {
            rc = HR_ENOMEM;
            break;
        }
        bool reg = e->d_name[0] != '.' && lstat(p, &st) == 0 && S_ISREG(st.st_mode);
        free(p);
        if (!reg)
            continue;
        size_t len = strlen(e->d_name);
        bool part = len > 11 && !strcmp(e->d_name + len - 11, ".incomplete");
        hr_hf_blob **v = part ? &r->partial : &r->blobs;
        int *n = part ? &r->n_partial : &r->n_blobs;
        char *name = part ? strndup(e->d_name, len - 11) : strdup(e->d_name);
        if (!name || grow((void **)v, *n, sizeof **v)) {
            free(name);
            rc = HR_ENOMEM;
            break;
        }
        (*v)[(*n)++] = (hr_hf_blob){name, (uint64_t)st.st_size, mtime_of(&st)};
        if (!part)
            r->bytes += (uint64_t)st.st_size;
    }
    if (d)
        closedir(d);
    free(dir);
    if (r->n_blobs)
        qsort(r->blobs, (size_t)r->n_blobs, sizeof *r->blobs, cmp_blob);
    return rc;
}

typedef struct walk {
    hr_hf_repo *repo;
    hr_hf_rev *rev;
    char *mark; /* [n_blobs]: already counted for this revision */
} walk;

/* Every file under dir (a snapshot folder, recursively). */
static int walk_snapshot(walk *w, const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *p = join(dir, e->d_name);
        struct stat lst, st;
        if (!p) {
            rc = HR_ENOMEM;
            break;
        }
        if (lstat(p, &lst) != 0) {
            free(p);
            continue;
        }
        if (S_ISDIR(lst.st_mode)) {
            if (depth < 64)
                rc = walk_snapshot(w, p, depth + 1);
            free(p);
            continue;
        }
        hr_hf_rev *v = w->rev;
        v->n_files++;
        if (S_ISLNK(lst.st_mode)) {
            char t[4096];
            ssize_t tl = readlink(p, t, sizeof t - 1);
            const char *base = NULL;
            if (tl > 0) {
                t[tl] = 0;
                base = strrchr(t, '/') ? strrchr(t, '/') + 1 : t;
            }
            hr_hf_blob key = {.name = (char *)(base ? base : "")};
            hr_hf_blob *b = NULL;
            if (base && w->repo->n_blobs)
                b = bsearch(&key, w->repo->blobs, (size_t)w->repo->n_blobs, sizeof key, cmp_blob);
            if (stat(p, &st) != 0) {
                v->n_broken++;
            } else if (b) {
                int i = (int)(b - w->repo->blobs);
                if (!w->mark[i]) {
                    w->mark[i] = 1;
                    if (grow((void **)&v->blobs, v->n_blobs, sizeof *v->blobs)) {
                        free(p);
                        rc = HR_ENOMEM;
                        break;
                    }
                    v->blobs[v->n_blobs++] = i;
                    v->bytes += b->size;
                    if (b->mtime > v->mtime)
                        v->mtime = b->mtime;
                }
            } else {
                v->bytes += (uint64_t)st.st_size; /* a link out of blobs/ */
            }
        } else if (S_ISREG(lst.st_mode)) {
            v->bytes += (uint64_t)lst.st_size; /* a copy (huggingface_hub without symlinks) */
        }
        free(p);
    }
    closedir(d);
    return rc;
}

/* Every file under refs/ is a ref named by its path there. */
static int walk_refs(hr_hf_repo *r, const char *dir, const char *prefix, char ***names,
                     char ***commits, int *n, int depth) {
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".tmp"))
            continue; /* hidden, or a ref being written */
        char *p = join(dir, e->d_name), *name = NULL;
        struct stat st;
        if (!p)
            return closedir(d), HR_ENOMEM;
        if (prefix[0])
            name = join(prefix, e->d_name);
        else
            name = strdup(e->d_name);
        if (!name) {
            free(p);
            rc = HR_ENOMEM;
            break;
        }
        if (lstat(p, &st) != 0) {
            /* gone meanwhile */
        } else if (S_ISDIR(st.st_mode)) {
            if (depth < 16)
                rc = walk_refs(r, p, name, names, commits, n, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            char buf[128] = {0};
            FILE *f = fopen(p, "r");
            size_t got = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f)
                fclose(f);
            while (got && (buf[got - 1] == '\n' || buf[got - 1] == '\r' || buf[got - 1] == ' '))
                buf[--got] = 0;
            int k = *n;
            if (push_str(names, n, name) || (*n = k, push_str(commits, n, buf)))
                rc = HR_ENOMEM;
        }
        free(name);
        free(p);
    }
    closedir(d);
    return rc;
}

static int scan_repo(hr_hf_repo *r) {
    int rc = scan_blobs(r);
    char *snaps = join(r->dir, "snapshots"), *refs = join(r->dir, "refs");
    char **rn = NULL, **rcm = NULL, *mark = calloc((size_t)r->n_blobs + 1, 1);
    int n_refs = 0;
    DIR *d = NULL;
    if (rc || !snaps || !refs || !mark) {
        rc = HR_ENOMEM;
        goto done;
    }
    if ((rc = walk_refs(r, refs, "", &rn, &rcm, &n_refs, 0)))
        goto done;
    d = opendir(snaps);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        struct stat st;
        char *p = join(snaps, e->d_name);
        if (!p) {
            rc = HR_ENOMEM;
            goto done;
        }
        if (e->d_name[0] == '.' || lstat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            free(p);
            continue;
        }
        if (grow((void **)&r->revs, r->n_revs, sizeof *r->revs)) {
            free(p);
            rc = HR_ENOMEM;
            goto done;
        }
        hr_hf_rev *v = &r->revs[r->n_revs++];
        memset(v, 0, sizeof *v);
        v->dir = p;
        if (!(v->commit = strdup(e->d_name))) {
            rc = HR_ENOMEM;
            goto done;
        }
        memset(mark, 0, (size_t)r->n_blobs + 1);
        walk w = {r, v, mark};
        if ((rc = walk_snapshot(&w, p, 0)))
            goto done;
        if (!v->n_blobs)
            v->mtime = mtime_of(&st);
        for (int i = 0; i < n_refs; i++)
            if (rcm[i] && !strcmp(rcm[i], v->commit)) {
                if (push_str(&v->refs, &v->n_refs, rn[i])) {
                    rc = HR_ENOMEM;
                    goto done;
                }
                free(rcm[i]);
                rcm[i] = NULL;
            }
        if (v->n_refs > 1)
            qsort(v->refs, (size_t)v->n_refs, sizeof *v->refs, cmp_str);
    }
    for (int i = 0; i < n_refs; i++)
        if (rcm[i] && push_str(&r->dangling, &r->n_dangling, rn[i])) {
            rc = HR_ENOMEM;
            goto done;
        }
    if (r->n_revs > 1)
        qsort(r->revs, (size_t)r->n_revs, sizeof *r->revs, cmp_rev);
done:
    if (d)
        closedir(d);
    for (int i = 0; i < n_refs; i++)
        free(rn[i]), free(rcm[i]);
    free(rn);
    free(rcm);
    free(mark);
    free(snaps);
    free(refs);
    return rc;
}

/* "models--org--name" -> "org/name" (huggingface_hub: the rest after the
 * type, "--" read as "/"). */
static char *repo_id(const char *folder) {
    const char *s = folder + 8;
    char *id = malloc(strlen(s) + 1), *o = id;
    if (!id)
        return NULL;
    while (*s) {
        if (s[0] == '-' && s[1] == '-') {
            *o++ = '/';
            s += 2;
        } else {
            *o++ = *s++;
        }
    }
    *o = 0;
    return id;
}

static int cmp_repo(const void *a, const void *b) {
    return strcmp(((const hr_hf_repo *)a)->id, ((const hr_hf_repo *)b)->id);
}

int hr_hf_scan_open(hr_hf_scan **out, const char *dir, hr_error *err) {
    hr_hf_scan *s = calloc(1, sizeof *s);
    int rc = 0;
    *out = NULL;
    if (!s || !(s->dir = strdup(dir))) {
        free(s);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    DIR *d = opendir(dir);
    if (!d && errno != ENOENT) {
        rc = hr_err(err, HR_EIO, "%s: %s", dir, strerror(errno));
        hr_hf_scan_free(s);
        return rc;
    }
    struct dirent *e;
    while (d && (e = readdir(d))) {
        struct stat st;
        if (strncmp(e->d_name, "models--", 8) || !e->d_name[8])
            continue;
        char *p = join(dir, e->d_name);
        if (p && (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode))) {
            free(p);
            continue;
        }
        if (!p || grow((void **)&s->repos, s->n_repos, sizeof *s->repos)) {
            free(p);
            rc = HR_ENOMEM;
            break;
        }
        hr_hf_repo *r = &s->repos[s->n_repos++];
        memset(r, 0, sizeof *r);
        r->dir = p;
        if (!(r->id = repo_id(e->d_name)) || (rc = scan_repo(r)))
            break;
    }
    if (d)
        closedir(d);
    if (rc || (s->n_repos && !s->repos[s->n_repos - 1].id)) {
        hr_hf_scan_free(s);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    if (s->n_repos > 1)
        qsort(s->repos, (size_t)s->n_repos, sizeof *s->repos, cmp_repo);
    *out = s;
    return 0;
}

static void free_blobs(hr_hf_blob *b, int n) {
    for (int i = 0; i < n; i++)
        free(b[i].name);
    free(b);
}

void hr_hf_scan_free(hr_hf_scan *s) {
    if (!s)
        return;
    for (int i = 0; i < s->n_repos; i++) {
        hr_hf_repo *r = &s->repos[i];
        for (int k = 0; k < r->n_revs; k++) {
            hr_hf_rev *v = &r->revs[k];
            for (int j = 0; j < v->n_refs; j++)
                free(v->refs[j]);
            free(v->refs);
            free(v->blobs);
            free(v->commit);
            free(v->dir);
        }
        for (int k = 0; k < r->n_dangling; k++)
            free(r->dangling[k]);
        free(r->dangling);
        free(r->revs);
        free_blobs(r->blobs, r->n_blobs);
        free_blobs(r->partial, r->n_partial);
        free(r->id);
        free(r->dir);
    }
    free(s->repos);
    free(s->dir);
    free(s);
}

/* ---- gc ------------------------------------------------------------------------------------ */

/* True when no one holds <cache>/.locks/<repo folder>/<etag>.lock. */
static bool lock_free(const hr_hf_scan *s, const hr_hf_repo *r, const char *partial) {
    char p[HR_HF_PATH_MAX];
    const char *folder = strrchr(r->dir, '/') + 1;
    size_t el = strcspn(partial, ".");
    if (snprintf(p, sizeof p, "%s/.locks/%s/%.*s.lock", s->dir, folder, (int)el, partial) >=
        (int)sizeof p)
        return false;
    int fd = open(p, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT;
    bool got = flock(fd, LOCK_EX | LOCK_NB) == 0;
    close(fd);
    return got;
}

static int add(hr_hf_gc_item **v, int *n, hr_hf_gc_kind kind, const hr_hf_repo *r,
               const char *sub, const char *name, const char *suffix, uint64_t bytes) {
    if (grow((void **)v, *n, sizeof **v))
        return HR_ENOMEM;
    size_t len = strlen(r->dir) + strlen(sub) + strlen(name) + strlen(suffix) + 3;
    char *p = malloc(len);
    if (!p)
        return HR_ENOMEM;
    snprintf(p, len, "%s/%s/%s%s", r->dir, sub, name, suffix);
    (*v)[(*n)++] = (hr_hf_gc_item){kind, r, p, name, bytes};
    return 0;
}

/* .no_exist/<commit> of every revision gc does not keep (whether or not its
 * snapshot exists). */
static int plan_no_exist(const hr_hf_repo *r, hr_hf_gc_item **v, int *nv) {
    char *dir = join(r->dir, ".no_exist");
    if (!dir)
        return HR_ENOMEM;
    DIR *d = opendir(dir);
    free(dir);
    struct dirent *e;
    int rc = 0, named = 0;
    for (int k = 0; k < r->n_revs; k++)
        named += r->revs[k].n_refs > 0;
    while (d && !rc && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        bool kept = false;
        for (int k = 0; k < r->n_revs && !kept; k++)
            kept = !strcmp(r->revs[k].commit, e->d_name) &&
                   (r->revs[k].n_refs > 0 || (!named && k == 0));
        if (!kept && !(rc = add(v, nv, HR_HF_GC_NO_EXIST, r, ".no_exist", e->d_name, "", 0)))
            (*v)[*nv - 1].name = strrchr((*v)[*nv - 1].path, '/') + 1; /* d_name goes */
    }
    if (d)
        closedir(d);
    return rc;
}

int hr_hf_gc_plan(const hr_hf_scan *s, const char *repo, hr_hf_gc_item **items, int *n,
                  hr_error *err) {
    hr_hf_gc_item *v = NULL;
    int nv = 0, rc = 0;
    for (int pass = 0; pass < 5 && !rc; pass++) {
        for (int i = 0; i < s->n_repos && !rc; i++) {
            const hr_hf_repo *r = &s->repos[i];
            if (repo && strcmp(repo, r->id))
                continue;
            int named = 0;
            for (int k = 0; k < r->n_revs; k++)
                named += r->revs[k].n_refs > 0;
            /* kept: every named revision; with none named, the newest */
            #define KEPT(k) (r->revs[k].n_refs > 0 || (!named && (k) == 0))
            if (pass == 0) {
                for (int k = 0; k < r->n_revs && !rc; k++)
                    if (!KEPT(k))
                        rc = add(&v, &nv, HR_HF_GC_SNAPSHOT, r, "snapshots", r->revs[k].commit,
                                 "", 0);
            } else if (pass == 1) {
                rc = plan_no_exist(r, &v, &nv);
            } else if (pass == 2) {
                for (int k = 0; k < r->n_dangling && !rc; k++)
                    rc = add(&v, &nv, HR_HF_GC_REF, r, "refs", r->dangling[k], "", 0);
            } else if (pass == 3) {
                char *used = calloc((size_t)r->n_blobs + 1, 1);
                if (!used) {
                    rc = HR_ENOMEM;
                    break;
                }
                for (int k = 0; k < r->n_revs; k++)
                    if (KEPT(k))
                        for (int j = 0; j < r->revs[k].n_blobs; j++)
                            used[r->revs[k].blobs[j]] = 1;
                for (int k = 0; k < r->n_blobs && !rc; k++)
                    if (!used[k])
                        rc = add(&v, &nv, HR_HF_GC_BLOB, r, "blobs", r->blobs[k].name, "",
                                 r->blobs[k].size);
                free(used);
            } else {
                for (int k = 0; k < r->n_partial && !rc; k++)
                    if (lock_free(s, r, r->partial[k].name))
                        rc = add(&v, &nv, HR_HF_GC_PARTIAL, r, "blobs", r->partial[k].name,
                                 ".incomplete", r->partial[k].size);
            }
            #undef KEPT
        }
    }
    if (rc) {
        hr_hf_gc_free(v, nv);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    *items = v;
    *n = nv;
    return 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(p) == 0 || errno == ENOENT ? 0 : -1;
}

int hr_hf_gc_apply(const hr_hf_gc_item *items, int n, hr_error *err) {
    for (int i = 0; i < n; i++) {
        const hr_hf_gc_item *it = &items[i];
        int ok = it->kind == HR_HF_GC_SNAPSHOT || it->kind == HR_HF_GC_NO_EXIST
                     ? nftw(it->path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0
                     : unlink(it->path) == 0 || errno == ENOENT;
        if (!ok)
            return hr_err(err, HR_EIO, "%s: %s", it->path, strerror(errno));
    }
    return 0;
}

void hr_hf_gc_free(hr_hf_gc_item *items, int n) {
    for (int i = 0; i < n; i++)
        free(items[i].path);
    free(items);
}
