/* safetensors: round trip, and every validation error with its message. */
#include "core/error.h"
#include "io/safetensors.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void test_round_trip(void **state) {
    (void)state;
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {0x3f80, 0x4000, 0x4040};
    hr_tensor ts[2] = {
        {.name = "a", .dtype = HR_DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = a, .nbytes = 24},
        {.name = "b.weight", .dtype = HR_DTYPE_BF16, .ndim = 1, .shape = {3}, .data = b, .nbytes = 6},
    };
    const char *meta[] = {"format", "pt"};
    char path[] = "/tmp/hearth_st_XXXXXX";
    close(mkstemp(path));
    hr_error err;
    assert_int_equal(hr_st_write(path, ts, 2, meta, 1, &err), 0);
    hr_st_file *f;
    assert_int_equal(hr_st_open(&f, path, &err), 0);
    assert_int_equal(hr_st_count(f), 2);
    const hr_tensor *t = hr_st_find(f, "b.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, HR_DTYPE_BF16);
    assert_int_equal(t->shape[0], 3);
    assert_memory_equal(t->data, b, 6);
    t = hr_st_find(f, "a");
    assert_memory_equal(t->data, a, 24);
    assert_int_equal((uintptr_t)t->data % 8, 0); /* header padded to 8 */
    assert_null(hr_st_find(f, "nope"));
    /* a tensor's bytes lie in the file mapping (so a repacked one can be
     * dropped from memory); bytes elsewhere, or running past it, do not */
    assert_true(hr_st_maps(f, t->data, 24));
    assert_false(hr_st_maps(f, a, 24));
    assert_false(hr_st_maps(f, t->data, 1 << 20));
    hr_st_close(f);
    unlink(path);
}

/* Build an image: 8-byte length, header text, then data_len zero bytes. */
static size_t image(unsigned char *buf, const char *hdr, size_t data_len) {
    size_t h = strlen(hdr);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, hdr, h);
    memset(buf + 8 + h, 0, data_len);
    return 8 + h + data_len;
}

static void expect_error(const char *hdr, size_t data_len, int code, const char *needle) {
    unsigned char buf[1024];
    size_t n = image(buf, hdr, data_len);
    hr_st_file *f = NULL;
    hr_error err = {0};
    int rc = hr_st_parse(&f, buf, n, "m.safetensors", &err);
    if (rc != code || !strstr(err.msg, needle))
        fail_msg("header %s: got rc %d '%s', want %d containing '%s'", hdr, rc, err.msg,
                 code, needle);
    assert_null(f);
    assert_non_null(strstr(err.msg, "m.safetensors"));
}

static void test_errors(void **state) {
    (void)state;
    hr_st_file *f = NULL;
    hr_error err;
    assert_int_equal(hr_st_parse(&f, "abc", 3, "m.safetensors", &err), HR_EFORMAT);
    assert_non_null(strstr(err.msg, "too short"));
    unsigned char big[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
    assert_int_equal(hr_st_parse(&f, big, 16, "m.safetensors", &err), HR_EFORMAT);
    assert_non_null(strstr(err.msg, "exceeds the file"));

    expect_error("[1,2]", 0, HR_EFORMAT, "not a JSON object");
    expect_error("{\"a\": ", 0, HR_EFORMAT, "not a JSON object");
    expect_error("{\"t\": 5}", 0, HR_EFORMAT, "'t': entry is not an object");
    expect_error("{\"t\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, HR_EFORMAT, "missing dtype");
    expect_error("{\"t\": {\"dtype\": \"Q9\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
                 HR_EUNSUPPORTED, "dtype Q9");
    expect_error("{\"t\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4,
                 HR_EFORMAT, "bad dimension");
    expect_error("{\"t\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1], \"data_offsets\": [0, 4]}}",
                 4, HR_EUNSUPPORTED, "6 dimensions");
    expect_error("{\"t\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4,
                 HR_EFORMAT, "'t': F32 shape needs a different byte size");
    expect_error("{\"t\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 4,
                 HR_EFORMAT, "outside the 4-byte data section");
    expect_error("{\"t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4]}}", 4,
                 HR_EFORMAT, "bad data_offsets");
    expect_error("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
                 " \"y\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8,
                 HR_EFORMAT, "overlap");
    expect_error("{\"__metadata__\": 3}", 0, HR_EFORMAT, "__metadata__");
    expect_error("{\"t\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 4],"
                 " \"data_offsets\": [0, 4]}}", 4, HR_EFORMAT, "byte size");
    /* an empty shape is a scalar: one element */
    unsigned char buf[256];
    size_t n = image(buf, "{\"s\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}", 4);
    assert_int_equal(hr_st_parse(&f, buf, n, "m", &err), 0);
    hr_st_close(f);
    assert_int_equal(hr_st_open(&f, "/nonexistent.safetensors", &err), HR_EIO);
    hr_st_close(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
