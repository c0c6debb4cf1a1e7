/* src/media/mel.c: Whisper's log-mel features against references made with
 * numpy and torch (tools/refgen/audio_mel.py: tests/fixtures/audio/mel; the
 * numpy path float64 as audio_utils.spectrogram computes it, the torch path
 * with torch.stft as WhisperFeatureExtractor runs it where torch is
 * installed): 128 and 80 mels, a clip of 3 frames, one whose max - 8 clamp
 * bites, one that fills the 30 s window. Every column within 2e-6 of the
 * numpy path (measured: equal, bit for bit) and 5e-5 of the torch path
 * (measured 2.3e-5; the two paths differ from each other by as much),
 * the padding's columns equal to the references' value, the attention
 * mask's count equal; the settings' refusals. (HF's own extractor on the
 * GPU machine: test_audio, with tools/refgen/audio_qwen2.py's fixture.) */
#include "core/error.h"
#include "core/file.h"
#include "media/mel.h"

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

static float *read_f32(const char *name, size_t *n) {
    char p[4096];
    const char *root = getenv("HEARTH_ROOT");
    snprintf(p, sizeof p, "%s/tests/fixtures/audio/mel/%s", root ? root : ".", name);
    char *d = NULL;
    size_t len = 0;
    hr_error err = {0};
    if (hr_file_read(p, &d, &len, &err))
        fail_msg("%s", err.msg);
    *n = len / 4;
    return (float *)d;
}

static void test_references(void **state) {
    (void)state;
    char p[4096];
    const char *root = getenv("HEARTH_ROOT");
    snprintf(p, sizeof p, "%s/tests/fixtures/audio/mel/manifest.json", root ? root : ".");
    json_t *m = json_load_file(p, 0, NULL);
    assert_non_null(m);
    size_t i;
    json_t *c;
    double worst_np = 0, worst_pt = 0;
    json_array_foreach(json_object_get(m, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "case"));
        hr_mel_cfg cfg;
        assert_int_equal(hr_mel_cfg_from_json(&cfg, NULL, NULL), 0);
        cfg.n_mels = (int)json_integer_value(json_object_get(c, "n_mels"));
        size_t n = (size_t)json_integer_value(json_object_get(c, "samples")), got = 0;
        float *x;
        char fn[256];
        if (!strcmp(name, "full")) { /* audio_mel.py's formula */
            x = malloc(n * sizeof(float));
            for (size_t k = 0; k < n; k++)
                x[k] = (float)((double)((long)((k * 7919) % 65536) - 32768) / 32768.0 * 0.3);
        } else {
            snprintf(fn, sizeof fn, "%s.f32", name);
            x = read_f32(fn, &got);
            assert_int_equal(got, n);
        }
        size_t F = hr_mel_frames(&cfg);
        assert_int_equal(F, json_integer_value(json_object_get(c, "frames")));
        float *mel = malloc(sizeof(float) * (size_t)cfg.n_mels * F);
        int valid = 0;
        hr_error err = {0};
        if (hr_mel_compute(&cfg, x, n, mel, &valid, &err))
            fail_msg("%s: %s", name, err.msg);
        assert_int_equal(valid, json_integer_value(json_object_get(c, "valid")));
        size_t head = (size_t)json_integer_value(json_object_get(c, "head"));
        size_t tail = (size_t)json_integer_value(json_object_get(c, "tail"));
        const char *which[2] = {"np", "pt"};
        for (int w = 0; w < 2; w++) {
            snprintf(fn, sizeof fn, "%s.%s.f32", name, which[w]);
            float *ref = read_f32(fn, &got);
            assert_int_equal(got, (size_t)cfg.n_mels * (head + tail));
            double tol = w ? 5e-5 : 2e-6, worst = 0;
            char pk[8];
            snprintf(pk, sizeof pk, "pad_%s", which[w]);
            float pad = (float)json_real_value(json_object_get(c, pk));
            for (int r = 0; r < cfg.n_mels; r++)
                for (size_t t = 0; t < F; t++) {
                    float want;
                    if (t < head)
                        want = ref[(size_t)r * (head + tail) + t];
                    else if (t >= F - tail)
                        want = ref[(size_t)r * (head + tail) + head + (t - (F - tail))];
                    else if (!tail)
                        want = pad;
                    else
                        continue; /* the full window's middle: not stored */
                    double d = fabs((double)mel[(size_t)r * F + t] - want);
                    if (d > worst)
                        worst = d;
                    if (d > tol)
                        fail_msg("%s vs %s: mel %d frame %zu: %.8g, the reference %.8g", name,
                                 which[w], r, t, mel[(size_t)r * F + t], want);
                }
            if (w)
                worst_pt = fmax(worst_pt, worst);
            else
                worst_np = fmax(worst_np, worst);
            free(ref);
        }
        free(mel);
        free(x);
    }
    printf("mel: max |diff| %.3g vs the numpy path, %.3g vs the torch path\n", worst_np, worst_pt);
    json_decref(m);
}

static void test_limits(void **state) {
    (void)state;
    hr_mel_cfg c;
    hr_error err = {0};
    json_t *j = json_pack("{s:s}", "feature_extractor_type", "SeamlessM4TFeatureExtractor");
    assert_int_equal(hr_mel_cfg_from_json(&c, j, &err), HR_EUNSUPPORTED);
    json_decref(j);
    j = json_pack("{s:b}", "do_normalize", 1);
    assert_int_equal(hr_mel_cfg_from_json(&c, j, &err), HR_EUNSUPPORTED);
    json_decref(j);
    j = json_pack("{s:f}", "dither", 1e-5);
    assert_int_equal(hr_mel_cfg_from_json(&c, j, &err), HR_EUNSUPPORTED);
    json_decref(j);
    j = json_pack("{s:i}", "hop_length", 0);
    assert_int_equal(hr_mel_cfg_from_json(&c, j, &err), HR_EFORMAT);
    json_decref(j);
    j = json_pack("{s:i,s:i}", "feature_size", 128, "chunk_length", 1);
    assert_int_equal(hr_mel_cfg_from_json(&c, j, &err), 0);
    json_decref(j);
    assert_int_equal(c.n_mels, 128);
    assert_int_equal(hr_mel_frames(&c), 100);
    float x[16001] = {0}, *mel = malloc(sizeof(float) * 128 * 100);
    int valid = 0;
    assert_int_equal(hr_mel_compute(&c, x, 16001, mel, &valid, &err), HR_ERANGE);
    assert_int_equal(hr_mel_compute(&c, x, 0, mel, &valid, &err), HR_ERANGE);
    assert_int_equal(hr_mel_compute(&c, x, 16000, mel, &valid, &err), 0); /* silence */
    assert_int_equal(valid, 100);
    for (int i = 0; i < 128 * 100; i++)
        assert_true(mel[i] == (-10.0f + 4.0f) / 4.0f);
    free(mel);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_references),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
