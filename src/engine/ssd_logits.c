/* The SSD tier's logits files (lcache.h): the last position's logits of a
 * prompt, beside its KV blocks in the tier's directory (per model and KV
 * format), named "<key>.lg".
 *
 * File (little-endian): "HEARTHLG", u32 version, u32 header bytes, u64 model
 * fingerprint, u64 salt (tokenizer hash), u32 shape[7] (as a block's:
 * hr__ssd_shape), u32 vocabulary, u32 tokens, u64 key, u64 seed, u64
 * xxh64(tokens, logits), u64 xxh64(header so far); then i32 tokens[],
 * f32 logits[vocabulary]. Written and checked as the blocks' files are: a
 * temp file renamed into place, read with read(2) only, a file that does
 * not verify quarantined (a miss). Their bytes count in the tier's, their
 * files not in its blocks written and read. */
#include "engine/ssd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LG_MAGIC "HEARTHLG"
#define LG_VERSION 1u
#define LG_HDR (8 + 4 + 4 + 8 + 8 + 4 * 7 + 4 + 4 + 8 + 8 + 8 + 8)

static void lg_path(const hr_ssd *s, uint64_t key, char *out, size_t n) {
    snprintf(out, n, "%s/%016llx.lg", s->dir, (unsigned long long)key);
}

static uint64_t body_sum(const int32_t *tokens, int n, const float *logits, int n_vocab) {
    XXH64_state_t xs;
    XXH64_reset(&xs, 0);
    XXH64_update(&xs, tokens, (size_t)n * sizeof *tokens);
    XXH64_update(&xs, logits, (size_t)n_vocab * sizeof *logits);
    return XXH64_digest(&xs);
}

static void lg_header(const hr_ssd *s, uint64_t key, uint64_t seed, int n, int n_vocab,
                      uint64_t sum, unsigned char *h) {
    uint32_t u32[] = {LG_VERSION, LG_HDR}, shape[7], sizes[] = {(uint32_t)n_vocab, (uint32_t)n};
    hr__ssd_shape(s, shape);
    unsigned char *p = hr__ssd_put(h, LG_MAGIC, 8);
    p = hr__ssd_put(p, u32, sizeof u32);
    p = hr__ssd_put(p, &s->fp, 8);
    p = hr__ssd_put(p, &s->salt, 8);
    p = hr__ssd_put(p, shape, sizeof shape);
    p = hr__ssd_put(p, sizes, sizeof sizes);
    p = hr__ssd_put(p, &key, 8);
    p = hr__ssd_put(p, &seed, 8);
    p = hr__ssd_put(p, &sum, 8);
    uint64_t hsum = XXH64(h, (size_t)(p - h), 0);
    hr__ssd_put(p, &hsum, 8);
}

int hr_ssd_queue_logits(hr_ssd *s, uint64_t key, uint64_t seed, const int32_t *tokens, int n,
                        const float *logits, int n_vocab) {
    if (hr__ssd_paused(s))
        return -1;
    job j = {.key = key, .block = -1, .ltokens = malloc((size_t)n * sizeof *tokens),
             .logits = malloc((size_t)n_vocab * sizeof *logits), .n_ltokens = n,
             .n_vocab = n_vocab, .seed = seed};
    if (j.ltokens && j.logits) {
        memcpy(j.ltokens, tokens, (size_t)n * sizeof *tokens);
        memcpy(j.logits, logits, (size_t)n_vocab * sizeof *logits);
        if (hr__ssd_push(s, &j))
            return 1;
    }
    free(j.ltokens);
    free(j.logits);
    return 0;
}

int hr__ssd_write_logits(hr_ssd *s, const job *j) {
    char path[4200];
    lg_path(s, j->key, path, sizeof path);
    size_t bytes = LG_HDR + (size_t)j->n_ltokens * 4 + (size_t)j->n_vocab * 4;
    struct stat fst;
    bool had = stat(path, &fst) == 0 && S_ISREG(fst.st_mode);
    if (had && (size_t)fst.st_size == bytes)
        return 0; /* already on disk (verified on read) */
    unsigned char h[LG_HDR];
    lg_header(s, j->key, j->seed, j->n_ltokens, j->n_vocab,
              body_sum(j->ltokens, j->n_ltokens, j->logits, j->n_vocab), h);
    struct iovec iov[] = {{h, sizeof h},
                          {j->ltokens, (size_t)j->n_ltokens * 4},
                          {j->logits, (size_t)j->n_vocab * 4}};
    if (hr__ssd_write_file(path, iov, 3))
        return -1;
    hr__ssd_wrote(s, bytes, had ? (size_t)fst.st_size : 0, false);
    return 0;
}

int hr_ssd_read_logits(hr_ssd *s, uint64_t key, uint64_t seed, const int32_t *tokens, int n,
                       float *logits, int n_vocab) {
    char path[4200];
    lg_path(s, key, path, sizeof path);
    int fd = hr__ssd_open_path(s, path);
    if (fd < 0)
        return 0;
    int32_t *ftok = malloc((size_t)n * sizeof *ftok);
    unsigned char h[LG_HDR], want[LG_HDR], extra;
    struct iovec iov[] = {{h, sizeof h}, {ftok, (size_t)n * 4}, {logits, (size_t)n_vocab * 4},
                          {&extra, 1}}; /* a longer file is a wrong one */
    size_t size = LG_HDR + (size_t)n * 4 + (size_t)n_vocab * 4;
    struct stat st;
    const char *fault = NULL;
    ssize_t got = -1;
    if (!ftok) {
        close(fd);
        return 0;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fault = "is not a regular file";
    } else if ((got = hr__ssd_preadv_all(fd, iov, 4, 0)) < 0) {
        hr__ssd_read_failed(s, "read", path);
    } else if ((size_t)got != size) {
        fault = "has the wrong size (truncated?)";
    } else {
        uint64_t sum;
        memcpy(&sum, h + LG_HDR - 16, 8);
        lg_header(s, key, seed, n, n_vocab, sum, want);
        if (memcmp(h, want, LG_HDR) || memcmp(ftok, tokens, (size_t)n * 4))
            fault = "does not match this model, format or prompt";
        else if (body_sum(ftok, n, logits, n_vocab) != sum)
            fault = "fails its checksum";
    }
    close(fd);
    free(ftok);
    if (fault)
        hr__ssd_quarantine(s, path, fault);
    if (fault || got < 0)
        return 0;
    atomic_fetch_add(&s->bytes_read, (long long)got); /* (files counted: blocks only) */
    return 1;
}
