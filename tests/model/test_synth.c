/* hearth synth straight into a quantized format (synth --gguf TYPE, synth
 * -q): the file holds what hearth convert writes from the bf16 model of the
 * same shape and seed (every tensor's bytes equal), loads and gives the
 * same logits; and writing it one tensor at a time keeps the peak memory of
 * synth far below the model's size. Runs the built binary (HEARTH_BIN). */
#include "core/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "model/convert.h"
#include "model/model.h"
#include "support/runner.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ASan's shadow and quarantine of freed memory (256 MB) are in the RSS */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

static const char *g_bin;
static char g_tmp[] = "/tmp/hearth-synth-XXXXXX";

/* Runs hearth with args (NULL-terminated); its exit status, its peak RSS
 * in KiB into *rss_kb when not NULL. */
static int hearth(long *rss_kb, ...) {
    const char *argv[32] = {g_bin};
    int n = 1;
    va_list ap;
    va_start(ap, rss_kb);
    for (const char *a; n < 31 && (a = va_arg(ap, const char *));)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr))
            _exit(126);
        execv(g_bin, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &st, 0, &ru) != pid)
        return -1;
    if (rss_kb)
        *rss_kb = ru.ru_maxrss;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_tmp, name);
}

/* The greedy logits of both models over the same tokens: bit-identical. */
static void same_logits(const char *a, const char *b) {
    hr_error err = {0};
    hr_model *ma = NULL, *mb = NULL;
    if (hr_model_open(&ma, a, &err) || hr_model_open(&mb, b, &err))
        fail_msg("open: %s", err.msg);
    hr_runner_opts ro = {.n_threads = 1, .n_ctx = 16};
    hr_runner *ra = NULL, *rb = NULL;
    assert_int_equal(hr_runner_new(&ra, ma, &ro, &err), 0);
    assert_int_equal(hr_runner_new(&rb, mb, &ro, &err), 0);
    int V = ma->hp.n_vocab;
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    int32_t tok[6] = {1, 77, 300, 5, 511, 42};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(hr_runner_eval(ra, &tok[i], 1, la, &err), 0);
        assert_int_equal(hr_runner_eval(rb, &tok[i], 1, lb, &err), 0);
        if (memcmp(la, lb, (size_t)V * sizeof *la))
            fail_msg("%s vs %s: token %d's logits differ", a, b, i);
    }
    free(la);
    free(lb);
    hr_runner_free(ra);
    hr_runner_free(rb);
    hr_model_free(ma);
    hr_model_free(mb);
}

static void test_gguf_direct(void **state) {
    (void)state;
    char bf16[4200], direct[4200], conv[4200];
    path(bf16, sizeof bf16, "bf16");
    path(direct, sizeof direct, "direct.gguf");
    path(conv, sizeof conv, "conv.gguf");
    assert_int_equal(hearth(NULL, "synth", "--shape", "tiny-qwen3-moe", "--seed", "7", "--out",
                            bf16, NULL), 0);
    assert_int_equal(hearth(NULL, "synth", "--shape", "tiny-qwen3-moe", "--seed", "7",
                            "--gguf", "Q4_K", "--out", direct, NULL), 0);
    hr_error err = {0};
    hr_convert_opts co = {.src = bf16, .out = conv, .bits = 4, .group = 64,
                          .dtype = HR_DTYPE_COUNT, .gguf = HR_DTYPE_Q4_K};
    if (hr_convert(&co, &err))
        fail_msg("convert: %s", err.msg);
    hr_gguf *a = NULL, *b = NULL;
    assert_int_equal(hr_gguf_open(&a, direct, &err), 0);
    assert_int_equal(hr_gguf_open(&b, conv, &err), 0);
    assert_int_equal(hr_gguf_n_tensors(a), hr_gguf_n_tensors(b));
    int n_q4k = 0;
    for (int64_t i = 0; i < hr_gguf_n_tensors(a); i++) {
        const hr_gguf_tensor *x = hr_gguf_tensor_at(a, i), *y = hr_gguf_tensor_at(b, i);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->size, y->size);
        if (memcmp(x->data, y->data, x->size))
            fail_msg("tensor %s: the direct file's bytes differ from the converter's", x->name);
        n_q4k += x->type == 12; /* GGML_TYPE_Q4_K */
    }
    /* attention, router-less matrices and the stacked experts in Q4_K */
    assert_true(n_q4k >= 2 * 7 + 2);
    printf("synth --gguf Q4_K: %lld tensors (%d Q4_K) equal to convert --gguf of the bf16 synth\n",
           (long long)hr_gguf_n_tensors(a), n_q4k);
    hr_gguf_close(a);
    hr_gguf_close(b);
    same_logits(direct, conv);
    /* a second run: the same file (each tensor from its own stream) */
    char again[4200];
    path(again, sizeof again, "again.gguf");
    assert_int_equal(hearth(NULL, "synth", "--shape", "tiny-qwen3-moe", "--seed", "7",
                            "--gguf", "Q4_K", "--out", again, NULL), 0);
    same_logits(direct, again);
    /* errors: a type that is none, both formats, an existing output */
    assert_int_not_equal(hearth(NULL, "synth", "--shape", "tiny-qwen3-moe", "--gguf", "Q9_Z",
                                "--out", again, NULL), 0);
    assert_int_not_equal(hearth(NULL, "synth", "--shape", "tiny-qwen3-moe", "--gguf", "Q4_K",
                                "-q", "--out", again, NULL), 0);
    assert_int_not_equal(hearth(NULL, "synth", "--shape", "tiny-qwen3-moe", "--gguf", "Q4_K",
                                "--out", again, NULL), 0);
}

/* --gguf Q4_K_M: llama.cpp's mix, output.weight and the attn_v / ffn_down
 * matrices of the layers use_more_bits picks in Q6_K, the other matrices
 * Q4_K; the file loads and runs */
static void test_gguf_km(void **state) {
    (void)state;
    char km[4200];
    path(km, sizeof km, "km.gguf");
    assert_int_equal(hearth(NULL, "synth", "--shape", "tiny-qwen3-moe", "--seed", "7", "--gguf",
                            "Q4_K_M", "--out", km, NULL), 0);
    hr_error err = {0};
    hr_gguf *g = NULL;
    assert_int_equal(hr_gguf_open(&g, km, &err), 0);
    int n_layers = 0;
    for (int64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
        int il;
        if (sscanf(hr_gguf_tensor_at(g, i)->name, "blk.%d.", &il) == 1 && il + 1 > n_layers)
            n_layers = il + 1;
    }
    assert_true(n_layers >= 2);
    int n_q6k = 0, n_q4k = 0;
    for (int64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
        const hr_gguf_tensor *x = hr_gguf_tensor_at(g, i);
        int il = -1, n8 = n_layers / 8;
        sscanf(x->name, "blk.%d.", &il);
        bool more = il >= 0 && (il < n8 || il >= 7 * n_layers / 8 || (il - n8) % 3 == 2);
        bool q6 = !strcmp(x->name, "output.weight") ||
                  (more && (strstr(x->name, ".attn_v.") || strstr(x->name, ".ffn_down")));
        if (q6)
            assert_int_equal(x->type, 14); /* GGML_TYPE_Q6_K */
        else
            assert_int_not_equal(x->type, 14);
        n_q6k += x->type == 14;
        n_q4k += x->type == 12;
    }
    assert_true(n_q6k >= 2 && n_q4k >= 10); /* tiny-qwen3-moe: 3 and 13 */
    printf("synth --gguf Q4_K_M: %d Q6_K and %d Q4_K tensors over %d layers\n", n_q6k, n_q4k,
           n_layers);
    hr_gguf_close(g);
    same_logits(km, km);
    /* the mix is Q4_K_M's and Q5_K_M's only */
    path(km, sizeof km, "km8.gguf");
    assert_int_not_equal(hearth(NULL, "synth", "--shape", "tiny-qwen3-moe", "--gguf", "Q8_0_M",
                                "--out", km, NULL), 0);
}

static void test_mlx_direct(void **state) {
    (void)state;
    char bf16[4200], direct[4200], conv[4200], p[4300];
    path(bf16, sizeof bf16, "bf16-mlx");
    path(direct, sizeof direct, "mlx-direct");
    path(conv, sizeof conv, "mlx-conv");
    assert_int_equal(hearth(NULL, "synth", "--shape", "tiny-qwen3-moe", "--seed", "9", "--out",
                            bf16, NULL), 0);
    assert_int_equal(hearth(NULL, "synth", "--shape", "tiny-qwen3-moe", "--seed", "9",
                            "--q-bits", "4", "--out", direct, NULL), 0);
    hr_error err = {0};
    hr_convert_opts co = {.src = bf16, .out = conv, .quantize = true, .bits = 4, .group = 64,
                          .dtype = HR_DTYPE_COUNT, .gguf = HR_DTYPE_COUNT};
    if (hr_convert(&co, &err))
        fail_msg("convert: %s", err.msg);
    hr_st_file *a = NULL, *b = NULL;
    snprintf(p, sizeof p, "%s/model.safetensors", direct);
    assert_int_equal(hr_st_open(&a, p, &err), 0);
    snprintf(p, sizeof p, "%s/model.safetensors", conv);
    assert_int_equal(hr_st_open(&b, p, &err), 0);
    assert_int_equal(hr_st_count(a), hr_st_count(b));
    int n_u32 = 0;
    for (size_t i = 0; i < hr_st_count(a); i++) {
        const hr_tensor *x = hr_st_tensor(a, i), *y = hr_st_find(b, x->name);
        assert_non_null(y);
        assert_int_equal(x->dtype, y->dtype);
        assert_int_equal(x->nbytes, y->nbytes);
        if (memcmp(x->data, y->data, x->nbytes))
            fail_msg("tensor %s: the direct directory's bytes differ from the converter's",
                     x->name);
        n_u32 += x->dtype == HR_DTYPE_U32;
    }
    assert_true(n_u32 > 8 * 3 * 2); /* the experts' packed 4-bit weights */
    hr_st_close(a);
    hr_st_close(b);
    same_logits(direct, conv);
    printf("synth --q-bits 4: every tensor equal to convert -q of the bf16 synth\n");
}

/* A 57M-weight model (32 MB at Q4_K, 112 MB in bf16) written with synth's
 * peak RSS a fraction of either: one tensor in memory at a time (about
 * 15 MB today, half of it the binary itself). */
static void test_bounded_memory(void **state) {
    (void)state;
    char out[4200];
    path(out, sizeof out, "small.gguf");
    long rss = 0;
    assert_int_equal(hearth(&rss, "synth", "--shape", "small-qwen3-moe", "--gguf", "Q4_K",
                            "--out", out, NULL), 0);
    struct stat st;
    assert_int_equal(stat(out, &st), 0);
    long file_kb = (long)(st.st_size / 1024), bf16_kb = 57185280L * 2 / 1024;
    printf("synth small-qwen3-moe --gguf Q4_K: peak RSS %ld KiB, file %ld KiB, the model in "
           "bf16 %ld KiB\n", rss, file_kb, bf16_kb);
    assert_true(file_kb > 30 * 1024);
#ifdef SANITIZED
    printf("(built with ASan: its shadow and quarantine fill the RSS; the bound is not checked)\n");
#else
    assert_true(rss < file_kb * 4 / 5 && rss < bf16_kb / 5);
#endif
    unlink(out);
}

static int cleanup(void **state) {
    (void)state;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    return system(cmd) != 0;
}

int main(void) {
    g_bin = getenv("HEARTH_BIN");
    if (!g_bin || access(g_bin, X_OK)) {
        fprintf(stderr, "HEARTH_BIN is not set to the hearth binary\n");
        return 1;
    }
    if (!mkdtemp(g_tmp))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_direct),
        cmocka_unit_test(test_gguf_km),
        cmocka_unit_test(test_mlx_direct),
        cmocka_unit_test(test_bounded_memory),
    };
    return cmocka_run_group_tests(tests, NULL, cleanup);
}
