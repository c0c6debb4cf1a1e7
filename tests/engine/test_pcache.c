/* The prompt cache on a small KV pool, without a model: token-granular
 * lookups (whole blocks shared, the common rows of a next block copied into
 * a fresh one), cached blocks never written, tails replaced by the blocks
 * that extend them, eviction, and a pool with no block to spare; the SSD
 * tier for half-precision and quantized pools, and its faults (full disk,
 * I/O error, read-only directory, truncated file, FIFO). */
#include "engine/pcache.h"
#include "engine/ssd.h"
#include "core/fault.h"
#include "model/kv.h"
#include "kernels/backend.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#define LAYERS 2
#define HEADS 2
#define HD 4
#define HDR_ON_DISK 4096 /* a file's header, the payload after it (ssd_int.h) */

static void pool(hr_kv *kv, int n_blocks) {
    hr_hparams hp = {.n_layers = LAYERS, .n_kv_heads = HEADS, .head_dim = HD};
    assert_int_equal(hr_kv_init(kv, &hp, HR_DTYPE_F32, n_blocks, NULL), 0);
}

/* rm -rf dir (a test's temporary directory) */
static void remove_tree(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* K and V of (block, layer, head, slot, d), as a request would store them */
static float *row(const hr_kv *kv, bool v, int32_t b, int l, int h, int slot) {
    float *base = v ? (float *)hr_kv_layer_v(kv, l) : (float *)hr_kv_layer_k(kv, l);
    return base + (size_t)b * kv->block_stride + ((size_t)h * HR_KV_BLOCK + slot) * HD;
}

static void fill(hr_kv *kv, int32_t b, float seed) {
    for (int l = 0; l < LAYERS; l++)
        for (int h = 0; h < HEADS; h++)
            for (int s = 0; s < HR_KV_BLOCK; s++)
                for (int d = 0; d < HD; d++) {
                    row(kv, false, b, l, h, s)[d] = seed + l * 1000 + h * 100 + s + d * 0.25f;
                    row(kv, true, b, l, h, s)[d] = -(seed + l * 1000 + h * 100 + s + d * 0.25f);
                }
}

/* Rows [0, n) of blocks a and b are equal, K and V of every layer and head. */
static bool same_rows(const hr_kv *kv, int32_t a, int32_t b, int n) {
    for (int l = 0; l < LAYERS; l++)
        for (int h = 0; h < HEADS; h++)
            for (int v = 0; v < 2; v++)
                if (memcmp(row(kv, v, a, l, h, 0), row(kv, v, b, l, h, 0),
                           (size_t)n * HD * sizeof(float)))
                    return false;
    return true;
}

static void seq(int32_t *t, int n, int32_t base) {
    for (int i = 0; i < n; i++)
        t[i] = base + i * 7;
}

/* nb blocks allocated, block b filled with seed (b + 1) * 10000 (the
 * caller's references: the blocks written, to compare with) */
static void filled(hr_kv *kv, int32_t *blocks, int nb) {
    for (int b = 0; b < nb; b++) {
        blocks[b] = hr_kv_alloc(kv);
        assert_true(blocks[b] >= 0);
        fill(kv, blocks[b], (float)(b + 1) * 10000);
    }
}

/* A finished sequence of n tokens (blocks allocated and filled), indexed;
 * the caller's references are dropped as a retiring request's are. */
static void store(hr_pcache *pc, hr_kv *kv, const int32_t *t, int n, int32_t *blocks) {
    int nb = (n + HR_KV_BLOCK - 1) / HR_KV_BLOCK;
    for (int b = 0; b < nb; b++) {
        blocks[b] = hr_kv_alloc(kv);
        assert_true(blocks[b] >= 0);
        fill(kv, blocks[b], (float)(blocks[b] + 1) * 10000);
    }
    hr_pcache_insert(pc, 0, t, n, blocks);
    for (int b = 0; b < nb; b++)
        hr_kv_unref(kv, blocks[b]);
}

/* Sequences of different seeds (LoRA adapters) share nothing: not whole
 * blocks, not a partial copy; the same seed finds its own. */
static void test_seed(void **state) {
    (void)state;
    hr_kv kv;
    pool(&kv, 8);
    hr_pcache *pc = hr_pcache_new(&kv, 0, NULL, 0);
    int32_t a[40], blocks[2], got[4];
    seq(a, 40, 1);
    int nb = 2;
    for (int b = 0; b < nb; b++)
        blocks[b] = hr_kv_alloc(&kv);
    hr_pcache_insert(pc, 0x1234567, a, 40, blocks);
    for (int b = 0; b < nb; b++)
        hr_kv_unref(&kv, blocks[b]);
    int n = -1;
    assert_int_equal(hr_pcache_lookup(pc, 0, a, 39, 39, 4, got, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(hr_pcache_lookup(pc, 99, a, 20, 20, 4, got, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(hr_pcache_lookup(pc, 0x1234567, a, 39, 39, 4, got, &n), 2);
    assert_int_equal(n, 39);
    for (int b = 0; b < 2; b++)
        hr_kv_unref(&kv, got[b]);
    hr_pcache_free(pc);
    hr_kv_deinit(&kv);
}

static void release(hr_kv *kv, const int32_t *blocks, int n) {
    for (int b = 0; b < n; b++)
        hr_kv_unref(kv, blocks[b]);
}

/* A prompt sharing 37 tokens with a cached 40-token sequence gets block 0
 * by reference and the first 5 rows of block 1 in a block of its own; the
 * cached block is unchanged after the new owner writes its copy. */
static void test_partial_copy(void **state) {
    (void)state;
    hr_kv kv;
    pool(&kv, 8);
    hr_pcache *pc = hr_pcache_new(&kv, 0, NULL, 0);
    int32_t a[40], q[45], cached[2], got[4];
    seq(a, 40, 1);
    store(pc, &kv, a, 40, cached);
    assert_int_equal(hr_pcache_blocks(pc), 2);
    memcpy(q, a, 37 * sizeof *q);
    seq(q + 37, 8, 900);
    int n = -1;
    assert_int_equal(hr_pcache_lookup(pc, 0, q, 45, 45, 4, got, &n), 2);
    assert_int_equal(n, 37);
    assert_int_equal(got[0], cached[0]); /* shared */
    assert_int_equal(kv.refs[cached[0]], 2);
    assert_int_not_equal(got[1], cached[1]); /* copied */
    assert_int_equal(kv.refs[got[1]], 1);
    assert_int_equal(kv.refs[cached[1]], 1);
    assert_true(same_rows(&kv, got[1], cached[1], 5));
    assert_false(same_rows(&kv, got[1], cached[1], 6));

    /* the new owner computes its rows 5..: the cached block never changes */
    hr_kv snap;
    pool(&snap, 1);
    for (int l = 0; l < LAYERS; l++) {
        memcpy(hr_kv_layer_k(&snap, l), (float *)hr_kv_layer_k(&kv, l) + cached[1] * kv.block_stride,
               kv.block_stride * sizeof(float));
        memcpy(hr_kv_layer_v(&snap, l), (float *)hr_kv_layer_v(&kv, l) + cached[1] * kv.block_stride,
               kv.block_stride * sizeof(float));
    }
    fill(&kv, got[1], -5);
    for (int l = 0; l < LAYERS; l++) {
        assert_memory_equal(hr_kv_layer_k(&snap, l),
                            (float *)hr_kv_layer_k(&kv, l) + cached[1] * kv.block_stride,
                            kv.block_stride * sizeof(float));
        assert_memory_equal(hr_kv_layer_v(&snap, l),
                            (float *)hr_kv_layer_v(&kv, l) + cached[1] * kv.block_stride,
                            kv.block_stride * sizeof(float));
    }
    hr_kv_deinit(&snap);
    release(&kv, got, 2);

    /* the same sequence again: all of it, shorter than its blocks too */
    assert_int_equal(hr_pcache_lookup(pc, 0, a, 39, 39, 4, got, &n), 2);
    assert_int_equal(n, 39);
    release(&kv, got, 2);
    assert_int_equal(hr_pcache_lookup(pc, 0, a, 20, 20, 4, got, &n), 1);
    assert_int_equal(n, 20);
    assert_true(same_rows(&kv, got[0], cached[0], 20));
    release(&kv, got, 1);
    /* no room for a block past max_blocks: whole blocks only */
    assert_int_equal(hr_pcache_lookup(pc, 0, a, 39, 39, 1, got, &n), 1);
    assert_int_equal(n, 32);
    release(&kv, got, 1);
    /* nothing in common */
    seq(q, 45, 5000);
    assert_int_equal(hr_pcache_lookup(pc, 0, q, 45, 45, 4, got, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(kv.n_free, 6);
    hr_pcache_free(pc);
    assert_int_equal(kv.n_free, 8);
    hr_kv_deinit(&kv);
}

/* A tail is replaced by a longer tail or a full block that extends it; a
 * shorter one that an entry covers is not indexed. */
static void test_tails(void **state) {
    (void)state;
    hr_kv kv;
    pool(&kv, 8);
    hr_pcache *pc = hr_pcache_new(&kv, 0, NULL, 0);
    int32_t a[40], blk[2], got[2];
    seq(a, 40, 1);
    store(pc, &kv, a, 10, blk);
    assert_int_equal(hr_pcache_blocks(pc), 1);
    store(pc, &kv, a, 20, blk); /* extends it: the 10-token tail goes */
    assert_int_equal(hr_pcache_blocks(pc), 1);
    assert_int_equal(kv.n_free, 7);
    store(pc, &kv, a, 5, blk); /* covered by the 20-token tail */
    assert_int_equal(hr_pcache_blocks(pc), 1);
    assert_int_equal(kv.n_free, 7);
    store(pc, &kv, a, 40, blk); /* a full block and a tail of 8 */
    assert_int_equal(hr_pcache_blocks(pc), 2);
    assert_int_equal(kv.n_free, 6);
    int n;
    assert_int_equal(hr_pcache_lookup(pc, 0, a, 39, 39, 2, got, &n), 2);
    assert_int_equal(n, 39);
    assert_int_equal(got[0], blk[0]);
    release(&kv, got, 2);
    hr_pcache_free(pc);
    hr_kv_deinit(&kv);
}

/* A tail is evicted like a full block: LRU first, never while in use; the
 * block the lookup copies from is not evicted to make room for its copy. */
static void test_evict_tail(void **state) {
    (void)state;
    hr_kv kv;
    pool(&kv, 2);
    hr_pcache *pc = hr_pcache_new(&kv, 0, NULL, 0);
    int32_t a[20], b[20], blk[1], got[1];
    seq(a, 20, 1);
    seq(b, 20, 3000);
    store(pc, &kv, a, 20, blk);
    int32_t a_blk = blk[0];
    store(pc, &kv, b, 20, blk);
    assert_int_equal(hr_pcache_blocks(pc), 2);
    assert_int_equal(kv.n_free, 0);
    /* the pool is full: a's tail, the least recent, is the copy's source
     * and stays; b's gives way */
    int n;
    assert_int_equal(hr_pcache_lookup(pc, 0, a, 12, 12, 1, got, &n), 1);
    assert_int_equal(n, 12);
    assert_int_equal(got[0], blk[0]);
    assert_int_equal(hr_pcache_blocks(pc), 1);
    assert_true(same_rows(&kv, got[0], a_blk, 12));
    /* in use (got[0] is held): a's tail is the only entry and cannot go
     * while it is the source, nor is there a free block: no copy */
    assert_int_equal(hr_pcache_lookup(pc, 0, a, 12, 12, 1, blk, &n), 0);
    assert_int_equal(n, 0);
    release(&kv, got, 1);
    assert_int_equal(hr_pcache_evict(pc, 1), 1);
    assert_int_equal(hr_pcache_blocks(pc), 0);
    assert_int_equal(kv.n_free, 2);
    assert_int_equal(hr_pcache_lookup(pc, 0, a, 12, 12, 1, got, &n), 0);
    assert_int_equal(n, 0);
    hr_pcache_free(pc);
    hr_kv_deinit(&kv);
}

/* The bound on cached blocks counts tails. */
static void test_bound(void **state) {
    (void)state;
    hr_kv kv;
    pool(&kv, 8);
    hr_pcache *pc = hr_pcache_new(&kv, 2, NULL, 0);
    int32_t t[20], blk[1];
    for (int k = 0; k < 4; k++) {
        seq(t, 20, 1000 * (k + 1));
        store(pc, &kv, t, 20, blk);
    }
    assert_int_equal(hr_pcache_blocks(pc), 2);
    assert_int_equal(kv.n_free, 6);
    hr_pcache_free(pc);
    hr_kv_deinit(&kv);
}

/* A sequence of more blocks than the SSD writer queues at once (256) gets
 * every block on disk: the writes that found the queue full wait in the
 * cache (which does not demote them meanwhile) and are queued as it drains;
 * a fresh cache over the same directory then finds the whole prefix. */
static void test_ssd_backlog(void **state) {
    (void)state;
    enum { NB = 300 };
    char dir[] = "/tmp/hearth_pcache_ssd_XXXXXX";
    assert_non_null(mkdtemp(dir));
    hr_kv kv;
    pool(&kv, NB + 8);
    hr_ssd *ssd;
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    hr_pcache *pc = hr_pcache_new(&kv, 0, ssd, 1e-9); /* demote anything idle */
    static int32_t t[NB * HR_KV_BLOCK], blocks[NB];
    seq(t, NB * HR_KV_BLOCK, 3);
    store(pc, &kv, t, NB * HR_KV_BLOCK, blocks);
    long written = 0, hits, quarantined;
    for (int i = 0; i < 100000 && written < NB; i++) {
        hr_pcache_poll(pc, 1e18); /* demotion: only what is on disk may go */
        hr_ssd_counts(ssd, &written, &hits, &quarantined);
        usleep(100);
    }
    assert_int_equal(written, NB);
    hr_ssd_stop(ssd);
    hr_pcache_poll(pc, 1e18);
    hr_pcache_free(pc);
    hr_ssd_close(ssd);
    /* a new cache (a restart) finds all NB blocks on disk */
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    pc = hr_pcache_new(&kv, 0, ssd, 0);
    int32_t got[NB];
    int n_tok = 0;
    int nb = hr_pcache_lookup(pc, 0, t, NB * HR_KV_BLOCK + 1, NB * HR_KV_BLOCK + 1, NB, got, &n_tok);
    assert_int_equal(nb, NB);
    assert_int_equal(n_tok, NB * HR_KV_BLOCK);
    release(&kv, got, nb);
    hr_ssd_stop(ssd);
    hr_pcache_poll(pc, 0);
    hr_pcache_free(pc);
    hr_ssd_close(ssd);
    hr_kv_deinit(&kv);
    remove_tree(dir);
}

/* Poll pc until the SSD tier has written `files` files. */
static void drain(hr_pcache *pc, hr_ssd *ssd, long files) {
    long written = 0, hits, quarantined;
    for (int i = 0; i < 100000 && written < files; i++) {
        hr_pcache_poll(pc, 0);
        hr_ssd_counts(ssd, &written, &hits, &quarantined);
        usleep(100);
    }
    assert_int_equal(written, files);
}

/* The byte at `at` of block b's file (of the sequence of tokens t, under
 * model fingerprint 42 in dir) set to `byte`. */
static void damage(const char *dir, const int32_t *t, int b, long at, unsigned byte) {
    uint64_t key = 0; /* the file's name: the chain key of blocks 0..b */
    for (int i = 0; i <= b; i++)
        key = XXH3_64bits_withSeed(t + i * HR_KV_BLOCK, HR_KV_BLOCK * sizeof *t, key);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "printf '\\%03o' | dd of=%s/000000000000002a/%016llx.kv bs=1 "
             "seek=%ld conv=notrunc 2>/dev/null", byte, dir, (unsigned long long)key, at);
    assert_int_equal(system(cmd), 0);
}

/* A process's end after `files` writes: they finish, the cache and the tier
 * are freed (the files stay for a restart). */
static void shut_down(hr_pcache *pc, hr_ssd *ssd, long files) {
    drain(pc, ssd, files);
    hr_ssd_stop(ssd);
    hr_pcache_poll(pc, 0);
    hr_pcache_free(pc);
    hr_ssd_close(ssd);
}

/* A restart (a new cache and tier over the same directory) re-attaches a
 * sequence: its whole blocks, read back several at once, are the blocks
 * that were written, bit for bit, in a pool in host memory (straight into
 * the blocks) and in one "in device memory" (through the backend); a file
 * corrupted in the middle ends the prefix there (quarantined), never a
 * wrong block. */
static void test_ssd_restart_run(void **state) {
    (void)state;
    enum { NB = 40, BAD = 23 };
    hr_backend dev = *hr_backend_cpu();
    dev.device_mem = true; /* the CPU's ops, said to be a GPU's */
    for (int d = 0; d < 2; d++) {
        char dir[] = "/tmp/hearth_pcache_run_XXXXXX";
        assert_non_null(mkdtemp(dir));
        hr_kv kv;
        hr_hparams hp = {.n_layers = LAYERS, .n_kv_heads = HEADS, .head_dim = HD};
        assert_int_equal(hr_kv_init_on(&kv, d ? &dev : hr_backend_cpu(), &hp, HR_DTYPE_F32,
                                       2 * NB + 4, NULL), 0);
        hr_ssd *ssd;
        assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
        hr_pcache *pc = hr_pcache_new(&kv, 0, ssd, 0);
        static int32_t t[NB * HR_KV_BLOCK], blocks[NB], got[NB];
        seq(t, NB * HR_KV_BLOCK, 11);
        filled(&kv, blocks, NB);
        hr_pcache_insert(pc, 0, t, NB * HR_KV_BLOCK, blocks); /* (kept: the reference) */
        shut_down(pc, ssd, NB);

        assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
        pc = hr_pcache_new(&kv, 0, ssd, 0);
        int n = 0;
        assert_int_equal(hr_pcache_lookup(pc, 0, t, NB * HR_KV_BLOCK, NB * HR_KV_BLOCK, NB, got,
                                          &n), NB);
        assert_int_equal(n, NB * HR_KV_BLOCK);
        for (int b = 0; b < NB; b++) {
            assert_int_not_equal(got[b], blocks[b]);
            assert_true(same_rows(&kv, got[b], blocks[b], HR_KV_BLOCK));
        }
        release(&kv, got, NB);
        hr_pcache_free(pc); /* (drops the read blocks: the next lookup reads again) */

        /* block BAD's payload changed by one bit: blocks [0, BAD) only */
        pc = hr_pcache_new(&kv, 0, ssd, 0);
        damage(dir, t, BAD, 5000, 1); /* (in its payload: from 4096) */
        assert_int_equal(hr_pcache_lookup(pc, 0, t, NB * HR_KV_BLOCK, NB * HR_KV_BLOCK, NB, got,
                                          &n), BAD);
        assert_int_equal(n, BAD * HR_KV_BLOCK);
        for (int b = 0; b < BAD; b++)
            assert_true(same_rows(&kv, got[b], blocks[b], HR_KV_BLOCK));
        long w, h, q;
        hr_ssd_counts(ssd, &w, &h, &q);
        assert_int_equal(q, 1);
        release(&kv, got, BAD);
        assert_int_equal(kv.n_free, NB + 4 - BAD); /* the cache holds BAD; nothing leaked */
        hr_pcache_free(pc);

        /* block 5's header changed (a token it says it holds): blocks [0, 5) */
        pc = hr_pcache_new(&kv, 0, ssd, 0);
        damage(dir, t, 5, 100, 0377); /* (in its tokens: 68 + 4 i) */
        assert_int_equal(hr_pcache_lookup(pc, 0, t, NB * HR_KV_BLOCK, NB * HR_KV_BLOCK, NB, got,
                                          &n), 5);
        for (int b = 0; b < 5; b++)
            assert_true(same_rows(&kv, got[b], blocks[b], HR_KV_BLOCK));
        hr_ssd_counts(ssd, &w, &h, &q);
        assert_int_equal(q, 2);
        release(&kv, got, 5);
        hr_pcache_free(pc);
        hr_ssd_close(ssd);
        release(&kv, blocks, NB);
        assert_int_equal(kv.n_free, 2 * NB + 4);
        hr_kv_deinit(&kv);
        remove_tree(dir);
    }
}

/* Layer l of block b of a pool of any shape, K and V: equal in a and b. */
static bool same_layer(const hr_kv *kv, int32_t a, int32_t b, int l) {
    size_t kb = hr_kv_stride_bytes(kv), vb = hr_kv_vstride_bytes(kv);
    const char *k = hr_kv_layer_k(kv, l), *v = hr_kv_layer_v(kv, l);
    return !memcmp(k + (size_t)a * kb, k + (size_t)b * kb, kb) &&
           !memcmp(v + (size_t)a * vb, v + (size_t)b * vb, vb);
}

/* The page cache's copies of the files under dir dropped (synced first):
 * the next read of them is a cold one, as after a reboot */
static void evict_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "find %s -name '*.kv'", dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char path[4200];
    while (fgets(path, sizeof path, p)) {
        path[strcspn(path, "\n")] = 0;
        int fd = open(path, O_RDONLY);
        assert_true(fd >= 0);
        assert_int_equal(fdatasync(fd), 0);
        assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        close(fd);
    }
    pclose(p);
}

/* Whether the file system of dir reads with O_DIRECT (tmpfs does not) */
static bool dir_direct(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/probe", dir);
    int fd = open(path, O_CREAT | O_WRONLY | O_DIRECT, 0600);
    if (fd >= 0)
        close(fd);
    unlink(path);
    return fd >= 0;
}

/* A restart whose files the page cache does not hold (a reboot's; slices
 * of 16 KB, aligned as direct I/O needs) reads them with O_DIRECT straight
 * into the pool: the blocks written, bit for bit; a file one byte of whose
 * payload was changed since is read from the disk as it now is, fails its
 * checksum and ends the prefix (quarantined). Files the page cache holds
 * are read through it (none with O_DIRECT). */
static void test_ssd_direct(void **state) {
    (void)state;
    enum { NB = 12, BAD = 9, DHD = 64 };
    char dir[] = "/tmp/hearth_pcache_dio_XXXXXX";
    assert_non_null(mkdtemp(dir));
    if (!dir_direct(dir)) {
        printf("test_ssd_direct: skipped, %s has no O_DIRECT (tmpfs?)\n", dir);
        remove_tree(dir);
        return;
    }
    hr_kv kv;
    hr_hparams hp = {.n_layers = LAYERS, .n_kv_heads = HEADS, .head_dim = DHD};
    assert_int_equal(hr_kv_init(&kv, &hp, HR_DTYPE_F32, 2 * NB + 4, NULL), 0);
    size_t kb = hr_kv_stride_bytes(&kv);
    assert_int_equal(kb % 4096, 0);
    hr_ssd *ssd;
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    hr_pcache *pc = hr_pcache_new(&kv, 0, ssd, 0);
    static int32_t t[NB * HR_KV_BLOCK], blocks[NB], got[NB];
    seq(t, NB * HR_KV_BLOCK, 17);
    for (int b = 0; b < NB; b++) {
        blocks[b] = hr_kv_alloc(&kv);
        for (int l = 0; l < LAYERS; l++) {
            float *k = (float *)((char *)hr_kv_layer_k(&kv, l) + (size_t)blocks[b] * kb);
            float *v = (float *)((char *)hr_kv_layer_v(&kv, l) + (size_t)blocks[b] * kb);
            for (size_t i = 0; i < kb / sizeof *k; i++) {
                k[i] = (float)(b * 7919 + l * 131) + (float)i * 0.5f;
                v[i] = -k[i];
            }
        }
    }
    hr_pcache_insert(pc, 0, t, NB * HR_KV_BLOCK, blocks);
    shut_down(pc, ssd, NB);
    for (int round = 0; round < 3; round++) { /* cold, warm, cold with a damaged file */
        char cmd[256];
        snprintf(cmd, sizeof cmd, "find %s -name '*.kv' -exec cat {} + >/dev/null", dir);
        if (round == 0)
            evict_dir(dir);
        if (round == 1) /* (O_DIRECT left them out of the page cache: read them in) */
            assert_int_equal(system(cmd), 0);
        if (round == 2) { /* (then evicted: read from the disk as it now is) */
            damage(dir, t, BAD, HDR_ON_DISK + 5000, 1);
            evict_dir(dir);
        }
        assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
        pc = hr_pcache_new(&kv, 0, ssd, 0);
        int n = 0, want = round == 2 ? BAD : NB;
        assert_int_equal(hr_pcache_lookup(pc, 0, t, NB * HR_KV_BLOCK, NB * HR_KV_BLOCK, NB, got,
                                          &n), want);
        for (int b = 0; b < want; b++)
            for (int l = 0; l < LAYERS; l++)
                assert_true(same_layer(&kv, got[b], blocks[b], l));
        hr_ssd_state st;
        hr_ssd_status(ssd, &st);
        /* cold: every file read with O_DIRECT; warm: none */
        assert_int_equal(st.direct_reads, round == 1 ? 0 : want);
        long w, h, q;
        hr_ssd_counts(ssd, &w, &h, &q);
        assert_int_equal(q, round == 2 ? 1 : 0);
        release(&kv, got, want);
        hr_pcache_free(pc);
        hr_ssd_close(ssd);
    }
    release(&kv, blocks, NB);
    assert_int_equal(kv.n_free, 2 * NB + 4);
    hr_kv_deinit(&kv);
    remove_tree(dir);
}

/* Every block file under dir/000000000000002a rewritten as format version
 * 3 wrote it (hearth before the header's padding: the same fields in
 * OLD_HDR bytes, version 3, then the payload), dated 2020 */
#define OLD_HDR 228 /* ssd_int.h HDR_FIELDS */
static void make_old(const char *dir) {
    char sub[256];
    snprintf(sub, sizeof sub, "%s/000000000000002a", dir);
    DIR *d = opendir(sub);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".kv"))
            continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        static unsigned char buf[1 << 20];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        assert_true(len > HDR_ON_DISK);
        uint32_t u32[] = {3, OLD_HDR};
        memcpy(buf + 8, u32, sizeof u32);
        uint64_t hsum = XXH64(buf, OLD_HDR - 8, 0);
        memcpy(buf + OLD_HDR - 8, &hsum, 8);
        memmove(buf + OLD_HDR, buf + HDR_ON_DISK, len - HDR_ON_DISK);
        f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, len - (HDR_ON_DISK - OLD_HDR), f),
                         len - (HDR_ON_DISK - OLD_HDR));
        fclose(f);
        struct timespec ts[2] = {{1600000000, 0}, {1600000000, 0}};
        assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
        n++;
    }
    closedir(d);
    assert_true(n > 0);
    char mark[300];
    snprintf(mark, sizeof mark, "%s/format-4", sub);
    assert_int_equal(unlink(mark), 0); /* (made with the directory) */
}

/* A cache an older hearth wrote (format version 3) is kept: at the next
 * start the writer thread converts its files (a lookup meanwhile takes
 * one not yet converted for a miss, never quarantines it); then they are
 * the blocks written, bit for bit, with their dates (the budget's order)
 * and their new size; one damaged is quarantined. The directory is then
 * marked: a restart walks no more, and a new directory is marked at once. */
static void test_ssd_upgrade(void **state) {
    (void)state;
    enum { NB = 6, BAD = 4 };
    char dir[] = "/tmp/hearth_pcache_v3_XXXXXX";
    assert_non_null(mkdtemp(dir));
    hr_kv kv;
    pool(&kv, 3 * NB + 4);
    hr_ssd *ssd;
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    hr_ssd_state st;
    hr_ssd_status(ssd, &st);
    assert_false(st.converting); /* a new directory: marked */
    hr_pcache *pc = hr_pcache_new(&kv, 0, ssd, 0);
    static int32_t t[NB * HR_KV_BLOCK], blocks[NB], got[NB];
    seq(t, NB * HR_KV_BLOCK, 23);
    filled(&kv, blocks, NB);
    hr_pcache_insert(pc, 0, t, NB * HR_KV_BLOCK, blocks);
    shut_down(pc, ssd, NB);
    make_old(dir);
    damage(dir, t, BAD, OLD_HDR + 100, 1); /* (in its payload) */

    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    pc = hr_pcache_new(&kv, 0, ssd, 0);
    int n = 0; /* while the walk goes: what is converted, up to one that is not */
    int early = hr_pcache_lookup(pc, 0, t, NB * HR_KV_BLOCK, NB * HR_KV_BLOCK, NB, got, &n);
    for (int b = 0; b < early; b++)
        assert_true(same_rows(&kv, got[b], blocks[b], HR_KV_BLOCK));
    release(&kv, got, early);
    hr_pcache_free(pc);
    for (int i = 0; i < 20000; i++) {
        hr_ssd_status(ssd, &st);
        if (!st.converting)
            break;
        usleep(500);
    }
    assert_false(st.converting);
    pc = hr_pcache_new(&kv, 0, ssd, 0);
    assert_int_equal(hr_pcache_lookup(pc, 0, t, NB * HR_KV_BLOCK, NB * HR_KV_BLOCK, NB, got,
                                      &n), BAD);
    for (int b = 0; b < BAD; b++)
        assert_true(same_rows(&kv, got[b], blocks[b], HR_KV_BLOCK));
    long w, h, q;
    hr_ssd_counts(ssd, &w, &h, &q);
    assert_int_equal(q, 1); /* the damaged one, by the walk or by the early lookup */
    release(&kv, got, BAD);
    hr_pcache_free(pc);
    hr_ssd_close(ssd);
    char sub[256];
    snprintf(sub, sizeof sub, "%s/000000000000002a", dir);
    DIR *d = opendir(sub);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        char path[600];
        struct stat fs;
        snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
        if (!strstr(e->d_name, ".kv") || stat(path, &fs))
            continue;
        assert_int_equal(fs.st_size, HDR_ON_DISK + hr_kv_pool_block_bytes(&kv));
        assert_int_equal(fs.st_mtime, 1600000000);
        files++;
    }
    closedir(d);
    assert_int_equal(files, NB - 1);

    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    hr_ssd_status(ssd, &st);
    assert_false(st.converting); /* marked */
    hr_ssd_close(ssd);
    release(&kv, blocks, NB);
    assert_int_equal(kv.n_free, 3 * NB + 4);
    hr_kv_deinit(&kv);
    remove_tree(dir);
}

/* A run read back in the background (hr_pcache_overlap): the lookup hands
 * the blocks out while they are read, layer by layer (layers of 256 KB: a
 * chunk each); after the gate's wait for layer l, layer l of every block is
 * the written one, whatever of the later layers is in. A lookup that wants
 * rows of one of them copied settles the run first. A block that fails
 * its checks (its payload, or its header, read with its first layers) is
 * known at the settle: it and those after it are unindexed, and the ones
 * somebody got are hr_pcache_failed's; nothing leaks. */
static void test_ssd_overlap(void **state) {
    (void)state;
    enum { NB = 12, BAD = 7, L = 6 };
    char dir[] = "/tmp/hearth_pcache_ov_XXXXXX";
    assert_non_null(mkdtemp(dir));
    hr_kv kv;
    hr_hparams hp = {.n_layers = L, .n_kv_heads = 8, .head_dim = 128};
    assert_int_equal(hr_kv_init(&kv, &hp, HR_DTYPE_F32, 3 * NB + 4, NULL), 0);
    hr_ssd *ssd;
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    hr_pcache *pc = hr_pcache_new(&kv, 0, ssd, 0);
    static int32_t t[NB * HR_KV_BLOCK], q[6 * HR_KV_BLOCK], blocks[NB], got[NB], got2[7];
    seq(t, NB * HR_KV_BLOCK, 5);
    for (int b = 0; b < NB; b++) {
        blocks[b] = hr_kv_alloc(&kv);
        for (int l = 0; l < L; l++) { /* every byte says its block and layer */
            memset((char *)hr_kv_layer_k(&kv, l) + (size_t)blocks[b] * hr_kv_stride_bytes(&kv),
                   b * 16 + l + 1, hr_kv_stride_bytes(&kv));
            memset((char *)hr_kv_layer_v(&kv, l) + (size_t)blocks[b] * hr_kv_vstride_bytes(&kv),
                   b * 16 + l + 9, hr_kv_vstride_bytes(&kv));
        }
    }
    hr_pcache_insert(pc, 0, t, NB * HR_KV_BLOCK, blocks);
    shut_down(pc, ssd, NB);

    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    pc = hr_pcache_new(&kv, 0, ssd, 0);
    hr_pcache_overlap(pc, true);
    int n = 0;
    assert_int_equal(hr_pcache_lookup(pc, 0, t, NB * HR_KV_BLOCK, NB * HR_KV_BLOCK, NB, got, &n),
                     NB);
    assert_int_equal(n, NB * HR_KV_BLOCK);
    assert_true(hr_pcache_reading(pc));
    assert_non_null(kv.gate);
    for (int l = 0; l < L; l++) {
        kv.gate->wait(kv.gate, l);
        for (int b = 0; b < NB; b++)
            assert_true(same_layer(&kv, got[b], blocks[b], l));
    }
    /* a prompt that leaves the sequence 10 tokens into block 5: blocks
     * 0-4 shared (still being read), block 5's first rows copied after the
     * run settles */
    memcpy(q, t, sizeof q);
    q[5 * HR_KV_BLOCK + 10] = -7;
    assert_int_equal(hr_pcache_lookup(pc, 0, q, 6 * HR_KV_BLOCK, 6 * HR_KV_BLOCK, 7, got2, &n), 6);
    assert_int_equal(n, 5 * HR_KV_BLOCK + 10);
    assert_false(hr_pcache_reading(pc));
    assert_null(kv.gate);
    for (int l = 0; l < L; l++)
        assert_int_equal(memcmp((char *)hr_kv_layer_k(&kv, l) + (size_t)got2[5] *
                                    hr_kv_stride_bytes(&kv),
                                (char *)hr_kv_layer_k(&kv, l) + (size_t)blocks[5] *
                                    hr_kv_stride_bytes(&kv),
                                (size_t)10 * hp.head_dim * sizeof(float)), 0);
    const int32_t *failed;
    assert_int_equal(hr_pcache_failed(pc, &failed), 0);
    release(&kv, got, NB);
    release(&kv, got2, 6);
    hr_pcache_free(pc);

    /* block BAD's payload changed in its last layer: found at the settle */
    pc = hr_pcache_new(&kv, 0, ssd, 0);
    hr_pcache_overlap(pc, true);
    damage(dir, t, BAD, 1500000, 1);
    assert_int_equal(hr_pcache_lookup(pc, 0, t, NB * HR_KV_BLOCK, NB * HR_KV_BLOCK, NB, got, &n),
                     NB);
    hr_pcache_settle(pc);
    assert_int_equal(hr_pcache_failed(pc, &failed), NB - BAD);
    for (int i = 0; i < NB - BAD; i++)
        assert_int_equal(failed[i], got[BAD + i]);
    assert_int_equal(hr_pcache_failed(pc, &failed), 0); /* (handed out once) */
    for (int b = 0; b < BAD; b++)
        assert_true(same_layer(&kv, got[b], blocks[b], L - 1));
    long w, h, qn;
    hr_ssd_counts(ssd, &w, &h, &qn);
    assert_int_equal(qn, 1);
    release(&kv, got, NB);
    assert_int_equal(kv.n_free, 2 * NB + 4 - BAD); /* the cache holds BAD; nothing leaked */
    hr_pcache_free(pc);

    /* block 2's header changed (read with its first chunk): blocks 0-1 only;
     * the run ends where block BAD's file is no more */
    pc = hr_pcache_new(&kv, 0, ssd, 0);
    hr_pcache_overlap(pc, true);
    damage(dir, t, 2, 100, 0377);
    assert_int_equal(hr_pcache_lookup(pc, 0, t, NB * HR_KV_BLOCK, NB * HR_KV_BLOCK, NB, got, &n),
                     BAD);
    hr_pcache_settle(pc);
    assert_int_equal(hr_pcache_failed(pc, &failed), BAD - 2);
    assert_int_equal(failed[0], got[2]);
    hr_ssd_counts(ssd, &w, &h, &qn);
    assert_int_equal(qn, 2);
    release(&kv, got, BAD);
    assert_int_equal(kv.n_free, 2 * NB + 4 - 2);
    hr_pcache_free(pc);
    hr_ssd_close(ssd);
    release(&kv, blocks, NB);
    assert_int_equal(kv.n_free, 3 * NB + 4);
    hr_kv_deinit(&kv);
    remove_tree(dir);
}

/* After a restart, the rows past the last whole block come from the SSD
 * tier too: a sequence's tail (the newest after its prefix), or, when the
 * prompt's tokens say which, the full block past the ones a lookup takes;
 * copied rows equal the written ones. */
static void test_ssd_restart_tail(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_pcache_tail_XXXXXX";
    assert_non_null(mkdtemp(dir));
    hr_kv kv;
    pool(&kv, 16);
    hr_ssd *ssd;
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    hr_pcache *pc = hr_pcache_new(&kv, 0, ssd, 0);
    int32_t a[80], b[128], ablk[3], bblk[4], got[4];
    seq(a, 80, 5);     /* 2 whole blocks and a tail of 16 */
    seq(b, 128, 1000); /* 4 whole blocks */
    for (int i = 0; i < 3; i++) {
        ablk[i] = hr_kv_alloc(&kv);
        fill(&kv, ablk[i], (float)(i + 1) * 100);
    }
    for (int i = 0; i < 4; i++) {
        bblk[i] = hr_kv_alloc(&kv);
        fill(&kv, bblk[i], (float)(i + 7) * 100);
    }
    hr_pcache_insert(pc, 0, a, 80, ablk);
    hr_pcache_insert(pc, 0, b, 128, bblk);
    drain(pc, ssd, 3 + 4);
    /* a longer tail after a's prefix replaces the file of the first */
    int32_t a2[90], t2;
    memcpy(a2, a, sizeof a);
    seq(a2 + 80, 10, 777);
    t2 = hr_kv_alloc(&kv);
    fill(&kv, t2, 5555);
    int32_t a2blk[3] = {ablk[0], ablk[1], t2};
    hr_pcache_insert(pc, 0, a2, 90, a2blk);
    drain(pc, ssd, 3 + 4 + 1);
    hr_ssd_stop(ssd);
    hr_pcache_poll(pc, 0);
    hr_pcache_free(pc);
    hr_ssd_close(ssd);

    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    pc = hr_pcache_new(&kv, 0, ssd, 0);
    /* a prompt of a2's 90 tokens and more: 2 whole blocks and 26 rows of the tail */
    int32_t p[100];
    memcpy(p, a2, sizeof a2);
    seq(p + 90, 10, 9999);
    int n = 0;
    assert_int_equal(hr_pcache_lookup(pc, 0, p, 99, 100, 4, got, &n), 3);
    assert_int_equal(n, 90);
    assert_true(same_rows(&kv, got[0], ablk[0], HR_KV_BLOCK));
    assert_true(same_rows(&kv, got[2], t2, 26));
    release(&kv, got, 3);
    /* b resent (all but its last token to compute): 3 whole blocks and 31
     * rows of the fourth, found by its tokens; without them (known = n), 3 */
    hr_pcache_free(pc);
    pc = hr_pcache_new(&kv, 0, ssd, 0);
    assert_int_equal(hr_pcache_lookup(pc, 0, b, 127, 127, 4, got, &n), 3);
    assert_int_equal(n, 96);
    release(&kv, got, 3);
    assert_int_equal(hr_pcache_lookup(pc, 0, b, 127, 128, 4, got, &n), 4);
    assert_int_equal(n, 127);
    assert_true(same_rows(&kv, got[3], bblk[3], 31));
    assert_true(same_rows(&kv, got[1], bblk[1], HR_KV_BLOCK));
    release(&kv, got, 4);
    /* a prompt sharing a's two blocks and nothing of its tail: the tail's
     * file is read once (RAM then holds it), not again on every lookup */
    int32_t c[90];
    memcpy(c, a2, 64 * sizeof *c);
    seq(c + 64, 26, 55555);
    long w0, h0, q0, w1, h1, q1;
    hr_ssd_counts(ssd, &w0, &h0, &q0);
    int cached = hr_pcache_blocks(pc);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(hr_pcache_lookup(pc, 0, c, 89, 90, 4, got, &n), 2);
        assert_int_equal(n, 64);
        release(&kv, got, 2);
    }
    hr_ssd_counts(ssd, &w1, &h1, &q1);
    assert_true(h1 - h0 <= 3); /* blocks 0, 1 and the tail, once */
    assert_true(hr_pcache_blocks(pc) <= cached + 3);
    /* a tail's file is not a full block's: asked for as a tail, a full block
     * misses */
    int32_t tt[HR_KV_BLOCK], blk = hr_kv_alloc(&kv);
    assert_int_equal(hr_ssd_read_tail(ssd, XXH3_64bits_withSeed(b, 128, 0), &kv, blk, tt), 0);
    hr_kv_unref(&kv, blk);
    long w, h, q;
    hr_ssd_counts(ssd, &w, &h, &q);
    assert_int_equal(q, 0);
    hr_pcache_free(pc);
    hr_ssd_close(ssd);
    release(&kv, ablk, 3);
    release(&kv, bblk, 4);
    hr_kv_unref(&kv, t2);
    assert_int_equal(kv.n_free, 16);
    hr_kv_deinit(&kv);
    remove_tree(dir);
}

/* A KV pool of F16 or BF16: hr_kv_store rounds to it (F16 saturates a
 * finite value past its range), hr_kv_copy_rows copies its bytes, and a
 * block written to the SSD tier reads back bit for bit; a pool of another
 * dtype over the same directory misses it (its own subdirectory) without
 * quarantining anything. */
static void test_half_dtypes(void **state) {
    (void)state;
    static const hr_dtype dts[] = {HR_DTYPE_F16, HR_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        char dir[] = "/tmp/hearth_pcache_half_XXXXXX";
        assert_non_null(mkdtemp(dir));
        hr_hparams hp = {.n_layers = LAYERS, .n_kv_heads = HEADS, .head_dim = HD};
        hr_kv kv, kv32;
        assert_int_equal(hr_kv_init(&kv, &hp, dts[d], 4, NULL), 0);
        assert_int_equal(hr_kv_init(&kv32, &hp, HR_DTYPE_F32, 4, NULL), 0);
        assert_int_equal(hr_kv_block_bytes(&hp, dts[d]), hr_kv_block_bytes(&hp, HR_DTYPE_F32) / 2);
        int32_t b0 = hr_kv_alloc(&kv), b1 = hr_kv_alloc(&kv), b2 = hr_kv_alloc(&kv);
        for (int l = 0; l < LAYERS; l++)
            for (int h = 0; h < HEADS; h++)
                for (int s = 0; s < HR_KV_BLOCK; s++) {
                    float k[HD], v[HD];
                    for (int i = 0; i < HD; i++) {
                        k[i] = 0.1f * (float)(l * 1000 + h * 100 + s) + 0.01f * (float)i;
                        v[i] = -k[i];
                    }
                    if (l == 1 && h == 1 && s == 3)
                        k[0] = 1e6f;
                    hr_kv_store(&kv, l, b0, h, s, k, v);
                }
        const uint16_t *k0 = hr_kv_layer_k(&kv, 1);
        size_t at = ((size_t)1 * HR_KV_BLOCK + 3) * HD; /* block b0 = 0, head 1, slot 3 */
        float big = dts[d] == HR_DTYPE_F16 ? hr_f16_to_f32(k0[at]) : hr_bf16_to_f32(k0[at]);
        assert_true(dts[d] == HR_DTYPE_F16 ? big == 65504.0f : big == hr_bf16_to_f32(hr_f32_to_bf16(1e6f)));
        float x = 0.1f * (float)1103 + 0.01f * 1.0f; /* k[1] there, rounded once */
        assert_int_equal(k0[at + 1], dts[d] == HR_DTYPE_F16 ? hr_f32_to_f16(x) : hr_f32_to_bf16(x));
        hr_kv_copy_rows(&kv, b2, b0, 5);
        size_t sb = hr_kv_stride_bytes(&kv);
        assert_int_equal(sb, (size_t)HEADS * HR_KV_BLOCK * HD * 2);
        for (int l = 0; l < LAYERS; l++)
            for (int h = 0; h < HEADS; h++) {
                size_t off = (size_t)h * HR_KV_BLOCK * HD * 2;
                const char *k = hr_kv_layer_k(&kv, l), *v = hr_kv_layer_v(&kv, l);
                assert_memory_equal(k + b2 * sb + off, k + b0 * sb + off, 5 * HD * 2);
                assert_memory_equal(v + b2 * sb + off, v + b0 * sb + off, 5 * HD * 2);
            }
        hr_ssd *ssd;
        int32_t toks[HR_KV_BLOCK];
        seq(toks, HR_KV_BLOCK, 9);
        assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
        assert_int_equal(hr_ssd_queue(ssd, 1234, toks, b0, NULL), 1);
        long written = 0, hits, quarantined;
        for (int i = 0; i < 100000 && written < 1; i++) {
            hr_ssd_counts(ssd, &written, &hits, &quarantined);
            usleep(100);
        }
        assert_int_equal(written, 1);
        assert_int_equal(hr_ssd_read(ssd, 1234, toks, &kv, b1, NULL, NULL), 1);
        for (int l = 0; l < LAYERS; l++) {
            assert_memory_equal((char *)hr_kv_layer_k(&kv, l) + b1 * sb,
                                (char *)hr_kv_layer_k(&kv, l) + b0 * sb, sb);
            assert_memory_equal((char *)hr_kv_layer_v(&kv, l) + b1 * sb,
                                (char *)hr_kv_layer_v(&kv, l) + b0 * sb, sb);
        }
        hr_ssd_close(ssd);
        assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv32, 0, (size_t)1 << 30, NULL), 0);
        int32_t f = hr_kv_alloc(&kv32);
        assert_int_equal(hr_ssd_read(ssd, 1234, toks, &kv32, f, NULL, NULL), 0);
        hr_ssd_counts(ssd, &written, &hits, &quarantined);
        assert_int_equal(quarantined, 0);
        hr_ssd_close(ssd);
        hr_kv_deinit(&kv);
        hr_kv_deinit(&kv32);
        remove_tree(dir);
    }
}

/* A quantized pool (--kv-bits 4 --kv-group-size 32): rows are stored as
 * records, hr_kv_copy_rows copies them, the SSD tier writes and reads them
 * back byte for byte in its own subdirectory (-q4g32), and a file of the
 * previous format version (1) is quarantined, never read. */
static void test_quant_pool(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_pcache_q_XXXXXX";
    assert_non_null(mkdtemp(dir));
    hr_hparams hp = {.n_layers = LAYERS, .n_kv_heads = HEADS, .head_dim = 32};
    hr_kv kv;
    hr_kv_fmt f = {.dtype = HR_DTYPE_AFFINE, .bits = 4, .group = 32};
    assert_int_equal(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 4, NULL), 0);
    size_t rb = 32 * 4 / 8 + 8, sb = hr_kv_stride_bytes(&kv);
    assert_int_equal(kv.row_bytes, rb);
    assert_int_equal(sb, (size_t)HEADS * HR_KV_BLOCK * rb);
    int32_t b0 = hr_kv_alloc(&kv), b1 = hr_kv_alloc(&kv), b2 = hr_kv_alloc(&kv);
    for (int l = 0; l < LAYERS; l++)
        for (int h = 0; h < HEADS; h++)
            for (int s = 0; s < HR_KV_BLOCK; s++) {
                float k[32], v[32];
                for (int i = 0; i < 32; i++) {
                    k[i] = 0.1f * (float)(l * 100 + h * 10 + s) + 0.03f * (float)i;
                    v[i] = -k[i] * (float)(i % 3);
                }
                hr_kv_store(&kv, l, b0, h, s, k, v);
            }
    hr_kv_copy_rows(&kv, b2, b0, 7);
    for (int l = 0; l < LAYERS; l++)
        for (int h = 0; h < HEADS; h++) {
            const char *k = hr_kv_layer_k(&kv, l);
            size_t off = (size_t)h * HR_KV_BLOCK * rb;
            assert_memory_equal(k + b2 * sb + off, k + b0 * sb + off, 7 * rb);
        }
    hr_ssd *ssd;
    int32_t toks[HR_KV_BLOCK];
    seq(toks, HR_KV_BLOCK, 5);
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    assert_int_equal(hr_ssd_queue(ssd, 99, toks, b0, NULL), 1);
    long written = 0, hits, quarantined;
    for (int i = 0; i < 100000 && written < 1; i++) {
        hr_ssd_counts(ssd, &written, &hits, &quarantined);
        usleep(100);
    }
    assert_int_equal(written, 1);
    assert_int_equal(hr_ssd_read(ssd, 99, toks, &kv, b1, NULL, NULL), 1);
    for (int l = 0; l < LAYERS; l++) {
        assert_memory_equal((char *)hr_kv_layer_k(&kv, l) + b1 * sb,
                            (char *)hr_kv_layer_k(&kv, l) + b0 * sb, sb);
        assert_memory_equal((char *)hr_kv_layer_v(&kv, l) + b1 * sb,
                            (char *)hr_kv_layer_v(&kv, l) + b0 * sb, sb);
    }
    /* the file as version 1 wrote it: quarantined with its version named */
    char path[256];
    snprintf(path, sizeof path, "%s/000000000000002a-q4g32/0000000000000063.kv", dir);
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    uint32_t one = 1;
    assert_int_equal(fseek(fp, 8, SEEK_SET), 0);
    assert_int_equal(fwrite(&one, 4, 1, fp), 1);
    fclose(fp);
    assert_int_equal(hr_ssd_read(ssd, 99, toks, &kv, b1, NULL, NULL), 0);
    hr_ssd_counts(ssd, &written, &hits, &quarantined);
    assert_int_equal(quarantined, 1);
    assert_int_not_equal(access(path, F_OK), 0);
    hr_ssd_close(ssd);
    hr_kv_deinit(&kv);
    remove_tree(dir);
}

/* A pool of llama.cpp's cache types with K and V apart (q8_0 / f16): a
 * block goes to the SSD tier and comes back byte for byte, K's and V's
 * strides each their own, in the directory of the pair (-q8_0-vf16); a
 * tier of another pair (q8_0 alike) does not see it. */
static void test_cache_type_pool(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_pcache_ct_XXXXXX";
    assert_non_null(mkdtemp(dir));
    hr_hparams hp = {.n_layers = LAYERS, .n_kv_heads = HEADS, .head_dim = 32};
    hr_kv kv, kv2;
    hr_kv_fmt f = {.dtype = HR_DTYPE_Q8_0, .vown = true, .vdtype = HR_DTYPE_F16};
    assert_int_equal(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 4, NULL), 0);
    size_t sb = hr_kv_stride_bytes(&kv), vb = hr_kv_vstride_bytes(&kv);
    assert_int_equal(sb, (size_t)HEADS * HR_KV_BLOCK * 34);
    assert_int_equal(vb, (size_t)HEADS * HR_KV_BLOCK * 64);
    int32_t b0 = hr_kv_alloc(&kv), b1 = hr_kv_alloc(&kv);
    for (int l = 0; l < LAYERS; l++)
        for (int h = 0; h < HEADS; h++)
            for (int s = 0; s < HR_KV_BLOCK; s++) {
                float k[32], v[32];
                for (int i = 0; i < 32; i++) {
                    k[i] = 0.1f * (float)(l * 100 + h * 10 + s) + 0.03f * (float)i;
                    v[i] = -k[i] * (float)(i % 3);
                }
                hr_kv_store(&kv, l, b0, h, s, k, v);
            }
    hr_ssd *ssd;
    int32_t toks[HR_KV_BLOCK];
    seq(toks, HR_KV_BLOCK, 6);
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    assert_int_equal(hr_ssd_queue(ssd, 77, toks, b0, NULL), 1);
    long written = 0, hits, quarantined;
    for (int i = 0; i < 100000 && written < 1; i++) {
        hr_ssd_counts(ssd, &written, &hits, &quarantined);
        usleep(100);
    }
    assert_int_equal(written, 1);
    assert_int_equal(hr_ssd_read(ssd, 77, toks, &kv, b1, NULL, NULL), 1);
    for (int l = 0; l < LAYERS; l++) {
        assert_memory_equal((char *)hr_kv_layer_k(&kv, l) + b1 * sb,
                            (char *)hr_kv_layer_k(&kv, l) + b0 * sb, sb);
        assert_memory_equal((char *)hr_kv_layer_v(&kv, l) + b1 * vb,
                            (char *)hr_kv_layer_v(&kv, l) + b0 * vb, vb);
    }
    char path[256];
    snprintf(path, sizeof path, "%s/000000000000002a-q8_0-vf16/000000000000004d.kv", dir);
    assert_int_equal(access(path, F_OK), 0);
    hr_ssd_close(ssd);
    f.vown = false; /* q8_0 alike: another directory, nothing read */
    assert_int_equal(hr_kv_init_fmt(&kv2, hr_backend_cpu(), &hp, &f, 2, NULL), 0);
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv2, 0, (size_t)1 << 30, NULL), 0);
    assert_int_equal(hr_ssd_read(ssd, 77, toks, &kv2, hr_kv_alloc(&kv2), NULL, NULL), 0);
    hr_ssd_counts(ssd, &written, &hits, &quarantined);
    assert_int_equal(quarantined, 0);
    hr_ssd_close(ssd);
    hr_kv_deinit(&kv2);
    hr_kv_deinit(&kv);
    remove_tree(dir);
}

/* A TurboQuant pool (K 3.5 bits, V 2.5: rows of their own sizes): a block
 * goes to the SSD tier and comes back byte for byte, in the directory of
 * the rates (-turbo7-5); a tier at other rates does not see it, and the
 * file copied into that tier's directory is quarantined (its header names
 * format 8 with other rates), never read as that tier's blocks. */
static void test_turbo_pool(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_pcache_tq_XXXXXX";
    assert_non_null(mkdtemp(dir));
    hr_hparams hp = {.n_layers = LAYERS, .n_kv_heads = HEADS, .n_heads = HEADS, .head_dim = 64};
    hr_kv kv, kv2;
    hr_kv_fmt f = {.dtype = HR_DTYPE_TURBO, .bits = 7, .vbits = 5};
    assert_int_equal(hr_kv_init_fmt(&kv, hr_backend_cpu(), &hp, &f, 4, NULL), 0);
    size_t sb = hr_kv_stride_bytes(&kv), vb = hr_kv_vstride_bytes(&kv);
    assert_int_equal(sb, (size_t)HEADS * HR_KV_BLOCK * 32);
    assert_int_equal(vb, (size_t)HEADS * HR_KV_BLOCK * 24);
    int32_t b0 = hr_kv_alloc(&kv), b1 = hr_kv_alloc(&kv);
    for (int l = 0; l < LAYERS; l++)
        for (int h = 0; h < HEADS; h++)
            for (int s = 0; s < HR_KV_BLOCK; s++) {
                float k[64], v[64];
                for (int i = 0; i < 64; i++) {
                    k[i] = 0.1f * (float)(l * 100 + h * 10 + s) + 0.03f * (float)i;
                    v[i] = -k[i] * (float)(i % 3);
                }
                hr_kv_store(&kv, l, b0, h, s, k, v);
            }
    hr_ssd *ssd;
    int32_t toks[HR_KV_BLOCK];
    seq(toks, HR_KV_BLOCK, 8);
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    assert_int_equal(hr_ssd_queue(ssd, 88, toks, b0, NULL), 1);
    long written = 0, hits, quarantined;
    for (int i = 0; i < 100000 && written < 1; i++) {
        hr_ssd_counts(ssd, &written, &hits, &quarantined);
        usleep(100);
    }
    assert_int_equal(written, 1);
    assert_int_equal(hr_ssd_read(ssd, 88, toks, &kv, b1, NULL, NULL), 1);
    for (int l = 0; l < LAYERS; l++) {
        assert_memory_equal((char *)hr_kv_layer_k(&kv, l) + b1 * sb,
                            (char *)hr_kv_layer_k(&kv, l) + b0 * sb, sb);
        assert_memory_equal((char *)hr_kv_layer_v(&kv, l) + b1 * vb,
                            (char *)hr_kv_layer_v(&kv, l) + b0 * vb, vb);
    }
    char path[256], other[256], cmd[700];
    snprintf(path, sizeof path, "%s/000000000000002a-turbo7-5/0000000000000058.kv", dir);
    assert_int_equal(access(path, F_OK), 0);
    hr_ssd_close(ssd);
    f.vbits = 7; /* 3.5 bits alike: another directory, nothing read */
    assert_int_equal(hr_kv_init_fmt(&kv2, hr_backend_cpu(), &hp, &f, 2, NULL), 0);
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv2, 0, (size_t)1 << 30, NULL), 0);
    assert_int_equal(hr_ssd_read(ssd, 88, toks, &kv2, hr_kv_alloc(&kv2), NULL, NULL), 0);
    hr_ssd_counts(ssd, &written, &hits, &quarantined);
    assert_int_equal(quarantined, 0);
    snprintf(other, sizeof other, "%s/000000000000002a-turbo7-7/0000000000000058.kv", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", path, other);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(hr_ssd_read(ssd, 88, toks, &kv2, hr_kv_alloc(&kv2), NULL, NULL), 0);
    hr_ssd_counts(ssd, &written, &hits, &quarantined);
    assert_int_equal(quarantined, 1);
    hr_ssd_close(ssd);
    hr_kv_deinit(&kv2);
    hr_kv_deinit(&kv);
    remove_tree(dir);
}

/* ---- SSD tier faults ----------------------------------------------------------------- */

static hr_ssd_state wait_ssd(hr_ssd *ssd, long written, long errors) {
    hr_ssd_state st;
    long w = 0, h, q;
    for (int i = 0; i < 20000; i++) {
        hr_ssd_counts(ssd, &w, &h, &q);
        hr_ssd_status(ssd, &st);
        if (w >= written && st.write_errors >= errors)
            break;
        usleep(100);
    }
    assert_int_equal(w, written);
    assert_int_equal(st.write_errors, errors);
    return st;
}

/* No "*.tmp.*" file in dir: nothing half-written stays. */
static void no_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp."))
            fail_msg("half-written file left: %s/%s", dir, e->d_name);
    closedir(d);
}

static void test_ssd_faults(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_pcache_fault_XXXXXX", sub[128], path[256];
    assert_non_null(mkdtemp(dir));
    hr_kv kv;
    pool(&kv, 4);
    int32_t b0 = hr_kv_alloc(&kv), b1 = hr_kv_alloc(&kv);
    fill(&kv, b0, 1.5f);
    int32_t toks[HR_KV_BLOCK];
    seq(toks, HR_KV_BLOCK, 3);
    hr_ssd *ssd;
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, 0, (size_t)1 << 30, NULL), 0);
    hr_ssd_set_backoff(ssd, 0.3, 0.6);
    snprintf(sub, sizeof sub, "%s/000000000000002a", dir);

    /* an I/O error on write (HEARTH_FAULT=write:1): counted, named, paused,
     * no temp file left; then the tier comes back by itself */
    hr_fault_set(HR_FAULT_WRITE, 1);
    assert_int_equal(hr_ssd_queue(ssd, 1, toks, b0, NULL), 1);
    hr_ssd_state st = wait_ssd(ssd, 0, 1);
    hr_fault_set(HR_FAULT_WRITE, 0);
    assert_int_equal(st.last_errno, EIO);
    assert_true(st.paused);
    no_temp_files(sub);
    assert_int_equal(hr_ssd_queue(ssd, 1, toks, b0, NULL), -1); /* paused */
    usleep(350 * 1000);
    assert_int_equal(hr_ssd_queue(ssd, 1, toks, b0, NULL), 1);
    st = wait_ssd(ssd, 1, 1);
    assert_false(st.paused);

    /* a full disk mid-file (a file size limit: the first write is short,
     * the next fails): the warning names the real error, not a stale one */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 100;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    assert_int_equal(hr_ssd_queue(ssd, 2, toks, b0, NULL), 1);
    st = wait_ssd(ssd, 1, 2);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(st.last_errno, EFBIG);
    no_temp_files(sub);
    snprintf(path, sizeof path, "%s/0000000000000002.kv", sub);
    assert_int_not_equal(access(path, F_OK), 0);

    /* a read-only directory (not for root, who writes anyway) */
    usleep(650 * 1000);
    if (geteuid() != 0) {
        assert_int_equal(chmod(sub, 0555), 0);
        assert_int_equal(hr_ssd_queue(ssd, 3, toks, b0, NULL), 1);
        st = wait_ssd(ssd, 1, 3);
        assert_int_equal(st.last_errno, EACCES);
        assert_int_equal(chmod(sub, 0755), 0);
        usleep(650 * 1000);
    }
    long errs = st.write_errors;

    /* the block written after the faults reads back right */
    assert_int_equal(hr_ssd_read(ssd, 1, toks, &kv, b1, NULL, NULL), 1);
    assert_true(same_rows(&kv, b0, b1, HR_KV_BLOCK));

    /* truncated underneath: a miss (quarantined), never SIGBUS */
    snprintf(path, sizeof path, "%s/0000000000000001.kv", sub);
    assert_int_equal(truncate(path, 100), 0);
    long w, h, q;
    assert_int_equal(hr_ssd_read(ssd, 1, toks, &kv, b1, NULL, NULL), 0);
    hr_ssd_counts(ssd, &w, &h, &q);
    assert_int_equal(q, 1);

    /* a FIFO under a cache file's name: a miss at once, not a blocked engine */
    snprintf(path, sizeof path, "%s/0000000000000004.kv", sub);
    assert_int_equal(mkfifo(path, 0644), 0);
    alarm(10); /* a hang fails the test instead of stalling CI */
    uint64_t ahead[] = {4, 99, 1}; /* the FIFO, an absent file, a quarantined one */
    hr_ssd_prefetch(ssd, ahead, 3);
    assert_int_equal(hr_ssd_read(ssd, 4, toks, &kv, b1, NULL, NULL), 0);
    alarm(0);
    hr_ssd_counts(ssd, &w, &h, &q);
    assert_int_equal(q, 2);
    hr_ssd_status(ssd, &st);
    assert_int_equal(st.write_errors, errs);

    hr_ssd_close(ssd);
    hr_kv_deinit(&kv);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", dir, dir);
    assert_int_equal(system(cmd), 0);
}

/* Hybrid models: states beside full blocks. A lookup reuses whole blocks up
 * to the last one holding a state, never a partial copy; the SSD tier
 * writes a block with its state (format version 3) and reads both back
 * (in a new cache), a block indexed without a state takes one later, and a
 * version-2 file is quarantined, never read. */
static void test_states(void **state) {
    (void)state;
    char dir[] = "/tmp/hearth_pcache_st_XXXXXX";
    assert_non_null(mkdtemp(dir));
    enum { SB = 48 };
    hr_kv kv;
    pool(&kv, 16);
    hr_ssd *ssd;
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, SB, (size_t)1 << 30, NULL), 0);
    hr_pcache *pc = hr_pcache_new(&kv, 0, ssd, 0);
    hr_pcache_keep_states(pc, SB, 1 << 20);
    int32_t t[100], blocks[4], got[4];
    seq(t, 100, 3);
    filled(&kv, blocks, 4);
    hr_pcache_state st[2] = {{32, malloc(SB)}, {96, malloc(SB)}};
    memset(st[0].data, 0x11, SB);
    memset(st[1].data, 0x22, SB);
    hr_pcache_insert_states(pc, 0, t, 100, blocks, st, 2);
    assert_null(st[0].data);
    assert_null(st[1].data);
    release(&kv, blocks, 4);
    int n;
    const void *sp;
    /* 80 tokens: blocks 0, 1 are whole, but only block 0 has a state */
    assert_int_equal(hr_pcache_lookup_state(pc, 0, t, 80, 4, got, &n, &sp), 1);
    assert_int_equal(n, 32);
    assert_int_equal(((const unsigned char *)sp)[SB - 1], 0x11);
    release(&kv, got, 1);
    assert_int_equal(hr_pcache_lookup_state(pc, 0, t, 99, 4, got, &n, &sp), 3);
    assert_int_equal(n, 96);
    assert_int_equal(((const unsigned char *)sp)[0], 0x22);
    release(&kv, got, 3);
    assert_int_equal(hr_pcache_lookup_state(pc, 0, t, 31, 4, got, &n, &sp), 0);
    assert_null(sp);
    /* a state given later to a block already indexed (and written without one) */
    for (int i = 0; i < 2000; i++) { /* the first writes done */
        hr_pcache_poll(pc, 0);
        usleep(500);
    }
    int32_t again[4];
    for (int b = 0; b < 4; b++)
        again[b] = hr_kv_alloc(&kv);
    hr_pcache_state s2 = {64, malloc(SB)};
    memset(s2.data, 0x33, SB);
    hr_pcache_insert_states(pc, 0, t, 100, again, &s2, 1);
    release(&kv, again, 4);
    assert_int_equal(hr_pcache_lookup_state(pc, 0, t, 70, 4, got, &n, &sp), 2);
    assert_int_equal(((const unsigned char *)sp)[5], 0x33);
    release(&kv, got, 2);
    hr_pcache_free(pc);
    hr_ssd_close(ssd);

    /* from disk: blocks with their states */
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, SB, (size_t)1 << 30, NULL), 0);
    pc = hr_pcache_new(&kv, 0, ssd, 0);
    hr_pcache_keep_states(pc, SB, 1 << 20);
    assert_int_equal(hr_pcache_lookup_state(pc, 0, t, 99, 4, got, &n, &sp), 3);
    assert_int_equal(n, 96);
    assert_int_equal(((const unsigned char *)sp)[SB - 1], 0x22);
    release(&kv, got, 3);
    hr_pcache_free(pc);
    /* corrupt block 1's state (its last byte), make block 0's file version 2 */
    long written, hits, quarantined;
    hr_ssd_counts(ssd, &written, &hits, &quarantined);
    assert_int_equal(quarantined, 0);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "ls %s/000000000000002a/*.kv | wc -l", dir);
    FILE *ls = popen(cmd, "r");
    int files = 0;
    assert_int_equal(fscanf(ls, "%d", &files), 1);
    pclose(ls);
    assert_int_equal(files, 3);
    hr_ssd_close(ssd);
    snprintf(cmd, sizeof cmd, "for f in %s/000000000000002a/*.kv; do "
             "printf '\\002' | dd of=$f bs=1 seek=8 conv=notrunc 2>/dev/null; done", dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(hr_ssd_open(&ssd, dir, 42, 7, &kv, SB, (size_t)1 << 30, NULL), 0);
    pc = hr_pcache_new(&kv, 0, ssd, 0);
    hr_pcache_keep_states(pc, SB, 1 << 20);
    assert_int_equal(hr_pcache_lookup_state(pc, 0, t, 99, 4, got, &n, &sp), 0);
    hr_ssd_counts(ssd, &written, &hits, &quarantined);
    assert_int_equal(quarantined, 1); /* the first block's file; the chain stops there */
    hr_pcache_free(pc);
    hr_ssd_close(ssd);
    hr_kv_deinit(&kv);
    remove_tree(dir);
}

/* The states' RAM bound: with room for two, a third sequence's state makes
 * the least recently used one's go (its block stays, without a state). */
static void test_state_bound(void **state) {
    (void)state;
    enum { SB = 64 };
    hr_kv kv;
    pool(&kv, 8);
    hr_pcache *pc = hr_pcache_new(&kv, 0, NULL, 0);
    hr_pcache_keep_states(pc, SB, 2 * SB);
    int32_t t[3][40], got[2];
    for (int i = 0; i < 3; i++) {
        seq(t[i], 40, 1000 * (i + 1));
        int32_t blocks[2] = {hr_kv_alloc(&kv), hr_kv_alloc(&kv)};
        hr_pcache_state st = {32, calloc(1, SB)};
        hr_pcache_insert_states(pc, 0, t[i], 40, blocks, &st, 1);
        release(&kv, blocks, 2);
    }
    int n;
    const void *sp;
    assert_int_equal(hr_pcache_lookup_state(pc, 0, t[0], 39, 2, got, &n, &sp), 0);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(hr_pcache_lookup_state(pc, 0, t[i], 39, 2, got, &n, &sp), 1);
        assert_non_null(sp);
        release(&kv, got, 1);
    }
    assert_int_equal(hr_pcache_blocks(pc), 6); /* every block is still indexed */
    hr_pcache_free(pc);
    hr_kv_deinit(&kv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_pool),
        cmocka_unit_test(test_cache_type_pool),
        cmocka_unit_test(test_turbo_pool),
        cmocka_unit_test(test_states),
        cmocka_unit_test(test_state_bound),
        cmocka_unit_test(test_partial_copy),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_tails),
        cmocka_unit_test(test_evict_tail),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_ssd_backlog),
        cmocka_unit_test(test_ssd_restart_run),
        cmocka_unit_test(test_ssd_direct),
        cmocka_unit_test(test_ssd_upgrade),
        cmocka_unit_test(test_ssd_overlap),
        cmocka_unit_test(test_ssd_restart_tail),
        cmocka_unit_test(test_half_dtypes),
        cmocka_unit_test(test_ssd_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
