/* A run of blocks read back from the SSD tier (ssd.h, hr_ssd_run_*).
 *
 * A file is one block: its header, then per layer the block's K and V.
 * The forward needs layer l of every block of a prefix before its layer l
 * (and nothing of layer l + 1 until then), so a layered run is read in
 * items of (chunk of layers, file), every file's chunk 0 first, then every
 * file's chunk 1, ...: a chunk is about CHUNK_BYTES of consecutive layers,
 * one preadv straight into the pool's layer slices. A run read before
 * anything reads it takes whole files (one chunk: the fewest, largest
 * reads; measured faster here, docs/kv-quant.md). Reader threads take the
 * items in that order; each asks the kernel for the item AHEAD_BYTES
 * further on (posix_fadvise), so that the disk's queue stays full in the
 * same order. A file's checksum is fed its chunks in the payload's order
 * (an item waits for its file's earlier chunk to be fed, which was taken
 * a whole round of files before). The gate counts, per chunk, the files
 * whose chunk is in: layer l is readable when its chunk's count reaches
 * the run's files. Only hr_ssd_run_finish knows which files verified.
 * A pool the readers cannot read into (device memory) gets whole files
 * through each reader's buffer, verified there before the upload.
 *
 * A file none of whose pages the page cache holds (a restart's, a cold
 * one: mincore) is read with O_DIRECT, straight from the disk into the
 * pool's slices (the header pads the payload to DIO_ALIGN, ssd_int.h):
 * no copy out of the page cache and none of its bookkeeping (on 2 cores
 * those were most of an f16 restore's time over the disk's own:
 * docs/kv-quant.md); nothing asked ahead for it (the readers' own reads
 * keep the disk's queue full). A file the page cache holds is read
 * through it (memory speed). */
#include "engine/ssd_int.h"
#include "core/log.h"
#include "core/timer.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reader threads: the copies out of the page cache and the checksums
 * spread over the cores, and the disk serves several files at once. */
#define READERS 4
/* A chunk: a file's consecutive layers read at once (at least one). */
#define CHUNK_BYTES ((size_t)128 << 10)
/* Bytes asked of the disk ahead of the readers. */
#define AHEAD_BYTES ((size_t)32 << 20)

typedef struct rfile {
    int fd;
    _Atomic(const char *) fault; /* why it is not to be used (NULL: none yet) */
    _Atomic int fed;             /* chunks fed to xs, in order */
    bool dio;                    /* opened O_DIRECT */
    XXH64_state_t xs;
    unsigned char *hdr; /* [HDR_BYTES] of the run's hdrs, aligned for O_DIRECT */
    char why[96]; /* a header's fault worded for it (fault may point here) */
} rfile;

struct hr_ssd_run {
    hr_kv_gate gate; /* first: hr_ssd_run_gate's */
    hr_ssd *s;
    hr_kv *kv;
    int n, lpc, items, ahead; /* files, layers a chunk, n * chunks */
    bool direct;              /* into the pool's slices (hr__ssd_direct), else
                               * whole files through a reader's buffer */
    bool dio;                 /* direct, and the slices aligned for O_DIRECT */
    unsigned char *hdrs;      /* [n][HDR_BYTES], DIO_ALIGN-aligned */
    uint64_t *keys;
    int32_t *tokens, *blocks;
    rfile *f;
    _Atomic int next;  /* the next item: chunk next / n of file next % n */
    _Atomic int *done; /* [chunks] files whose chunk is in */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th[READERS];
    int started;
    double t0;
};

/* Layers [l0, l1) of chunk c, and where they lie in the file (chunk 0
 * from the header on). */
static void chunk_of(const hr_ssd_run *r, int c, int *l0, int *l1, off_t *off, size_t *len) {
    size_t lb = hr_kv_stride_bytes(r->kv) + hr_kv_vstride_bytes(r->kv);
    *l0 = c * r->lpc;
    *l1 = *l0 + r->lpc < r->kv->n_layers ? *l0 + r->lpc : r->kv->n_layers;
    *off = c ? (off_t)(HDR_BYTES + (size_t)*l0 * lb) : 0;
    *len = (size_t)(*l1 - *l0) * lb + (c ? 0 : HDR_BYTES);
}

static void ask_ahead(const hr_ssd_run *r, int i) {
    if (r->f[i % r->n].dio)
        return; /* (the page cache's read would be a second one) */
    int l0, l1;
    off_t off;
    size_t len;
    chunk_of(r, i / r->n, &l0, &l1, &off, &len);
    (void)posix_fadvise(r->f[i % r->n].fd, off, (off_t)len, POSIX_FADV_WILLNEED);
}

/* A read error's fault: a miss, the file left where it is (any other
 * fault quarantines it) */
static const char unreadable[] = "cannot be read";

static void set_fault(rfile *f, const char *why) {
    const char *none = NULL;
    atomic_compare_exchange_strong(&f->fault, &none, why);
}

/* The fault of a read of len bytes that gave got (-1: errno's error,
 * counted), or NULL */
static const char *read_fault(hr_ssd_run *r, ssize_t got, size_t len) {
    if (got < 0) {
        atomic_fetch_add(&r->s->n_read_errors, 1);
        atomic_store(&r->s->last_errno, errno);
        return unreadable;
    }
    return (size_t)got != len ? "has the wrong size (truncated?)" : NULL;
}

/* File f, whole, into buf (HDR_BYTES + payload), checked there (header and
 * checksum: hr__ssd_buf_fault), then written to block blk
 * (hr_kv_block_write: a device pool's upload) unless a fault was found. */
static void read_whole(hr_ssd_run *r, rfile *f, int32_t blk, unsigned char *buf) {
    size_t len = HDR_BYTES + r->s->payload;
    int fi = (int)(f - r->f);
    uint64_t sb;
    if (!buf)
        errno = ENOMEM;
    const char *fault =
        read_fault(r, buf ? hr__ssd_preadv_all(f->fd, &(struct iovec){buf, len}, 1, 0) : -1, len);
    if (!fault)
        fault = hr__ssd_buf_fault(r->s, buf, len, r->keys[fi], r->tokens + (size_t)fi * HR_KV_BLOCK,
                                  &sb, f->why, sizeof f->why);
    if (!fault && hr_kv_block_write(r->kv, blk, buf + HDR_BYTES, NULL))
        fault = unreadable; /* (a lost device: the next step reports it) */
    if (fault)
        set_fault(f, fault);
}

/* Item i: chunk c of file fi into the pool, fed to the file's checksum.
 * buf: the reader's room for a whole file where the run is not direct
 * (NULL: none could be had). */
static void read_item(hr_ssd_run *r, int i, unsigned char *buf) {
    int c = i / r->n, fi = i % r->n, l0, l1;
    rfile *f = &r->f[fi];
    int32_t blk = r->blocks[fi];
    off_t off;
    size_t len;
    chunk_of(r, c, &l0, &l1, &off, &len);
    if (!r->direct) { /* a whole file: checked in the buffer, then copied in */
        read_whole(r, f, blk, buf);
    } else if (!atomic_load(&f->fault)) {
        struct iovec iov[1024]; /* (hr__ssd_direct: 2 * n_layers + 2 at most) */
        int cnt = 0;
        if (c == 0)
            iov[cnt++] = (struct iovec){f->hdr, HDR_BYTES};
        cnt += hr__ssd_slices(r->kv, blk, l0, l1, iov + cnt);
        ssize_t got = hr__ssd_preadv_all(f->fd, iov, cnt, off);
        if (got < 0 && errno == EINVAL && f->dio) /* (the device's alignment is not ours) */
            atomic_store(&r->s->no_direct, true);
        const char *fault = read_fault(r, got, len);
        uint64_t sum, sb;
        if (!fault && c == 0)
            fault = hr__ssd_header_fault(r->s, f->hdr, HDR_BYTES + r->s->payload, r->keys[fi],
                                         r->tokens + (size_t)fi * HR_KV_BLOCK, &sum, &sb, f->why,
                                         sizeof f->why);
        if (fault)
            set_fault(f, fault);
    }
    /* the checksum, in the payload's order: chunk c - 1 of this file was
     * taken n items ago, and is all but always fed by now */
    while (atomic_load_explicit(&f->fed, memory_order_acquire) < c)
        sched_yield();
    if (r->direct && !atomic_load(&f->fault))
        hr__ssd_feed(&f->xs, r->kv, blk, l0, l1);
    atomic_store_explicit(&f->fed, c + 1, memory_order_release);
    if (atomic_fetch_add(&r->done[c], 1) + 1 == r->n) {
        pthread_mutex_lock(&r->mu);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
}

static void *reader(void *arg) {
    hr_ssd_run *r = arg;
    unsigned char *buf = r->direct ? NULL : malloc(HDR_BYTES + r->s->payload);
    for (int i; (i = atomic_fetch_add(&r->next, 1)) < r->items;) {
        if (i + r->ahead < r->items)
            ask_ahead(r, i + r->ahead);
        read_item(r, i, buf);
    }
    free(buf);
    return NULL;
}

static void gate_wait(hr_kv_gate *g, int layer) {
    hr_ssd_run *r = (hr_ssd_run *)g;
    int c = layer / r->lpc;
    if (atomic_load(&r->done[c]) >= r->n)
        return;
    pthread_mutex_lock(&r->mu);
    while (atomic_load(&r->done[c]) < r->n)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

hr_kv_gate *hr_ssd_run_gate(hr_ssd_run *r) { return &r->gate; }

static void run_free(hr_ssd_run *r) {
    for (int i = 0; i < r->n; i++)
        close(r->f[i].fd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->done);
    free(r->hdrs);
    free(r->f);
    free(r->keys);
    free(r->tokens);
    free(r->blocks);
    free(r);
}

/* Whether the page cache holds none of the file's size bytes (mincore of a
 * mapping of it; false when that cannot be told) */
static bool cold(int fd, size_t size) {
    void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return false;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), pages = (size + pg - 1) / pg;
    bool none = true;
    unsigned char vec[1024];
    for (size_t at = 0; none && at < pages; at += sizeof vec) {
        size_t k = pages - at < sizeof vec ? pages - at : sizeof vec;
        if (mincore((char *)m + at * pg, k * pg, vec) != 0) {
            none = false;
            break;
        }
        for (size_t j = 0; j < k; j++)
            none = none && !(vec[j] & 1);
    }
    munmap(m, size);
    return none;
}

/* fd switched to O_DIRECT; false (and not tried again in this tier) where
 * its file system refuses it (tmpfs) */
static bool direct_io(hr_ssd *s, int fd) {
    if (atomic_load(&s->no_direct))
        return false;
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0)
        return true;
    atomic_store(&s->no_direct, true);
    return false;
}

/* Whether block reads straight into kv's slices may bypass the page cache:
 * every slice and its offset in the file DIO_ALIGN-aligned */
static bool dio_aligned(const hr_kv *kv) {
    size_t kb = hr_kv_stride_bytes(kv), vb = hr_kv_vstride_bytes(kv);
    bool ok = kb % DIO_ALIGN == 0 && vb % DIO_ALIGN == 0;
    for (int l = 0; ok && l < kv->n_layers; l++)
        ok = (uintptr_t)hr_kv_layer_k(kv, l) % DIO_ALIGN == 0 &&
             (uintptr_t)hr_kv_layer_v(kv, l) % DIO_ALIGN == 0;
    return ok;
}

/* Opens the files of keys[0..n) while they are there and of the right
 * size (one that is not: quarantined, or a read error logged). How many. */
static int open_files(hr_ssd_run *r, int n) {
    hr_ssd *s = r->s;
    int i = 0;
    for (; i < n; i++) {
        char path[4200];
        int fd = hr__ssd_open(s, r->keys[i], path, sizeof path);
        if (fd < 0)
            break;
        struct stat st;
        const char *why = fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)
                              ? "is not a regular file"
                          : (size_t)st.st_size != HDR_BYTES + s->payload
                              ? "has the wrong size (truncated?)"
                              : NULL;
        if (why) {
            close(fd);
            hr__ssd_quarantine(s, path, why);
            break;
        }
        r->f[i].fd = fd;
        r->f[i].hdr = r->hdrs + (size_t)i * HDR_BYTES;
        r->f[i].dio = r->dio && cold(fd, (size_t)st.st_size) && direct_io(s, fd);
        XXH64_reset(&r->f[i].xs, 0);
    }
    return i;
}

int hr_ssd_run_start(hr_ssd *s, const uint64_t *keys, const int32_t *tokens, hr_kv *kv,
                     const int32_t *blocks, int n, bool layered, hr_ssd_run **out) {
    *out = NULL;
    bool direct = hr__ssd_direct(s, kv);
    if (n <= 0 || s->state_bytes || (layered && !direct))
        return n <= 0 ? 0 : -1;
    size_t lb = hr_kv_stride_bytes(kv) + hr_kv_vstride_bytes(kv);
    int lpc = kv->n_layers; /* whole files, or chunks of at least a layer */
    if (layered && CHUNK_BYTES / lb < (size_t)lpc)
        lpc = CHUNK_BYTES / lb > 1 ? (int)(CHUNK_BYTES / lb) : 1;
    int nchunk = (kv->n_layers + lpc - 1) / lpc;
    hr_ssd_run *r = calloc(1, sizeof *r);
    if (!r)
        return -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->keys = malloc((size_t)n * sizeof *r->keys);
    r->tokens = malloc((size_t)n * HR_KV_BLOCK * sizeof *r->tokens);
    r->blocks = malloc((size_t)n * sizeof *r->blocks);
    r->f = calloc((size_t)n, sizeof *r->f);
    r->done = calloc((size_t)nchunk, sizeof *r->done);
    r->hdrs = aligned_alloc(DIO_ALIGN, (size_t)n * HDR_BYTES);
    if (!r->keys || !r->tokens || !r->blocks || !r->f || !r->done || !r->hdrs) {
        run_free(r); /* (no file open yet) */
        return -1;
    }
    memcpy(r->keys, keys, (size_t)n * sizeof *keys);
    memcpy(r->tokens, tokens, (size_t)n * HR_KV_BLOCK * sizeof *tokens);
    memcpy(r->blocks, blocks, (size_t)n * sizeof *blocks);
    r->gate.wait = gate_wait;
    r->s = s;
    r->kv = kv;
    r->lpc = lpc;
    r->direct = direct;
    r->dio = direct && !atomic_load(&s->no_direct) && dio_aligned(kv);
    r->t0 = hr_now();
    r->n = open_files(r, n);
    if (r->n == 0) {
        run_free(r);
        return 0;
    }
    r->items = r->n * nchunk;
    size_t item_bytes = (size_t)lpc * lb;
    r->ahead = (int)(AHEAD_BYTES / item_bytes) + 1;
    for (int i = 0; i < r->ahead && i < r->items; i++)
        ask_ahead(r, i);
    while (r->started < READERS && r->started < r->items &&
           pthread_create(&r->th[r->started], NULL, reader, r) == 0)
        r->started++;
    if (r->started == 0) /* no thread: read it all now, the gate open after */
        reader(r);
    *out = r;
    return r->n;
}

int hr_ssd_run_finish(hr_ssd_run *r) {
    for (int i = 0; i < r->started; i++)
        pthread_join(r->th[i], NULL);
    hr_ssd *s = r->s;
    int good = 0;
    long long bytes = 0;
    int dio = 0;
    for (; good < r->n; good++) {
        rfile *f = &r->f[good];
        const char *fault = atomic_load(&f->fault);
        if (!fault && r->direct) { /* (a whole file's checksum: checked by its reader) */
            uint64_t sum;
            memcpy(&sum, f->hdr + HDR_FIELDS - 16, 8);
            if (XXH64_digest(&f->xs) != sum)
                fault = "fails its checksum";
        }
        if (fault) {
            char path[4200];
            hr__ssd_path(s, r->keys[good], path, sizeof path);
            if (fault == unreadable)
                hr_log(HR_LOG_WARN, "SSD cache: cannot read %s; a miss", path);
            else
                hr__ssd_quarantine(s, path, fault);
            break;
        }
        bytes += (long long)(HDR_BYTES + s->payload);
        dio += f->dio;
    }
    atomic_fetch_add(&s->n_hits, good);
    atomic_fetch_add(&s->n_direct, dio);
    atomic_fetch_add(&s->bytes_read, bytes);
    double ms = (hr_now() - r->t0) * 1e3;
    hr_log(HR_LOG_DEBUG,
           "SSD cache: %d of %d blocks read back in %.0f ms (%.0f MB/s, %d readers, %d "
           "layers a read, %d with O_DIRECT)",
           good, r->n, ms, (double)bytes / 1e3 / (ms > 0 ? ms : 1), r->started, r->lpc, dio);
    run_free(r);
    return good;
}
