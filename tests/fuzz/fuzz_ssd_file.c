/* libFuzzer: the SSD tier's block files (engine/ssd.h) over arbitrary
 * bytes. The input is a file put under a block's name and read back as
 * that block, as a tail and as a run of one (straight into a host pool),
 * and by a tier whose model has a recurrent state (through its buffer).
 * The first byte picks the file: 0, the rest of the input itself; 1, a
 * valid file the tier wrote, with the input's (offset, byte) pairs XORed
 * in; 2, that file cut (or padded with the input) to a length the input
 * says. Nothing may crash or touch memory outside the block read into; a
 * file that changed from the valid one must be a miss. */
#include "core/log.h"
#include "engine/ssd.h"
#include "model/kv.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { STATE = 16 };

static char dir[128];
static hr_kv kv;
static hr_ssd *tier[2]; /* model fingerprints 42 (no state) and 43 (a state) */
static int32_t tokens[HR_KV_BLOCK];
static unsigned char *valid;
static size_t valid_len;

static void path_of(int t, uint64_t key, char *out, size_t n) {
    snprintf(out, n, "%s/%016llx/%016llx.kv", dir, 42ULL + (unsigned long long)t,
             (unsigned long long)key);
}

static void put(int t, uint64_t key, const unsigned char *b, size_t n) {
    char p[512];
    path_of(t, key, p, sizeof p);
    FILE *f = fopen(p, "wb");
    if (!f)
        abort();
    if (n && fwrite(b, 1, n, f) != n)
        abort();
    fclose(f);
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
    path_of(0, 1, p, sizeof p);
    FILE *f = fopen(p, "rb");
    if (!f || fseek(f, 0, SEEK_END) || (valid_len = (size_t)ftell(f)) == 0 ||
        !(valid = malloc(valid_len)) || fseek(f, 0, SEEK_SET) ||
        fread(valid, 1, valid_len, f) != valid_len)
        abort();
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!valid)
        setup();
    if (size == 0)
        return 0;
    unsigned char *file = NULL;
    size_t n = 0;
    if (data[0] % 3 == 0) { /* the input itself */
        n = size - 1;
        file = malloc(n ? n : 1);
        memcpy(file, data + 1, n);
    } else if (data[0] % 3 == 1) { /* the valid file, bytes XORed */
        n = valid_len;
        file = malloc(n);
        memcpy(file, valid, n);
        for (size_t i = 1; i + 2 < size; i += 3)
            file[((size_t)data[i] << 8 | data[i + 1]) % n] ^= data[i + 2];
    } else { /* the valid file, cut or padded */
        size_t want = size >= 3 ? ((size_t)data[1] << 8 | data[2]) % (2 * valid_len) : 0;
        n = want;
        file = calloc(n ? n : 1, 1);
        memcpy(file, valid, n < valid_len ? n : valid_len);
        for (size_t i = valid_len; i < n && size > 3; i++) /* (else zeros) */
            file[i] = data[3 + (i - valid_len) % (size - 3)];
    }
    bool changed = n != valid_len || memcmp(file, valid, n) != 0;
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
