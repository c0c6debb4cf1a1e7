/* src/io/gguf: a GGUF built in memory, every accessor, and every error
 * (including every truncation of a valid file). */
#include "io/gguf.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct w {
    unsigned char b[4096];
    size_t n;
} w;

static void put(w *x, const void *p, size_t n) {
    memcpy(x->b + x->n, p, n);
    x->n += n;
}
static void u32(w *x, uint32_t v) { put(x, &v, 4); }
static void u64(w *x, uint64_t v) { put(x, &v, 8); }
static void str(w *x, const char *s) {
    u64(x, strlen(s));
    put(x, s, strlen(s));
}

enum { F_NONE = 0, F_DUPKEY = 1, F_BADTYPE = 2, F_MISALIGN = 4, F_OUTSIDE = 8, F_DIMS = 16,
       F_ARRTYPE = 32 };

/* 5 keys (string, u32, f32, bool, string array, i32 array) + 2 F32 tensors */
static size_t build(w *x, int flags) {
    x->n = 0;
    put(x, "GGUF", 4);
    u32(x, 3);
    u64(x, 2);
    u64(x, 6);
    str(x, "general.architecture");
    u32(x, HR_GGUF_STRING);
    str(x, "llama");
    str(x, flags & F_DUPKEY ? "general.architecture" : "llama.block_count");
    u32(x, HR_GGUF_UINT32);
    u32(x, 16);
    str(x, "llama.eps");
    u32(x, HR_GGUF_FLOAT32);
    float f = 1e-5f;
    put(x, &f, 4);
    str(x, "tokenizer.ggml.add_bos_token");
    u32(x, HR_GGUF_BOOL);
    put(x, "\x01", 1);
    str(x, "tokenizer.ggml.tokens");
    u32(x, HR_GGUF_ARRAY);
    u32(x, HR_GGUF_STRING);
    u64(x, 3);
    str(x, "a");
    str(x, "");
    str(x, "<s>");
    str(x, "ids");
    u32(x, HR_GGUF_ARRAY);
    u32(x, flags & F_ARRTYPE ? 99 : HR_GGUF_INT32);
    u64(x, 2);
    u32(x, (uint32_t)-5);
    u32(x, 7);
    /* tensors: w (4x2 F32) at 0, b (4 F32) at 32 */
    str(x, "w");
    u32(x, flags & F_DIMS ? 5 : 2);
    u64(x, 4);
    u64(x, 2);
    u32(x, flags & F_BADTYPE ? 31 : 0);
    u64(x, 0);
    str(x, "b");
    u32(x, 1);
    u64(x, 4);
    u32(x, 0);
    u64(x, flags & F_MISALIGN ? 33 : flags & F_OUTSIDE ? 64 : 32);
    while (x->n % 32)
        put(x, "\0", 1);
    size_t data = x->n;
    for (int i = 0; i < 12; i++) {
        float v = (float)i;
        put(x, &v, 4);
    }
    x->n = data + 48;
    return data;
}

static void test_valid(void **state) {
    (void)state;
    w x;
    size_t data = build(&x, F_NONE);
    hr_gguf *g;
    hr_error err;
    assert_int_equal(hr_gguf_open_mem(&g, x.b, x.n, "t.gguf", &err), 0);
    assert_int_equal(hr_gguf_version(g), 3);
    assert_int_equal(hr_gguf_n_kv(g), 6);
    const char *s;
    size_t l;
    assert_int_equal(hr_gguf_key_str(g, "general.architecture", &s, &l), 0);
    assert_int_equal(l, 5);
    assert_memory_equal(s, "llama", 5);
    int64_t v;
    assert_int_equal(hr_gguf_key_int(g, "llama.block_count", &v), 0);
    assert_int_equal(v, 16);
    assert_int_equal(hr_gguf_key_int(g, "nope", &v), HR_ENOTFOUND);
    assert_int_equal(hr_gguf_key_int(g, "general.architecture", &v), HR_EFORMAT);
    double d;
    assert_int_equal(hr_gguf_get_float(g, hr_gguf_find(g, "llama.eps"), &d), 0);
    assert_true(d > 0.9e-5 && d < 1.1e-5);
    int b;
    assert_int_equal(hr_gguf_get_bool(g, hr_gguf_find(g, "tokenizer.ggml.add_bos_token"), &b), 0);
    assert_true(b);
    int64_t ti = hr_gguf_find(g, "tokenizer.ggml.tokens");
    hr_gguf_type et;
    uint64_t n;
    assert_int_equal(hr_gguf_get_arr(g, ti, &et, &n), 0);
    assert_int_equal(et, HR_GGUF_STRING);
    assert_int_equal(n, 3);
    assert_int_equal(hr_gguf_arr_str(g, ti, 2, &s, &l), 0);
    assert_memory_equal(s, "<s>", 3);
    assert_int_equal(hr_gguf_arr_str(g, ti, 1, &s, &l), 0);
    assert_int_equal(l, 0);
    assert_int_equal(hr_gguf_arr_str(g, ti, 3, &s, &l), HR_ERANGE);
    assert_int_equal(hr_gguf_arr_int(g, ti, 0, &v), HR_EFORMAT);
    int64_t ii = hr_gguf_find(g, "ids");
    assert_int_equal(hr_gguf_arr_int(g, ii, 0, &v), 0);
    assert_int_equal(v, -5);
    assert_int_equal(hr_gguf_arr_int(g, ii, 1, &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(hr_gguf_n_tensors(g), 2);
    const hr_gguf_tensor *t = hr_gguf_find_tensor(g, "b");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 1);
    assert_int_equal(t->ne[0], 4);
    assert_int_equal(t->ne[1], 1);
    assert_int_equal(t->size, 16);
    assert_ptr_equal(t->data, x.b + data + 32);
    float f0;
    memcpy(&f0, hr_gguf_tensor_at(g, 0)->data, 4);
    assert_true(f0 == 0.0f);
    assert_null(hr_gguf_find_tensor(g, "zz"));
    assert_null(hr_gguf_tensor_at(g, 2));
    assert_string_equal(hr_gguf_type_name(12), "Q4_K");
    assert_null(hr_gguf_type_name(31));
    hr_gguf_close(g);
    hr_gguf_close(NULL);
}

static void expect_err(int flags, const char *needle) {
    w x;
    build(&x, flags);
    hr_gguf *g = (hr_gguf *)1;
    hr_error err;
    int rc = hr_gguf_open_mem(&g, x.b, x.n, "bad.gguf", &err);
    assert_true(rc < 0);
    assert_null(g);
    assert_non_null(strstr(err.msg, "bad.gguf"));
    if (!strstr(err.msg, needle))
        fail_msg("'%s' not in '%s'", needle, err.msg);
}

static void test_errors(void **state) {
    (void)state;
    expect_err(F_DUPKEY, "duplicate key");
    expect_err(F_BADTYPE, "ggml type 31");
    expect_err(F_MISALIGN, "not aligned");
    expect_err(F_OUTSIDE, "outside the file");
    expect_err(F_DIMS, "dims");
    expect_err(F_ARRTYPE, "bad array element type");
    w x;
    build(&x, F_NONE);
    hr_gguf *g;
    hr_error err;
    /* every truncation fails cleanly */
    for (size_t n = 0; n + 48 < x.n; n++) {
        int rc = hr_gguf_open_mem(&g, x.b, n, "cut.gguf", &err);
        if (rc == 0)
            fail_msg("truncated to %zu bytes but opened", n);
        assert_non_null(strstr(err.msg, "cut.gguf"));
    }
    x.b[0] = 'X';
    assert_int_equal(hr_gguf_open_mem(&g, x.b, x.n, "m.gguf", &err), HR_EFORMAT);
    assert_non_null(strstr(err.msg, "bad magic"));
    x.b[0] = 'G';
    x.b[4] = 1;
    assert_int_equal(hr_gguf_open_mem(&g, x.b, x.n, "v.gguf", &err), HR_EUNSUPPORTED);
    x.b[4] = 3;
    uint64_t huge = UINT64_MAX / 2;
    memcpy(x.b + 16, &huge, 8); /* key count */
    assert_int_equal(hr_gguf_open_mem(&g, x.b, x.n, "h.gguf", &err), HR_EFORMAT);
    assert_int_equal(hr_gguf_open(&g, "/nonexistent.gguf", &err), HR_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent.gguf"));
}

static void test_file(void **state) {
    (void)state;
    w x;
    build(&x, F_NONE);
    char p[] = "/tmp/hearth-gguf-XXXXXX";
    int fd = mkstemp(p);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, x.b, x.n), (ssize_t)x.n);
    close(fd);
    hr_gguf *g;
    hr_error err;
    assert_int_equal(hr_gguf_open(&g, p, &err), 0);
    assert_string_equal(hr_gguf_path(g), p);
    assert_int_equal(hr_gguf_n_tensors(g), 2);
    hr_gguf_close(g);
    unlink(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
