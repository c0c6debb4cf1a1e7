#include "engine/ssd_int.h"
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/timer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* the KV pool's format, in the header (blocks of another format are a
 * miss): K's code, and V's code << 8 when it is V's own (--cache-type-v) */
static uint32_t dtype_code(hr_dtype t) {
    switch (t) {
    case HR_DTYPE_F16: return 2u;
    case HR_DTYPE_BF16: return 3u;
    case HR_DTYPE_AFFINE: return 4u;
    case HR_DTYPE_Q8_0: return 5u;
    case HR_DTYPE_Q4_0: return 6u;
    case HR_DTYPE_TURBO: /* bits: K's rate, group: V's (turbo.h); 7 was the
                          * records of the paper's norm, 8 the unbiased scale's */
        return 8u;
    default: return 1u;
    }
}
static uint32_t kv_format(const hr_kv *kv) {
    return dtype_code(kv->dtype) | (kv->vdtype != kv->dtype ? dtype_code(kv->vdtype) << 8 : 0u);
}
/* a format's name in the directory's: "" (f32), "-f16", "-q8_0", ... */
static const char *dtype_suffix(hr_dtype t) {
    switch (t) {
    case HR_DTYPE_F16: return "-f16";
    case HR_DTYPE_BF16: return "-bf16";
    case HR_DTYPE_Q8_0: return "-q8_0";
    case HR_DTYPE_Q4_0: return "-q4_0";
    default: return "";
    }
}

/* ---- header ----------------------------------------------------------------------- */

void hr__ssd_shape(const hr_ssd *s, uint32_t shape[7]) {
    uint32_t v[7] = {kv_format(s->kv), (uint32_t)s->kv->bits,
                     (uint32_t)(s->kv->dtype == HR_DTYPE_TURBO ? s->kv->vbits : s->kv->group),
                     (uint32_t)s->kv->n_layers, (uint32_t)s->kv->n_kv_heads,
                     (uint32_t)s->kv->head_dim, HR_KV_BLOCK};
    memcpy(shape, v, sizeof v);
}

static void make_header(const hr_ssd *s, uint64_t key, const int32_t *tokens, uint64_t sum,
                        uint64_t state, unsigned char *h) {
    uint32_t u32[] = {VERSION, HDR_BYTES}, shape[7];
    hr__ssd_shape(s, shape);
    uint64_t payload = s->payload;
    unsigned char *p = hr__ssd_put(h, MAGIC, 8);
    p = hr__ssd_put(p, u32, sizeof u32);
    p = hr__ssd_put(p, &s->fp, 8);
    p = hr__ssd_put(p, &s->salt, 8);
    p = hr__ssd_put(p, shape, sizeof shape);
    p = hr__ssd_put(p, &key, 8);
    p = hr__ssd_put(p, tokens, 4 * HR_KV_BLOCK);
    p = hr__ssd_put(p, &payload, 8);
    p = hr__ssd_put(p, &state, 8);
    p = hr__ssd_put(p, &sum, 8);
    uint64_t hsum = XXH64(h, (size_t)(p - h), 0);
    p = hr__ssd_put(p, &hsum, 8);
    memset(p, 0, HDR_BYTES - HDR_FIELDS);
}

const char *hr__ssd_header_fault(const hr_ssd *s, const unsigned char *h, size_t size,
                                 uint64_t key, const int32_t *tokens, uint64_t *sum,
                                 uint64_t *state_bytes, char *why, size_t n) {
    uint32_t version = 0;
    bool magic = size >= 12 && !memcmp(h, MAGIC, 8);
    if (magic)
        memcpy(&version, h + 8, 4);
    if (magic && version != VERSION) {
        snprintf(why, n, "is format version %u (this hearth reads %u)", version, VERSION);
        return why;
    }
    uint64_t sb = 0;
    if (size >= HDR_BYTES)
        memcpy(&sb, h + HDR_FIELDS - 24, 8);
    if ((sb != 0 && sb != s->state_bytes) || size != HDR_BYTES + s->payload + sb)
        return "has the wrong size (truncated?)";
    int32_t file_tokens[HR_KV_BLOCK];
    unsigned char want[HDR_BYTES];
    memcpy(file_tokens, h + TOKENS_AT, sizeof file_tokens);
    memcpy(sum, h + HDR_FIELDS - 16, 8);
    make_header(s, key, tokens ? tokens : file_tokens, *sum, sb, want);
    if (memcmp(h, want, HDR_BYTES) != 0)
        return "does not match this model, format or prompt";
    *state_bytes = sb;
    return NULL;
}

const char *hr__ssd_buf_fault(const hr_ssd *s, const unsigned char *buf, size_t size,
                              uint64_t key, const int32_t *tokens, uint64_t *state_bytes,
                              char *why, size_t n) {
    uint64_t sum;
    const char *fault = hr__ssd_header_fault(s, buf, size, key, tokens, &sum, state_bytes, why, n);
    if (!fault && XXH64(buf + HDR_BYTES, s->payload + *state_bytes, 0) != sum)
        fault = "fails its checksum";
    return fault;
}

void hr__ssd_path(const hr_ssd *s, uint64_t key, char *out, size_t n) {
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
            if (l < 4 || (strcmp(e->d_name + l - 3, ".kv") && strcmp(e->d_name + l - 3, ".lg")))
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

int hr__ssd_write_file(const char *path, const struct iovec *iov, int cnt) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    unlink(tmp); /* whatever a crash or someone else left under that name */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int e = 0;
    for (int i = 0; i < cnt && !e; i++)
        if (hr_write_all(fd, iov[i].iov_base, iov[i].iov_len))
            e = errno;
    if (!e && fdatasync(fd))
        e = errno;
    if (close(fd) != 0 && !e)
        e = errno;
    if (!e && rename(tmp, path) != 0)
        e = errno;
    if (e) {
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

/* Whether the tail file at path (size bytes) holds this model's rows of the
 * same tokens under the same key: the same rows (the forward is
 * batch-invariant), so not written again (a prompt regenerated, its own
 * tail queued by each request: hr_pcache_keep_prompt_tail). */
static bool same_tail(const hr_ssd *s, const char *path, size_t size, const job *j) {
    unsigned char h[HDR_BYTES];
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return false;
    bool got = pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h;
    close(fd);
    uint64_t sum, sb;
    char why[128];
    return got && !j->state &&
           !hr__ssd_header_fault(s, h, size, j->key, j->tokens, &sum, &sb, why, sizeof why);
}

/* 0, or -1 with errno saying why (hr__ssd_write_file: nothing
 * half-written stays). */
static int write_block(hr_ssd *s, const job *j) {
    char path[4200];
    hr__ssd_path(s, j->key, path, sizeof path);
    struct stat fst;
    size_t state = j->state ? s->state_bytes : 0;
    bool had = stat(path, &fst) == 0 && S_ISREG(fst.st_mode);
    if (had && j->tokens[HR_KV_BLOCK - 1] >= 0 && /* (a tail: same_tail) */
        (size_t)fst.st_size >= HDR_BYTES + s->payload + state &&
        (size_t)fst.st_size <= HDR_BYTES + s->payload + s->state_bytes)
        return 0; /* already on disk (same key, same content, with a state if this has
                   * one; verified on read) */
    if (had && j->tokens[HR_KV_BLOCK - 1] < 0 && same_tail(s, path, (size_t)fst.st_size, j))
        return 0;
    if (hr_kv_block_read(s->kv, j->block, s->stage, NULL)) {
        errno = EIO;
        return -1;
    }
    XXH64_state_t xs;
    XXH64_reset(&xs, 0);
    XXH64_update(&xs, s->stage, s->payload);
    if (state)
        XXH64_update(&xs, j->state, state);
    unsigned char h[HDR_BYTES];
    make_header(s, j->key, j->tokens, XXH64_digest(&xs), state, h);
    struct iovec iov[] = {{h, sizeof h}, {s->stage, s->payload}, {j->state, state}};
    if (hr__ssd_write_file(path, iov, state ? 3 : 2))
        return -1;
    hr__ssd_wrote(s, HDR_BYTES + s->payload + state, had ? (size_t)fst.st_size : 0, true);
    return 0;
}

void hr__ssd_wrote(hr_ssd *s, size_t bytes, size_t replaced, bool block) {
    if (atomic_load(&s->paused)) { /* before the count: who sees the write sees the resume */
        hr_log(HR_LOG_INFO, "SSD cache: writing to %s again", s->dir);
        atomic_store(&s->paused, false);
        s->backoff = s->backoff_min;
    }
    atomic_fetch_add(&s->used, bytes);
    atomic_fetch_sub(&s->used, replaced);
    if (block)
        atomic_fetch_add(&s->n_written, 1);
    atomic_fetch_add(&s->bytes_written, (long long)bytes);
    trim_to_budget(s);
}

/* Writer thread: a write failed with errno e; pause the tier. */
static void pause_writes(hr_ssd *s, int e) {
    if (!atomic_load(&s->paused))
        hr_log(HR_LOG_WARN, "SSD cache: cannot write to %s (%s); pausing the SSD tier for "
               "%.3g s", s->dir, strerror(e), s->backoff);
    atomic_store(&s->retry_at, hr_now() + s->backoff);
    atomic_store(&s->paused, true);
    atomic_store(&s->last_errno, e);
    atomic_fetch_add(&s->n_write_errors, 1); /* last: a reader that sees it sees the rest */
    s->backoff = s->backoff * 2 < s->backoff_max ? s->backoff * 2 : s->backoff_max;
}

static void *writer(void *arg) {
    hr_ssd *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->q_len == 0 && !s->upgrade)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->q_len == 0 && s->stop)
            break;
        if (s->q_len == 0) { /* idle: the next file of the version-3 walk */
            pthread_mutex_unlock(&s->mu);
            hr__ssd_upgrade_step(s);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        job j = s->q[s->q_head];
        pthread_mutex_unlock(&s->mu);
        /* jobs queued before a failure are dropped while paused (their
         * blocks stay right in RAM; only the copy on disk is lost) */
        if (!atomic_load(&s->paused) || hr_now() >= atomic_load(&s->retry_at)) {
            if ((j.logits ? hr__ssd_write_logits(s, &j) : write_block(s, &j)) != 0)
                pause_writes(s, errno);
        }
        pthread_mutex_lock(&s->mu);
        s->q_head = (s->q_head + 1) % QUEUE;
        s->q_len--;
        if (j.block >= 0) /* (a logits file holds no block) */
            s->done[s->n_done++] = j.block;
        free(j.state);
        free(j.ltokens);
        free(j.logits);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- engine side ----------------------------------------------------------------------- */

bool hr__ssd_paused(const hr_ssd *s) {
    return atomic_load(&s->paused) && hr_now() < atomic_load(&s->retry_at);
}

bool hr__ssd_push(hr_ssd *s, const job *j) {
    pthread_mutex_lock(&s->mu);
    bool ok = s->q_len + s->n_done < QUEUE;
    if (ok) {
        s->q[(s->q_head + s->q_len) % QUEUE] = *j;
        s->q_len++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

int hr_ssd_queue(hr_ssd *s, uint64_t key, const int32_t *tokens, int32_t block,
                 const void *state) {
    if (hr__ssd_paused(s))
        return -1;
    job j = {.key = key, .block = block};
    memcpy(j.tokens, tokens, sizeof j.tokens);
    if (state && s->state_bytes) {
        if (!(j.state = malloc(s->state_bytes)))
            return 0; /* no memory now: try again later */
        memcpy(j.state, state, s->state_bytes);
    }
    if (hr__ssd_push(s, &j))
        return 1;
    free(j.state);
    return 0;
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

void hr__ssd_quarantine(hr_ssd *s, const char *path, const char *why) {
    char dst[4400];
    const char *base = strrchr(path, '/');
    snprintf(dst, sizeof dst, "%s/%s", s->quarantine, base ? base + 1 : path);
    mkdir(s->quarantine, 0755);
    if (rename(path, dst) != 0)
        unlink(path);
    atomic_fetch_add(&s->n_quarantined, 1);
    hr_log(HR_LOG_WARN, "SSD cache: %s %s; moved to %s", path, why, s->quarantine);
}

ssize_t hr__ssd_preadv_all(int fd, struct iovec *iov, int cnt, off_t off) {
    size_t got = 0;
    while (cnt > 0) {
        ssize_t r = preadv(fd, iov, cnt > IOV_MAX ? IOV_MAX : cnt, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
        size_t left = (size_t)r;
        for (; cnt > 0 && left >= iov->iov_len; iov++, cnt--)
            left -= iov->iov_len;
        if (cnt > 0) { /* the vector read into last: the rest of it */
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return (ssize_t)got;
}

int hr__ssd_slices(const hr_kv *kv, int32_t block, int l0, int l1, struct iovec *iov) {
    size_t kb = hr_kv_stride_bytes(kv), vb = hr_kv_vstride_bytes(kv);
    int n = 0;
    for (int l = l0; l < l1; l++) {
        iov[n++] = (struct iovec){(char *)hr_kv_layer_k(kv, l) + (size_t)block * kb, kb};
        iov[n++] = (struct iovec){(char *)hr_kv_layer_v(kv, l) + (size_t)block * vb, vb};
    }
    return n;
}

void hr__ssd_feed(XXH64_state_t *xs, const hr_kv *kv, int32_t block, int l0, int l1) {
    size_t kb = hr_kv_stride_bytes(kv), vb = hr_kv_vstride_bytes(kv);
    for (int l = l0; l < l1; l++) {
        XXH64_update(xs, (char *)hr_kv_layer_k(kv, l) + (size_t)block * kb, kb);
        XXH64_update(xs, (char *)hr_kv_layer_v(kv, l) + (size_t)block * vb, vb);
    }
}

bool hr__ssd_direct(const hr_ssd *s, const hr_kv *kv) {
    return !kv->be->device_mem && s->state_bytes == 0 && 2 * kv->n_layers + 2 <= 1024;
}

void hr__ssd_read_failed(hr_ssd *s, const char *what, const char *path) {
    int e = errno;
    atomic_fetch_add(&s->n_read_errors, 1);
    atomic_store(&s->last_errno, e);
    hr_log(HR_LOG_WARN, "SSD cache: cannot %s %s (%s); a miss", what, path, strerror(e));
}

int hr__ssd_open_path(hr_ssd *s, const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT)
        hr__ssd_read_failed(s, "open", path);
    return fd;
}

int hr__ssd_open(hr_ssd *s, uint64_t key, char *path, size_t n) {
    hr__ssd_path(s, key, path, n);
    int fd = hr__ssd_open_path(s, path);
    if (fd >= 0 && hr__ssd_old(s, fd)) { /* not converted yet: a miss */
        close(fd);
        return -1;
    }
    return fd;
}

/* Read the file stored under key into `block`. tokens: the block's content,
 * checked against the file's; NULL: any content (a tail: its tokens go to
 * got_tokens, -1 padded). buf: HDR_BYTES + payload + state_bytes bytes of
 * the caller's (the calling thread's own), unused when direct_io. 1 hit, 0
 * miss (absent, unreadable, or quarantined). Any thread: every reader has
 * its own buf and block. */
static int load(hr_ssd *s, uint64_t key, const int32_t *tokens, int32_t *got_tokens, hr_kv *kv,
                int32_t block, unsigned char *buf, void *state, bool *has_state) {
    if (has_state)
        *has_state = false;
    char path[4200];
    int fd = hr__ssd_open(s, key, path, sizeof path);
    if (fd < 0)
        return 0;
    bool direct = hr__ssd_direct(s, kv);
    unsigned char hdr[HDR_BYTES], extra;
    struct iovec iov[1024];
    int cnt = 0;
    if (direct) {
        iov[cnt++] = (struct iovec){hdr, HDR_BYTES};
        cnt += hr__ssd_slices(kv, block, 0, kv->n_layers, iov + cnt);
    } else {
        iov[cnt++] = (struct iovec){buf, HDR_BYTES + s->payload + s->state_bytes};
    }
    iov[cnt++] = (struct iovec){&extra, 1}; /* a longer file is a wrong one */
    const unsigned char *h = direct ? hdr : buf;
    struct stat st;
    int hit = 0;
    ssize_t r;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        hr__ssd_quarantine(s, path, "is not a regular file");
        goto done;
    }
    if ((r = hr__ssd_preadv_all(fd, iov, cnt, 0)) < 0) {
        hr__ssd_read_failed(s, "read", path);
        goto done;
    }
    size_t got = (size_t)r;
    uint64_t sum = 0, sb = 0; /* sb: the state's bytes, as the file says */
    char why[96];
    const char *fault =
        direct ? hr__ssd_header_fault(s, h, got, key, tokens, &sum, &sb, why, sizeof why)
               : hr__ssd_buf_fault(s, buf, got, key, tokens, &sb, why, sizeof why);
    if (!fault && direct) { /* the checksum over the pool's slices */
        XXH64_state_t xs;
        XXH64_reset(&xs, 0);
        hr__ssd_feed(&xs, kv, block, 0, kv->n_layers);
        if (XXH64_digest(&xs) != sum)
            fault = "fails its checksum";
    }
    if (fault) {
        hr__ssd_quarantine(s, path, fault);
        goto done;
    }
    if (!direct && hr_kv_block_write(kv, block, buf + HDR_BYTES, NULL))
        goto done;
    if (sb && state) {
        memcpy(state, buf + HDR_BYTES + s->payload, sb);
        *has_state = true;
    }
    if (got_tokens)
        memcpy(got_tokens, h + TOKENS_AT, 4 * HR_KV_BLOCK);
    hit = 1;
    atomic_fetch_add(&s->n_hits, 1);
    atomic_fetch_add(&s->bytes_read, (long long)got);
done:
    close(fd);
    return hit;
}

/* The file is read, not mapped: a file truncated or failing underneath
 * is a short read or an error (a mapping would be SIGBUS). It is opened
 * non-blocking and must be a regular file (a FIFO under a cache file's
 * name would block the engine thread in open or read). */
int hr_ssd_read(hr_ssd *s, uint64_t key, const int32_t *tokens, hr_kv *kv, int32_t block,
                void *state, bool *has_state) {
    return load(s, key, tokens, NULL, kv, block, s->rbuf, state, has_state);
}

int hr_ssd_read_tail(hr_ssd *s, uint64_t key, hr_kv *kv, int32_t block, int32_t *tokens) {
    if (!load(s, key, NULL, tokens, kv, block, s->rbuf, NULL, NULL))
        return 0;
    int n = 0;
    while (n < HR_KV_BLOCK && tokens[n] >= 0)
        n++;
    for (int i = n; i < HR_KV_BLOCK; i++)
        if (tokens[i] != -1)
            n = 0; /* not a tail's padding: written by something else */
    return n < HR_KV_BLOCK ? n : 0;
}

int hr_ssd_read_run(hr_ssd *s, const uint64_t *keys, const int32_t *tokens, hr_kv *kv,
                    const int32_t *blocks, int n) {
    hr_ssd_run *r;
    int m = hr_ssd_run_start(s, keys, tokens, kv, blocks, n, false, &r);
    if (m >= 0)
        return r ? hr_ssd_run_finish(r) : 0;
    /* one by one, through the tier's buffer (Files asked for ahead: enough
     * to keep the disk's queue full) */
    enum { AHEAD = 32 };
    int i = 0;
    for (; i < n; i++) {
        if (i % AHEAD == 0)
            hr_ssd_prefetch(s, keys + i, n - i < AHEAD ? n - i : AHEAD);
        if (!load(s, keys[i], tokens + (size_t)i * HR_KV_BLOCK, NULL, kv, blocks[i], s->rbuf,
                  NULL, NULL))
            break;
    }
    return i;
}

void hr_ssd_prefetch(hr_ssd *s, const uint64_t *keys, int n) {
    char path[4200];
    for (int i = 0; i < n; i++) {
        hr__ssd_path(s, keys[i], path, sizeof path);
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            continue; /* absent: the read will say so */
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
            (void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
        close(fd);
    }
}

void hr_ssd_status(const hr_ssd *s, hr_ssd_state *st) {
    hr_ssd *m = (hr_ssd *)s;
    st->write_errors = atomic_load(&m->n_write_errors);
    st->read_errors = atomic_load(&m->n_read_errors);
    st->last_errno = atomic_load(&m->last_errno);
    st->paused = atomic_load(&m->paused);
    double left = atomic_load(&m->retry_at) - hr_now();
    st->retry_in = st->paused && left > 0 ? left : 0;
    st->direct_reads = atomic_load(&m->n_direct);
    st->converting = atomic_load(&m->old_files);
}

void hr_ssd_set_backoff(hr_ssd *s, double min_s, double max_s) {
    s->backoff = s->backoff_min = min_s;
    s->backoff_max = max_s;
}

void hr_ssd_counts(const hr_ssd *s, long *written, long *hits, long *quarantined) {
    hr_ssd *m = (hr_ssd *)s;
    *written = atomic_load(&m->n_written);
    *hits = atomic_load(&m->n_hits);
    *quarantined = atomic_load(&m->n_quarantined);
}

void hr_ssd_bytes(const hr_ssd *s, long long *written, long long *read) {
    hr_ssd *m = (hr_ssd *)s;
    *written = atomic_load(&m->bytes_written);
    *read = atomic_load(&m->bytes_read);
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
    return hr_ssd_open_tag(out, dir, model_fp, salt, kv, "", state_bytes, max_bytes, err);
}

int hr_ssd_open_tag(hr_ssd **out, const char *dir, uint64_t model_fp, uint64_t salt,
                    const hr_kv *kv, const char *tag, size_t state_bytes, size_t max_bytes,
                    hr_error *err) {
    *out = NULL;
    hr_ssd *s = calloc(1, sizeof *s);
    if (!s)
        return hr_err(err, HR_ENOMEM, "out of memory");
    /* a directory per model and KV format (f32 keeps the plain name), so a
     * cache of another format is left alone rather than quarantined */
    char fmt[96];
    if (kv->dtype == HR_DTYPE_AFFINE)
        snprintf(fmt, sizeof fmt, "-q%dg%d", kv->bits, kv->group);
    else if (kv->dtype == HR_DTYPE_TURBO) /* rates x 2: "-turbo7-5" for 3.5 / 2.5 bits */
        snprintf(fmt, sizeof fmt, "-turbo%d-%d", kv->bits, kv->vbits);
    else if (kv->vdtype != kv->dtype) /* e.g. "-q8_0-vf16", "-vq4_0" (K f32) */
        snprintf(fmt, sizeof fmt, "%s-v%s", dtype_suffix(kv->dtype),
                 kv->vdtype == HR_DTYPE_F32 ? "f32" : dtype_suffix(kv->vdtype) + 1);
    else
        snprintf(fmt, sizeof fmt, "%s", dtype_suffix(kv->dtype));
    size_t fl = strlen(fmt);
    snprintf(fmt + fl, sizeof fmt - fl, "%s", tag ? tag : "");
    snprintf(s->dir, sizeof s->dir, "%s/%016llx%s", dir, (unsigned long long)model_fp, fmt);
    snprintf(s->quarantine, sizeof s->quarantine, "%s/quarantine", dir);
    s->fp = model_fp;
    s->salt = salt;
    s->kv = kv;
    s->max_bytes = max_bytes;
    s->state_bytes = state_bytes;
    s->payload = hr_kv_pool_block_bytes(kv);
    hr_ssd_set_backoff(s, 1, 300);
    if (!(s->stage = malloc(s->payload)) || !(s->rbuf = malloc(HDR_BYTES + s->payload + state_bytes))) {
        free(s->stage);
        free(s);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    bool fresh = access(s->dir, F_OK) != 0;
    if (mkdirs(s->dir) != 0 || access(s->dir, W_OK) != 0) {
        int e = errno;
        free(s->stage);
        free(s->rbuf);
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
        else if (strstr(e->d_name, ".kv") || strstr(e->d_name, ".lg")) {
            struct stat st;
            if (stat(p, &st) == 0)
                atomic_fetch_add(&s->used, (size_t)st.st_size);
        }
    }
    if (d)
        closedir(d);
    hr__ssd_upgrade_start(s, fresh);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, writer, s) != 0) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        if (s->upgrade)
            closedir(s->upgrade);
        free(s->stage);
        free(s->rbuf);
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
    if (s->upgrade)
        closedir(s->upgrade);
    free(s->stage);
    free(s->rbuf);
    free(s);
}
