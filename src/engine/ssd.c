#include "engine/ssd.h"
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define MAGIC "HEARTHKV"
#define VERSION 3u /* 2: the KV format's bits and group (quantized KV); 3: a
                    * recurrent state after the block (hybrid models) */
/* the KV pool's format, in the header (blocks of another format are a miss) */
static uint32_t kv_format(hr_dtype t) {
    return t == HR_DTYPE_F16 ? 2u : t == HR_DTYPE_BF16 ? 3u : t == HR_DTYPE_AFFINE ? 4u : 1u;
}
#define QUEUE 256

typedef struct job {
    uint64_t key;
    int32_t block;
    int32_t tokens[HR_KV_BLOCK];
    void *state;           /* a copy of the state after the block (owned), or NULL */
} job;

struct hr_ssd {
    char dir[4096], quarantine[4200];
    uint64_t fp, salt;
    const hr_kv *kv;
    size_t max_bytes, payload;
    size_t state_bytes;    /* a sequence's recurrent state, 0: the model has none */
    unsigned char *stage;  /* [payload]: the block being written (writer thread) */
    _Atomic size_t used;
    _Atomic bool disabled;
    _Atomic long n_written, n_hits, n_quarantined;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job q[QUEUE];
    int q_head, q_len;
    int32_t done[QUEUE];
    int n_done;
    bool stop, joined;
};

/* ---- header ----------------------------------------------------------------------- */

#define HDR_BYTES (8 + 4 + 4 + 8 + 8 + 4 * 7 + 8 + 4 * HR_KV_BLOCK + 8 + 8 + 8 + 8)

static unsigned char *put(unsigned char *p, const void *v, size_t n) {
    memcpy(p, v, n); /* x86-64 and arm64 are little-endian */
    return p + n;
}

static void make_header(const hr_ssd *s, uint64_t key, const int32_t *tokens, uint64_t sum,
                        uint64_t state, unsigned char *h) {
    uint32_t u32[] = {VERSION, HDR_BYTES};
    uint32_t shape[] = {kv_format(s->kv->dtype), (uint32_t)s->kv->bits,
                        (uint32_t)s->kv->group, (uint32_t)s->kv->n_layers,
                        (uint32_t)s->kv->n_kv_heads, (uint32_t)s->kv->head_dim, HR_KV_BLOCK};
    uint64_t payload = s->payload;
    unsigned char *p = put(h, MAGIC, 8);
    p = put(p, u32, sizeof u32);
    p = put(p, &s->fp, 8);
    p = put(p, &s->salt, 8);
    p = put(p, shape, sizeof shape);
    p = put(p, &key, 8);
    p = put(p, tokens, 4 * HR_KV_BLOCK);
    p = put(p, &payload, 8);
    p = put(p, &state, 8);
    p = put(p, &sum, 8);
    uint64_t hsum = XXH64(h, (size_t)(p - h), 0);
    put(p, &hsum, 8);
}

static void path_of(const hr_ssd *s, uint64_t key, char *out, size_t n) {
    snprintf(out, n, "%s/%016llx.kv", s->dir, (unsigned long long)key);
}

/* ---- writer thread ------------------------------------------------------------------ */

static void trim_to_budget(hr_ssd *s) {
    while (atomic_load(&s->used) > s->max_bytes) {
        DIR *d = opendir(s->dir);
        if (!d)
            return;
        char oldest[512] = "";
        time_t t = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (l < 4 || strcmp(e->d_name + l - 3, ".kv"))
                continue;
            char p[4600];
            struct stat st;
            snprintf(p, sizeof p, "%s/%s", s->dir, e->d_name);
            if (stat(p, &st) == 0 && (!oldest[0] || st.st_mtime < t)) {
                t = st.st_mtime;
                snprintf(oldest, sizeof oldest, "%s", e->d_name);
            }
        }
        closedir(d);
        if (!oldest[0])
            return;
        char p[4600];
        snprintf(p, sizeof p, "%s/%s", s->dir, oldest);
        struct stat st;
        if (stat(p, &st) == 0 && unlink(p) == 0)
            atomic_fetch_sub(&s->used, (size_t)st.st_size);
        else
            return;
    }
}

static int write_block(hr_ssd *s, const job *j) {
    char path[4200], tmp[4300];
    path_of(s, j->key, path, sizeof path);
    struct stat fst;
    size_t state = j->state ? s->state_bytes : 0;
    if (stat(path, &fst) == 0 && (size_t)fst.st_size >= HDR_BYTES + s->payload + state &&
        (size_t)fst.st_size <= HDR_BYTES + s->payload + s->state_bytes)
        return 0; /* already on disk (same key, same content, with a state if this has
                   * one; verified on read) */
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    if (hr_kv_block_read(s->kv, j->block, s->stage, NULL)) {
        close(fd);
        unlink(tmp);
        errno = EIO;
        return -1;
    }
    XXH64_state_t *xs = XXH64_createState();
    XXH64_reset(xs, 0);
    XXH64_update(xs, s->stage, s->payload);
    if (state)
        XXH64_update(xs, j->state, state);
    uint64_t sum = XXH64_digest(xs);
    XXH64_freeState(xs);
    unsigned char h[HDR_BYTES];
    make_header(s, j->key, j->tokens, sum, state, h);
    bool ok = write(fd, h, sizeof h) == (ssize_t)sizeof h &&
              write(fd, s->stage, s->payload) == (ssize_t)s->payload &&
              (!state || write(fd, j->state, state) == (ssize_t)state);
    ok = ok && fdatasync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    atomic_fetch_add(&s->used, HDR_BYTES + s->payload + state);
    atomic_fetch_add(&s->n_written, 1);
    trim_to_budget(s);
    return 0;
}

static void *writer(void *arg) {
    hr_ssd *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->q_len == 0)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->q_len == 0 && s->stop)
            break;
        job j = s->q[s->q_head];
        pthread_mutex_unlock(&s->mu);
        if (!atomic_load(&s->disabled) && write_block(s, &j) != 0) {
            hr_log(HR_LOG_WARN, "SSD cache: cannot write to %s (%s); running without the "
                   "SSD tier", s->dir, strerror(errno));
            atomic_store(&s->disabled, true);
        }
        free(j.state);
        pthread_mutex_lock(&s->mu);
        s->q_head = (s->q_head + 1) % QUEUE;
        s->q_len--;
        s->done[s->n_done++] = j.block;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- engine side ----------------------------------------------------------------------- */

int hr_ssd_queue(hr_ssd *s, uint64_t key, const int32_t *tokens, int32_t block,
                 const void *state) {
    if (atomic_load(&s->disabled))
        return -1;
    void *copy = NULL;
    if (state && s->state_bytes && (copy = malloc(s->state_bytes)))
        memcpy(copy, state, s->state_bytes);
    if (state && s->state_bytes && !copy)
        return 0; /* no memory now: try again later */
    pthread_mutex_lock(&s->mu);
    bool ok = s->q_len + s->n_done < QUEUE;
    if (ok) {
        job *j = &s->q[(s->q_head + s->q_len) % QUEUE];
        j->key = key;
        j->block = block;
        memcpy(j->tokens, tokens, sizeof j->tokens);
        j->state = copy;
        copy = NULL;
        s->q_len++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    free(copy);
    return ok ? 1 : 0;
}

int hr_ssd_done(hr_ssd *s, int32_t *blocks, int max) {
    pthread_mutex_lock(&s->mu);
    int n = s->n_done < max ? s->n_done : max;
    memcpy(blocks, s->done, (size_t)n * sizeof *blocks);
    memmove(s->done, s->done + n, (size_t)(s->n_done - n) * sizeof *s->done);
    s->n_done -= n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

static void quarantine(hr_ssd *s, const char *path, const char *why) {
    char dst[4400];
    const char *base = strrchr(path, '/');
    snprintf(dst, sizeof dst, "%s/%s", s->quarantine, base ? base + 1 : path);
    mkdir(s->quarantine, 0755);
    if (rename(path, dst) != 0)
        unlink(path);
    atomic_fetch_add(&s->n_quarantined, 1);
    hr_log(HR_LOG_WARN, "SSD cache: %s %s; moved to %s", path, why, s->quarantine);
}

int hr_ssd_read(hr_ssd *s, uint64_t key, const int32_t *tokens, hr_kv *kv, int32_t block,
                void *state, bool *has_state) {
    if (has_state)
        *has_state = false;
    char path[4200];
    path_of(s, key, path, sizeof path);
    hr_mmap m;
    if (hr_mmap_open(&m, path, NULL) != 0)
        return 0;
    int hit = 0;
    unsigned char want[HDR_BYTES];
    uint64_t sum = 0;
    uint32_t version = 0;
    if (m.size >= 12 && !memcmp(m.data, MAGIC, 8))
        memcpy(&version, (const unsigned char *)m.data + 8, 4);
    if (version != VERSION && m.size >= 12 && !memcmp(m.data, MAGIC, 8)) {
        char why[96];
        snprintf(why, sizeof why, "is format version %u (this hearth reads %u)", version,
                 VERSION);
        quarantine(s, path, why);
        goto done;
    }
    uint64_t st = 0; /* the state's bytes, as the file says */
    if (m.size >= HDR_BYTES)
        memcpy(&st, (const unsigned char *)m.data + HDR_BYTES - 24, 8);
    if ((st != 0 && st != s->state_bytes) || m.size != HDR_BYTES + s->payload + st) {
        quarantine(s, path, "has the wrong size (truncated?)");
        goto done;
    }
    memcpy(&sum, (const unsigned char *)m.data + HDR_BYTES - 16, 8);
    make_header(s, key, tokens, sum, st, want);
    if (memcmp(m.data, want, HDR_BYTES) != 0) {
        quarantine(s, path, "does not match this model, format or prompt");
        goto done;
    }
    const unsigned char *payload = (const unsigned char *)m.data + HDR_BYTES;
    if (XXH64(payload, s->payload + st, 0) != sum) {
        quarantine(s, path, "fails its checksum");
        goto done;
    }
    if (hr_kv_block_write(kv, block, payload, NULL))
        goto done;
    if (st && state) {
        memcpy(state, payload + s->payload, st);
        *has_state = true;
    }
    hit = 1;
    atomic_fetch_add(&s->n_hits, 1);
done:
    hr_mmap_close(&m);
    return hit;
}

void hr_ssd_counts(const hr_ssd *s, long *written, long *hits, long *quarantined) {
    hr_ssd *m = (hr_ssd *)s;
    *written = atomic_load(&m->n_written);
    *hits = atomic_load(&m->n_hits);
    *quarantined = atomic_load(&m->n_quarantined);
}

/* ---- lifecycle --------------------------------------------------------------------------- */

static int mkdirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        bool end = *p == 0;
        if (*p == '/' || end) {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            if (end)
                return 0;
            *p = '/';
        }
    }
}

int hr_ssd_open(hr_ssd **out, const char *dir, uint64_t model_fp, uint64_t salt,
                const hr_kv *kv, size_t state_bytes, size_t max_bytes, hr_error *err) {
    *out = NULL;
    hr_ssd *s = calloc(1, sizeof *s);
    if (!s)
        return hr_err(err, HR_ENOMEM, "out of memory");
    /* a directory per model and KV format (f32 keeps the plain name), so a
     * cache of another format is left alone rather than quarantined */
    char fmt[32];
    if (kv->dtype == HR_DTYPE_AFFINE)
        snprintf(fmt, sizeof fmt, "-q%dg%d", kv->bits, kv->group);
    else
        snprintf(fmt, sizeof fmt, "%s",
                 kv->dtype == HR_DTYPE_F32 ? "" : kv->dtype == HR_DTYPE_F16 ? "-f16" : "-bf16");
    snprintf(s->dir, sizeof s->dir, "%s/%016llx%s", dir, (unsigned long long)model_fp, fmt);
    snprintf(s->quarantine, sizeof s->quarantine, "%s/quarantine", dir);
    s->fp = model_fp;
    s->salt = salt;
    s->kv = kv;
    s->max_bytes = max_bytes;
    s->payload = (size_t)kv->n_layers * hr_kv_stride_bytes(kv) * 2;
    s->state_bytes = state_bytes;
    if (!(s->stage = malloc(s->payload))) {
        free(s);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    if (mkdirs(s->dir) != 0 || access(s->dir, W_OK) != 0) {
        int e = errno;
        free(s->stage);
        free(s);
        return hr_err(err, HR_EIO, "SSD cache %s: %s", dir, strerror(e));
    }
    /* account for what an earlier run left, and sweep its temp files */
    DIR *d = opendir(s->dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", s->dir, e->d_name);
        if (strstr(e->d_name, ".tmp."))
            unlink(p);
        else if (strstr(e->d_name, ".kv")) {
            struct stat st;
            if (stat(p, &st) == 0)
                atomic_fetch_add(&s->used, (size_t)st.st_size);
        }
    }
    if (d)
        closedir(d);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, writer, s) != 0) {
        free(s->stage);
        free(s);
        return hr_err(err, HR_ENOMEM, "cannot start the SSD writer thread");
    }
    *out = s;
    return 0;
}

void hr_ssd_stop(hr_ssd *s) {
    if (!s || s->joined)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->joined = true;
}

void hr_ssd_close(hr_ssd *s) {
    if (!s)
        return;
    hr_ssd_stop(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->stage);
    free(s);
}
