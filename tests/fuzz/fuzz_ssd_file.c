/* libFuzzer: the SSD tier's block files and logits files (engine/ssd.h)
 * over arbitrary bytes. The input is a file put under a block's name and
 * read back as that block, as a tail and as a run of one (straight into a
 * host pool), and by a tier whose model has a recurrent state (through its
 * buffer); or (first byte / 3 odd) a file put under a prompt's logits name
 * and read back as those logits. The first byte % 3 picks the file: 0, the
 * rest of the input itself; 1, a valid file the tier wrote, with the
 * input's (offset, byte) pairs XORed in; 2, that file cut (or padded with
 * the input) to a length the input says. With (first byte / 6 odd) the
 * valid block file is the one hearth before format version 4 wrote
 * (version 3), put in a directory an older hearth left (not marked): a
 * tier opened over it converts it in its writer thread (ssd_upgrade.c),
 * then reads it. Nothing may crash or touch memory outside the block or
 * logits read into; a file that changed from the valid one must be a
 * miss. */
#include "core/log.h"
#include "engine/ssd.h"
#include "model/kv.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

enum { STATE = 16 };

static char dir[128];
static hr_kv kv;
static hr_ssd *tier[2]; /* model fingerprints 42 (no state) and 43 (a state) */
static int32_t tokens[HR_KV_BLOCK];
static unsigned char *valid, *valid_lg; /* a block's file, a prompt's logits file */
static size_t valid_len, valid_lg_len;
static unsigned char *valid_v3; /* the block's file as format version 3 wrote it */
static size_t valid_v3_len;
enum { HDR = 4096, HDR_V3 = 228 }; /* ssd_int.h HDR_BYTES, HDR_FIELDS */
enum { VOCAB = 40, PROMPT = 5, LG_KEY = 2, LG_SEED = 9 };

static void path_of(int t, uint64_t key, char *out, size_t n, const char *ext) {
    snprintf(out, n, "%s/%016llx/%016llx.%s", dir, 42ULL + (unsigned long long)t,
             (unsigned long long)key, ext);
}

static void put_as(int t, uint64_t key, const unsigned char *b, size_t n, const char *ext) {
    char p[512];
    path_of(t, key, p, sizeof p, ext);
    FILE *f = fopen(p, "wb");
    if (!f)
        abort();
    if (n && fwrite(b, 1, n, f) != n)
        abort();
    fclose(f);
}

static void put(int t, uint64_t key, const unsigned char *b, size_t n) {
    put_as(t, key, b, n, "kv");
}

/* The whole file at p, malloc'd (*n its length); aborts when it cannot. */
static unsigned char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    unsigned char *b = NULL;
    if (!f || fseek(f, 0, SEEK_END) || (*n = (size_t)ftell(f)) == 0 || !(b = malloc(*n)) ||
        fseek(f, 0, SEEK_SET) || fread(b, 1, *n, f) != *n)
        abort();
    fclose(f);
    return b;
}

static void cleanup(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz_ssd_file: %s left behind\n", dir);
}

/* once: the pool, the two tiers, and one valid file (block 0 written by
 * the tier under key 1) */
static void setup(void) {
    hr_log_set_level(HR_LOG_ERROR); /* (a quarantine a run is a warning) */
    snprintf(dir, sizeof dir, "/tmp/hearth_fuzz_ssd_%d", (int)getpid());
    mkdir(dir, 0755);
    atexit(cleanup);
    hr_hparams hp = {.n_layers = 2, .n_kv_heads = 2, .head_dim = 4};
    if (hr_kv_init(&kv, &hp, HR_DTYPE_F32, 4, NULL) ||
        hr_ssd_open(&tier[0], dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL) ||
        hr_ssd_open(&tier[1], dir, 43, 7, &kv, STATE, (size_t)1 << 30, NULL))
        abort();
    for (int i = 0; i < HR_KV_BLOCK; i++)
        tokens[i] = 3 + 7 * i;
    int32_t b = hr_kv_alloc(&kv);
    float *k = hr_kv_layer_k(&kv, 0);
    for (size_t i = 0; i < kv.block_stride; i++)
        k[(size_t)b * kv.block_stride + i] = (float)i * 0.5f;
    if (hr_ssd_queue(tier[0], 1, tokens, b, NULL) != 1)
        abort();
    int32_t done;
    while (hr_ssd_done(tier[0], &done, 1) == 0)
        usleep(1000);
    hr_kv_unref(&kv, b);
    char p[512];
    path_of(0, 1, p, sizeof p, "kv");
    valid = slurp(p, &valid_len);
    /* version 3: the same fields in HDR_V3 bytes (their sum again), the payload */
    valid_v3_len = valid_len - (HDR - HDR_V3);
    if (!(valid_v3 = malloc(valid_v3_len)))
        abort();
    memcpy(valid_v3, valid, HDR_V3);
    memcpy(valid_v3 + HDR_V3, valid + HDR, valid_len - HDR);
    uint32_t u32[] = {3, HDR_V3};
    memcpy(valid_v3 + 8, u32, sizeof u32);
    uint64_t hsum = XXH64(valid_v3, HDR_V3 - 8, 0);
    memcpy(valid_v3 + HDR_V3 - 8, &hsum, 8);
    snprintf(p, sizeof p, "%s/v3", dir); /* its tiers' directory, made (and marked) */
    hr_ssd *t3;
    if (hr_ssd_open(&t3, p, 42, 7, &kv, 0, (size_t)1 << 30, NULL))
        abort();
    hr_ssd_close(t3);
    float logits[VOCAB];
    for (int i = 0; i < VOCAB; i++)
        logits[i] = (float)i - 7.5f;
    if (hr_ssd_queue_logits(tier[0], LG_KEY, LG_SEED, tokens, PROMPT, logits, VOCAB) != 1)
        abort();
    hr_ssd_stop(tier[0]); /* (its writes finished: the tier still reads) */
    path_of(0, LG_KEY, p, sizeof p, "lg");
    valid_lg = slurp(p, &valid_lg_len);
}

/* The version-3 case: file (n bytes) under block 1's name in the v3
 * directory, unmarked; a tier opened over it converts what it can, then
 * reads block 1: a hit only where the file was the valid one. */
static void read_old(const unsigned char *file, size_t n, bool changed) {
    char p[512];
    snprintf(p, sizeof p, "%s/v3/%016llx/format-4", dir, 42ULL);
    unlink(p);
    snprintf(p, sizeof p, "%s/v3/%016llx/%016llx.kv", dir, 42ULL, 1ULL);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(file, 1, n, f) != n))
        abort();
    fclose(f);
    hr_ssd *t3;
    snprintf(p, sizeof p, "%s/v3", dir);
    if (hr_ssd_open(&t3, p, 42, 7, &kv, 0, (size_t)1 << 30, NULL))
        abort();
    hr_ssd_state st;
    for (int i = 0; i < 10000; i++) {
        hr_ssd_status(t3, &st);
        if (!st.converting)
            break;
        usleep(100);
    }
    if (st.converting)
        abort();
    int32_t blk = hr_kv_alloc(&kv);
    if (hr_ssd_read(t3, 1, tokens, &kv, blk, NULL, NULL) && changed)
        abort();
    hr_kv_unref(&kv, blk);
    hr_ssd_close(t3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!valid)
        setup();
    if (size == 0)
        return 0;
    bool lg = data[0] / 3 % 2, v3 = !lg && data[0] / 6 % 2;
    const unsigned char *vf = lg ? valid_lg : v3 ? valid_v3 : valid;
    size_t vlen = lg ? valid_lg_len : v3 ? valid_v3_len : valid_len;
    unsigned char *file = NULL;
    size_t n = 0;
    if (data[0] % 3 == 0) { /* the input itself */
        n = size - 1;
        file = malloc(n ? n : 1);
        memcpy(file, data + 1, n);
    } else if (data[0] % 3 == 1) { /* the valid file, bytes XORed */
        n = vlen;
        file = malloc(n);
        memcpy(file, vf, n);
        for (size_t i = 1; i + 2 < size; i += 3)
            file[((size_t)data[i] << 8 | data[i + 1]) % n] ^= data[i + 2];
    } else { /* the valid file, cut or padded */
        size_t want = size >= 3 ? ((size_t)data[1] << 8 | data[2]) % (2 * vlen) : 0;
        n = want;
        file = calloc(n ? n : 1, 1);
        memcpy(file, vf, n < vlen ? n : vlen);
        for (size_t i = vlen; i < n && size > 3; i++) /* (else zeros) */
            file[i] = data[3 + (i - vlen) % (size - 3)];
    }
    bool changed = n != vlen || memcmp(file, vf, n) != 0;
    if (v3) { /* (the valid version-4 file is a hit there too) */
        read_old(file, n, changed && (n != valid_len || memcmp(file, valid, n) != 0));
        free(file);
        return 0;
    }
    if (lg) { /* a prompt's logits: this prompt's, and another's under its key */
        float out[VOCAB];
        put_as(0, LG_KEY, file, n, "lg");
        if (hr_ssd_read_logits(tier[0], LG_KEY, LG_SEED, tokens, PROMPT, out, VOCAB) && changed)
            abort();
        put_as(0, LG_KEY, file, n, "lg");
        if (hr_ssd_read_logits(tier[0], LG_KEY, LG_SEED, tokens + 1, PROMPT, out, VOCAB))
            abort();
        free(file);
        return 0;
    }
    int32_t blk = hr_kv_alloc(&kv), tt[HR_KV_BLOCK];
    unsigned char state[STATE];
    bool has = false;
    for (int t = 0; t < 2; t++) {
        put(t, 1, file, n);
        int hit = hr_ssd_read(tier[t], 1, tokens, &kv, blk, t ? state : NULL, &has);
        if (hit && (changed || t)) /* (tier 1's files have another fingerprint) */
            abort();
        put(t, 1, file, n);
        hr_ssd_read_tail(tier[t], 1, &kv, blk, tt);
        put(t, 1, file, n);
        uint64_t key = 1;
        hit = hr_ssd_read_run(tier[t], &key, tokens, &kv, &blk, 1);
        if (hit && (changed || t))
            abort();
    }
    hr_kv_unref(&kv, blk);
    free(file);
    return 0;
}
