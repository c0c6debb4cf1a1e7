/* The SSD tier's insides, shared by ssd.c (the files, the writer thread,
 * one block's read) and ssd_run.c (a run of blocks read back at once). */
#ifndef HR_ENGINE_SSD_INT_H
#define HR_ENGINE_SSD_INT_H

#include "engine/ssd.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t in a caller's memory */
#include <xxhash.h>

#define MAGIC "HEARTHKV"
#define VERSION 4u /* 2: the KV format's bits and group (quantized KV); 3: a
                    * recurrent state after the block (hybrid models); 4:
                    * the header padded to HDR_BYTES (direct I/O) */

#define QUEUE 256

typedef struct job {
    uint64_t key;
    int32_t block;         /* -1: a logits file's job */
    int32_t tokens[HR_KV_BLOCK];
    void *state;           /* a copy of the state after the block (owned), or NULL */
    /* a logits file (ssd_logits.c): copies of the prompt and its logits (owned) */
    int32_t *ltokens;
    float *logits;
    int n_ltokens, n_vocab;
    uint64_t seed;
} job;

struct hr_ssd {
    char dir[4096], quarantine[4200];
    uint64_t fp, salt;
    const hr_kv *kv;
    size_t max_bytes, payload;
    size_t state_bytes;    /* a sequence's recurrent state, 0: the model has none */
    unsigned char *stage;  /* [payload]: the block being written (writer thread) */
    unsigned char *rbuf;   /* [HDR_BYTES + payload + state_bytes]: the file being read
                            * (engine thread) */
    _Atomic size_t used;
    _Atomic bool disabled;
    _Atomic long long bytes_written, bytes_read; /* whole files, header included */
    /* after a write error the tier pauses: writes are refused until
     * retry_at (monotonic seconds), then tried again; the pause doubles
     * with each failure in a row, from backoff_min to backoff_max */
    _Atomic double retry_at;
    double backoff, backoff_min, backoff_max; /* writer thread */
    _Atomic bool paused;
    _Atomic int last_errno; /* of the last write or read error; 0 none */
    _Atomic long n_written, n_hits, n_quarantined, n_write_errors, n_read_errors;
    _Atomic long n_direct;  /* files read with O_DIRECT (ssd_run.c) */
    _Atomic bool no_direct; /* the directory refused O_DIRECT (tmpfs): not tried again */
    /* files of format version 3 may be there (ssd_upgrade.c): the walk
     * converting them (writer thread) and how many it has */
    _Atomic bool old_files;
    DIR *upgrade;
    long n_upgraded;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job q[QUEUE];
    int q_head, q_len;
    int32_t done[QUEUE];
    int n_done;
    bool stop, joined;
};

/* The header's fields; then zeros up to HDR_BYTES, where the payload
 * starts, so that every layer's K and V lie at file offsets aligned as the
 * pool's slices are (DIO_ALIGN): read with O_DIRECT (ssd_run.c) */
#define HDR_FIELDS (8 + 4 + 4 + 8 + 8 + 4 * 7 + 8 + 4 * HR_KV_BLOCK + 8 + 8 + 8 + 8)
#define HDR_BYTES 4096
#define TOKENS_AT (8 + 4 + 4 + 8 + 8 + 4 * 7 + 8) /* the header's tokens[] */
/* Direct I/O's alignment of buffers, offsets and lengths: a page, which
 * covers the devices' logical blocks (512 or 4096 bytes) */
#define DIO_ALIGN 4096

/* A header's field: n bytes of v at p; past them. */
static inline unsigned char *hr__ssd_put(unsigned char *p, const void *v, size_t n) {
    memcpy(p, v, n); /* x86-64 and arm64 are little-endian */
    return p + n;
}
/* The KV format's fields of a header: the pool's dtype codes, bits,
 * group (TurboQuant: V's rate), layers, KV heads, head dim, block tokens. */
void hr__ssd_shape(const hr_ssd *s, uint32_t shape[7]);
/* Writer thread, after a file of `bytes` was renamed into place (replacing
 * one of `replaced` bytes, 0 none): the tier resumes if it was paused, the
 * counts (files: a block's only) and the budget (the oldest files removed
 * past it). */
void hr__ssd_wrote(hr_ssd *s, size_t bytes, size_t replaced, bool block);
/* path written as the bytes of iov[0..cnt): a temp file beside it, synced,
 * then renamed into place. 0, or -1 with errno saying why; nothing
 * half-written stays (a crash or a failed write leaves the old file or
 * none). */
int hr__ssd_write_file(const char *path, const struct iovec *iov, int cnt);
/* Writer thread: the logits file of job j (ssd_logits.c); 0, or -1 with
 * errno, nothing half-written left. */
int hr__ssd_write_logits(hr_ssd *s, const job *j);
/* Writes refused for now: paused after an error, the pause not over. */
bool hr__ssd_paused(const hr_ssd *s);
/* Engine thread: job j (its buffers now the writer's) to the queue; false
 * when the queue is full (j's buffers still the caller's). */
bool hr__ssd_push(hr_ssd *s, const job *j);
/* A read of path that failed with errno (what: "open", "read"): counted,
 * logged; a miss. */
void hr__ssd_read_failed(hr_ssd *s, const char *what, const char *path);
/* path opened for reading as a cache file is (never following a link nor
 * blocking on a FIFO): the descriptor, or -1 (a miss; logged and counted
 * unless the file is absent). */
int hr__ssd_open_path(hr_ssd *s, const char *path);
/* The file's name for key. */
void hr__ssd_path(const hr_ssd *s, uint64_t key, char *out, size_t n);
/* hr__ssd_open_path of the file of key (its name to path: n bytes). */
int hr__ssd_open(hr_ssd *s, uint64_t key, char *path, size_t n);
/* Version-3 files (ssd_upgrade.c). At open: fresh, a directory just made
 * (marked as holding none), else a walk starts if it is not marked. Writer
 * thread: one step of the walk (a file converted, or the walk ended).
 * hr__ssd_old: whether the file open at fd is one the walk has still to
 * convert (a reader's miss, not quarantined). */
void hr__ssd_upgrade_start(hr_ssd *s, bool fresh);
void hr__ssd_upgrade_step(hr_ssd *s);
bool hr__ssd_old(hr_ssd *s, int fd);

/* Moves the file at path to the quarantine directory, logging why. */
void hr__ssd_quarantine(hr_ssd *s, const char *path, const char *why);
/* Reads [off, ...) of fd into iov[0..cnt) (modified), retrying short
 * reads and EINTR, until the vectors are full or the file ends. The bytes
 * read, or -1 with errno. */
ssize_t hr__ssd_preadv_all(int fd, struct iovec *iov, int cnt, off_t off);
/* Layers [l0, l1) of block `block` of the pool, each its K then its V (the
 * file's payload order), as iov[]: their count (2 (l1 - l0)). */
int hr__ssd_slices(const hr_kv *kv, int32_t block, int l0, int l1, struct iovec *iov);
/* Those slices fed to a file's checksum, in that order. */
void hr__ssd_feed(XXH64_state_t *xs, const hr_kv *kv, int32_t block, int l0, int l1);
/* Whether a file's payload goes straight into the pool block's layer
 * slices (a pool in host memory, no recurrent state), or through a buffer. */
bool hr__ssd_direct(const hr_ssd *s, const hr_kv *kv);
/* Why the header h of a file of `size` bytes is not block `key` of tokens
 * (NULL: any tokens, the header's own) for this tier (why: room for n
 * bytes), or NULL when it is; *sum and *state_bytes: the payload's checksum
 * and the state's bytes it states. */
const char *hr__ssd_header_fault(const hr_ssd *s, const unsigned char *h, size_t size,
                                 uint64_t key, const int32_t *tokens, uint64_t *sum,
                                 uint64_t *state_bytes, char *why, size_t n);
/* Why the file of `size` bytes read whole into buf (header, payload, state)
 * is not block `key` of tokens: its header's fault, or its checksum over
 * the payload and state there; NULL when neither (*state_bytes: the
 * state's bytes it holds). */
const char *hr__ssd_buf_fault(const hr_ssd *s, const unsigned char *buf, size_t size,
                              uint64_t key, const int32_t *tokens, uint64_t *state_bytes,
                              char *why, size_t n);

#endif
