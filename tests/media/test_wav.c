/* src/media/wav.c: WAV files written and read back by Python's wave module
 * (tools/refgen/audio_wav.py: tests/fixtures/audio/wav) decode to the same
 * mono samples (bit for bit for one channel, within 1 ulp where channels
 * are averaged); every refusal (not a WAV, no data, data before fmt, an
 * unsupported tag or size, bad block align, a non-finite float, a clip past
 * the limit) has its error; a stream's oversized data chunk is read to the
 * end of the file. */
#include "core/error.h"
#include "core/file.h"
#include "media/wav.h"

#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *fixture(const char *name) {
    static char p[4096];
    const char *root = getenv("HEARTH_ROOT");
    snprintf(p, sizeof p, "%s/tests/fixtures/audio/wav/%s", root ? root : ".", name);
    return p;
}

static void test_fixtures(void **state) {
    (void)state;
    json_t *m = json_load_file(fixture("manifest.json"), 0, NULL);
    assert_non_null(m);
    size_t i;
    json_t *c;
    int n = 0;
    json_array_foreach(json_object_get(m, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "case"));
        char fn[256];
        char *wav = NULL, *ref = NULL;
        size_t wn = 0, rn = 0;
        hr_error err = {0};
        snprintf(fn, sizeof fn, "%s.wav", name);
        assert_int_equal(hr_file_read(fixture(fn), &wav, &wn, &err), 0);
        snprintf(fn, sizeof fn, "%s.f32", name);
        assert_int_equal(hr_file_read(fixture(fn), &ref, &rn, &err), 0);
        hr_audio a;
        int rc = hr_wav_decode((const uint8_t *)wav, wn, 30.0, &a, &err);
        if (rc)
            fail_msg("%s: %s", name, err.msg);
        int ch = (int)json_integer_value(json_object_get(c, "channels"));
        assert_int_equal(a.rate, json_integer_value(json_object_get(c, "rate")));
        assert_int_equal(a.channels, ch);
        assert_int_equal(a.bits, json_integer_value(json_object_get(c, "bits")));
        assert_int_equal(a.is_float, json_is_true(json_object_get(c, "float")));
        assert_int_equal(a.n, rn / 4);
        const float *want = (const float *)ref;
        for (size_t k = 0; k < a.n; k++) {
            float tol = ch == 1 ? 0.0f : 1.2e-7f * fmaxf(1.0f, fabsf(want[k]));
            if (fabsf(a.pcm[k] - want[k]) > tol)
                fail_msg("%s: sample %zu: %.9g, the reference %.9g", name, k, a.pcm[k], want[k]);
        }
        hr_audio_deinit(&a);
        free(wav);
        free(ref);
        n++;
    }
    assert_true(n >= 9);
    json_decref(m);
}

/* ---- hand-made files ------------------------------------------------------------------- */

typedef struct buf {
    uint8_t p[1 << 12];
    size_t n;
} buf;

static void put(buf *b, const void *d, size_t n) {
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put16(buf *b, uint16_t v) { put(b, &v, 2); }

/* RIFF header, a fmt chunk (tag, channels, rate, bits; block align from them unless
 * block > 0) and a data chunk of data_n bytes claimed, `have` of them present */
static void make(buf *b, uint16_t tag, uint16_t ch, uint32_t rate, uint16_t bits, int block,
                 uint32_t data_n, const void *data, size_t have) {
    b->n = 0;
    put(b, "RIFF", 4);
    put32(b, 0);
    put(b, "WAVE", 4);
    put(b, "fmt ", 4);
    put32(b, 16);
    put16(b, tag);
    put16(b, ch);
    put32(b, rate);
    put32(b, rate * ch * bits / 8);
    put16(b, (uint16_t)(block > 0 ? block : ch * bits / 8));
    put16(b, bits);
    put(b, "data", 4);
    put32(b, data_n);
    put(b, data, have);
}

static int decode(const buf *b, hr_audio *a, hr_error *err) {
    return hr_wav_decode(b->p, b->n, 30.0, a, err);
}

static void expect(const buf *b, int code, const char *says) {
    hr_audio a;
    hr_error err = {0};
    int rc = decode(b, &a, &err);
    if (rc != code || !strstr(err.msg, says))
        fail_msg("rc %d (%s), wanted %d with '%s'", rc, err.msg, code, says);
    assert_null(a.pcm);
}

static void test_errors(void **state) {
    (void)state;
    int16_t s[4] = {0, 16384, -32768, 32767};
    buf b;
    b.n = 0;
    put(&b, "RIFX", 4);
    put32(&b, 0);
    put(&b, "WAVE", 4);
    expect(&b, HR_EFORMAT, "not a WAV file");
    make(&b, 1, 1, 16000, 16, 0, 8, s, 8);
    b.n = 36; /* cut inside the data chunk's header */
    expect(&b, HR_EFORMAT, "no data chunk");
    make(&b, 6, 1, 8000, 8, 0, 8, s, 8);
    expect(&b, HR_EUNSUPPORTED, "format tag 0x0006");
    make(&b, 1, 1, 16000, 12, 2, 8, s, 8);
    expect(&b, HR_EUNSUPPORTED, "12-bit integer");
    make(&b, 3, 1, 16000, 16, 0, 8, s, 8);
    expect(&b, HR_EUNSUPPORTED, "16-bit float");
    make(&b, 1, 0, 16000, 16, 2, 8, s, 8);
    expect(&b, HR_EUNSUPPORTED, "0 channels");
    make(&b, 1, 2, 16000, 16, 2, 8, s, 8);
    expect(&b, HR_EFORMAT, "block align 2");
    make(&b, 1, 1, 0, 16, 0, 8, s, 8);
    expect(&b, HR_EFORMAT, "sample rate of 0 Hz");
    make(&b, 1, 1, 16000, 16, 0, 0, s, 0);
    expect(&b, HR_EFORMAT, "no samples");
    float nan = NAN;
    make(&b, 3, 1, 16000, 32, 0, 4, &nan, 4);
    expect(&b, HR_EFORMAT, "sample 0 is not a finite number");
    /* data before fmt */
    b.n = 0;
    put(&b, "RIFF", 4);
    put32(&b, 0);
    put(&b, "WAVE", 4);
    put(&b, "data", 4);
    put32(&b, 2);
    put16(&b, 0);
    expect(&b, HR_EFORMAT, "before the fmt chunk");
    /* a chunk that claims more than the file */
    b.n = 12;
    put(&b, "LIST", 4);
    put32(&b, 1000);
    expect(&b, HR_EFORMAT, "past the end of the file");
    /* a stream's data chunk (0xffffffff bytes): read to the end, whole frames */
    make(&b, 1, 1, 16000, 16, 0, 0xffffffffu, s, 7);
    hr_audio a;
    hr_error err = {0};
    assert_int_equal(decode(&b, &a, &err), 0);
    assert_int_equal(a.n, 3);
    assert_true(a.pcm[1] == 0.5f && a.pcm[2] == -1.0f);
    hr_audio_deinit(&a);
    hr_audio_deinit(NULL);
}

static void test_too_long(void **state) {
    (void)state;
    size_t n = 16000 * 31; /* 31 s of 8-bit mono at 16 kHz */
    uint8_t *p = malloc(44 + n);
    buf *h = malloc(sizeof *h);
    static const uint8_t none[1];
    make(h, 1, 1, 16000, 8, 0, (uint32_t)n, none, 0);
    memcpy(p, h->p, h->n);
    memset(p + h->n, 128, n);
    hr_audio a;
    hr_error err = {0};
    assert_int_equal(hr_wav_decode(p, h->n + n, 30.0, &a, &err), HR_ERANGE);
    assert_non_null(strstr(err.msg, "31.00 s long; at most 30 s"));
    assert_int_equal(hr_wav_decode(p, h->n + n, 31.0, &a, &err), 0);
    assert_int_equal(a.n, n);
    assert_true(a.pcm[0] == 0.0f && a.rate == 16000);
    hr_audio b;
    assert_int_equal(hr_wav_decode(p, h->n + n - 1, 31.0, &b, &err), 0);
    assert_memory_not_equal(a.hash, b.hash, 16); /* the identity is the samples' */
    hr_audio_deinit(&a);
    hr_audio_deinit(&b);
    free(h);
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_too_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
