/* The SSD tier of the prompt cache: one file per KV block under
 * DIR/<model fingerprint>/, written in the background (never on the token
 * loop) and read back on a RAM miss.
 *
 * File (little-endian): "HEARTHKV", u32 version, u32 header bytes, u64 model
 * fingerprint, u64 salt (tokenizer hash), u32 KV format, u32 layers, u32 kv
 * heads, u32 head dim, u32 block tokens, u64 key, i32 tokens[block], u64
 * payload bytes, u64 state bytes (0, or a hybrid model's recurrent state
 * after the block), u64 xxh64(payload, state), u64 xxh64(header so far);
 * then the payload: per layer, the block's K then V; then the state. Writes go to a temp file that is
 * renamed into place, so a crash or a failed write (full disk, I/O error,
 * read-only directory) leaves nothing half-written. Files are read with
 * read(2), never mapped, and only regular ones. A write error pauses the
 * tier (writes refused, hr_ssd_queue -1) for 1 s, doubling per failure in
 * a row up to 300 s; the next write after the pause tries again. A file
 * that is corrupt, truncated or made for another model or format is moved to
 * DIR/quarantine/ and treated as a miss. The directory is always safe to
 * delete. */
#ifndef HR_ENGINE_SSD_H
#define HR_ENGINE_SSD_H

#include "hearth.h"
#include "model/kv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hr_ssd hr_ssd;

/* Creates DIR/<fingerprint>/ and starts the writer thread. A directory that
 * cannot be used is an error (the caller runs without the tier). */
int hr_ssd_open(hr_ssd **out, const char *dir, uint64_t model_fp, uint64_t salt,
                const hr_kv *kv, size_t state_bytes, size_t max_bytes, hr_error *err);
/* hr_ssd_open with `tag` appended to the directory's name
 * (DIR/<fingerprint><format><tag>/): blocks of one format made in another
 * way (converted sequences' quantized blocks: "-start<N>-<format>" names
 * where they converted and from what) keep a directory of their own. */
int hr_ssd_open_tag(hr_ssd **out, const char *dir, uint64_t model_fp, uint64_t salt,
                    const hr_kv *kv, const char *tag, size_t state_bytes, size_t max_bytes,
                    hr_error *err);
/* Finishes queued writes and stops the thread; hr_ssd_done still reports
 * the finished blocks. */
void hr_ssd_stop(hr_ssd *s);
/* Stops (if not yet) and frees. */
void hr_ssd_close(hr_ssd *s);

/* Engine thread: queue block `block` (whose content must not change while
 * queued: hold a reference) to be written under `key`, with the recurrent
 * state after it (state_bytes of hr_ssd_open, copied now) or NULL. tokens:
 * HR_KV_BLOCK of them; a not-full block (a tail) pads them with -1, and its
 * file is rewritten each time (the newest tail under a key wins). 1
 * queued; 0 the queue is full (try again later); -1 the tier is paused
 * after a disk error (try again later too). A file already there is
 * rewritten only to add a state. */
int hr_ssd_queue(hr_ssd *s, uint64_t key, const int32_t *tokens, int32_t block,
                 const void *state);
/* Engine thread: blocks whose writes finished (release their references). */
int hr_ssd_done(hr_ssd *s, int32_t *blocks, int max);
/* Engine thread: read the block stored under key into `block`, and its
 * state into `state` (state_bytes; may be NULL) setting *has_state when the
 * file has one. 1 on a hit; 0 on a miss (absent, or quarantined because it
 * did not verify). */
int hr_ssd_read(hr_ssd *s, uint64_t key, const int32_t *tokens, hr_kv *kv, int32_t block,
                void *state, bool *has_state);
/* Engine thread: read the not-full block (a tail) stored under key into
 * `block`, whatever tokens it holds: they go to tokens[HR_KV_BLOCK] (-1
 * after the last). The number of tokens on a hit, 0 on a miss. */
int hr_ssd_read_tail(hr_ssd *s, uint64_t key, hr_kv *kv, int32_t block, int32_t *tokens);
/* Engine thread: read the blocks stored under keys[0..n) (block i's tokens
 * at tokens + i * HR_KV_BLOCK) into blocks[0..n): hr_ssd_run_start, then
 * hr_ssd_run_finish; one by one where a run cannot be read that way. The
 * number of leading blocks read: the first miss ends the run, the blocks
 * from it on hold nothing to use. For models without a recurrent state
 * (hr_ssd_open's state_bytes 0). */
int hr_ssd_read_run(hr_ssd *s, const uint64_t *keys, const int32_t *tokens, hr_kv *kv,
                    const int32_t *blocks, int n);

/* Engine thread: queue the logits after tokens[0..n) (lcache.h; copied
 * now) to be written under key (a file of their own, "<key>.lg": format in
 * ssd_logits.c). hr_ssd_queue's 1 / 0 / -1. */
int hr_ssd_queue_logits(hr_ssd *s, uint64_t key, uint64_t seed, const int32_t *tokens, int n,
                        const float *logits, int n_vocab);
/* Engine thread: the logits stored under key for exactly seed and
 * tokens[0..n) into logits (n_vocab): 1 on a hit, 0 on a miss (absent, or
 * quarantined: it did not verify). */
int hr_ssd_read_logits(hr_ssd *s, uint64_t key, uint64_t seed, const int32_t *tokens, int n,
                       float *logits, int n_vocab);

/* A run of blocks read back in the background (ssd_run.c): reader threads
 * read the files, a chunk of layers at a time, every file's first chunk
 * first, so that layer l of the whole run is in long before the last file
 * is (layered), and feed each file's checksum in its payload's order. */
typedef struct hr_ssd_run hr_ssd_run;
/* Engine thread: start reading keys[0..n) (as hr_ssd_read_run's) into
 * blocks[]; layered: in chunks of layers, the first layers of every file
 * first (for a forward waiting on the gate; a pool in host memory only),
 * else whole files (a device pool's through each reader's buffer, checked
 * there, then uploaded). The files are opened now: the leading
 * ones that are there and of the right size are read (the first that is
 * not ends the run), their number returned (*out NULL when 0). -1 (*out
 * NULL) when a run cannot be read this way: layered into a device pool, a
 * recurrent state, no memory; hr_ssd_read_run reads it one by one. The blocks must
 * stay allocated, and nothing may read them before the gate or write them,
 * until hr_ssd_run_finish. */
int hr_ssd_run_start(hr_ssd *s, const uint64_t *keys, const int32_t *tokens, hr_kv *kv,
                     const int32_t *blocks, int n, bool layered, hr_ssd_run **out);
/* Its gate (model/kv.h): wait(layer) returns once that layer of every
 * block of the run is in (verified or not: only hr_ssd_run_finish says). */
hr_kv_gate *hr_ssd_run_gate(hr_ssd_run *r);
/* Engine thread: wait for the readers, check every file's checksum, free
 * the run. The number of leading blocks that verified (a file that did not
 * is quarantined; the blocks from it on hold nothing to use). */
int hr_ssd_run_finish(hr_ssd_run *r);
/* Engine thread: ask the kernel to start reading the files stored under
 * keys[0..n) (those there) into the page cache, without waiting, so that
 * the hr_ssd_read calls that follow find them there and the disk works on
 * many files at once instead of one after another. */
void hr_ssd_prefetch(hr_ssd *s, const uint64_t *keys, int n);
/* Files written and read, and quarantined, since open. */
void hr_ssd_counts(const hr_ssd *s, long *written, long *hits, long *quarantined);
/* Bytes of the files written, and of those read back (hits), since open. */
void hr_ssd_bytes(const hr_ssd *s, long long *written, long long *read);

/* Faults since open, for the log's reader and /stats (any thread). */
typedef struct hr_ssd_state {
    long write_errors, read_errors;
    int last_errno; /* of the last failed write or read; 0 none */
    bool paused;    /* writes are paused after an error */
    double retry_in; /* seconds until writes are tried again */
    long direct_reads; /* block files read with O_DIRECT (cold ones: ssd_run.c) */
    bool converting;   /* files of format version 3 may remain (ssd_upgrade.c) */
} hr_ssd_state;
void hr_ssd_status(const hr_ssd *s, hr_ssd_state *st);
/* The pause after a write error: min_s, doubling to max_s (1 and 300 by
 * default). Call before queueing. */
void hr_ssd_set_backoff(hr_ssd *s, double min_s, double max_s);

#endif
