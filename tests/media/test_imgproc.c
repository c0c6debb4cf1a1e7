/* src/media/imgproc.c: the resize (bilinear, bicubic; shrinking,
 * enlarging, one pass or two) bit for bit against Pillow
 * (tests/fixtures/vision/resize.json) and against torchvision's uint8
 * resize (resize_torchvision.json, from the GPU machine; skipped while
 * absent), both from tools/refgen/imgresize.py as the sha256 of every
 * result; the float steps (rescale, normalize, channel first; alpha
 * dropped) of either backend against hand-computed values; the
 * preprocessor_config.json reader. */
#include "core/error.h"
#include "core/file.h"
#include "media/imgproc.h"

#include <openssl/evp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the source images: tools/refgen/imgresize.py's pattern() */
static hr_image pattern(int w, int h, bool alpha) {
    hr_image img = {.w = w, .h = h, .rgba = malloc((size_t)w * h * 4)};
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = img.rgba + ((size_t)y * w + x) * 4;
            for (int c = 0; c < 3; c++)
                p[c] = (uint8_t)((x * 31 + y * 17 + c * 89 + (x * y) % 7 * 13) % 256);
            p[3] = alpha ? (uint8_t)((x * 11 + y * 5) % 256) : 255;
        }
    return img;
}

static void sha256_hex(const uint8_t *p, size_t n, char out[65]) {
    unsigned char md[32];
    unsigned int ml = 0;
    EVP_Digest(p, n, md, &ml, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

/* the cases of one fixture; -1 when it is absent */
static int resize_parity(const char *file, hr_image_backend be) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fixtures/vision/%s", getenv("HEARTH_ROOT"), file);
    json_error_t je;
    json_t *fx = json_load_file(path, 0, &je);
    if (!fx)
        return -1;
    size_t i;
    json_t *c;
    int n = 0;
    json_array_foreach(json_object_get(fx, "cases"), i, c) {
        int w = (int)json_integer_value(json_object_get(c, "w"));
        int h = (int)json_integer_value(json_object_get(c, "h"));
        int dw = (int)json_integer_value(json_object_get(c, "dw"));
        int dh = (int)json_integer_value(json_object_get(c, "dh"));
        hr_resample rs = (hr_resample)json_integer_value(json_object_get(c, "resample"));
        hr_image img = pattern(w, h, false);
        uint8_t *rgb = malloc((size_t)w * h * 3), *out = malloc((size_t)dw * dh * 3);
        for (int k = 0; k < w * h; k++)
            memcpy(rgb + 3 * k, img.rgba + 4 * k, 3);
        assert_int_equal(hr_image_resize_rgb(rgb, w, h, out, dw, dh, rs, be, NULL), 0);
        char hex[65];
        sha256_hex(out, (size_t)dw * dh * 3, hex);
        if (strcmp(hex, json_string_value(json_object_get(c, "sha256"))))
            fail_msg("%s: %dx%d -> %dx%d resample %d: differs", file, w, h, dw, dh, (int)rs);
        free(rgb);
        free(out);
        free(img.rgba);
        n++;
    }
    json_decref(fx);
    return n;
}

static void test_pil_parity(void **state) {
    (void)state;
    assert_true(resize_parity("resize.json", HR_IMAGE_PIL) >= 28);
}

static void test_torchvision_parity(void **state) {
    (void)state;
    int n = resize_parity("resize_torchvision.json", HR_IMAGE_TORCHVISION);
    if (n < 0)
        skip(); /* tools/refgen/imgresize.py --backend torchvision, on the GPU machine */
    assert_true(n >= 28);
}

static void test_preprocess(void **state) {
    (void)state;
    hr_image img = pattern(4, 2, true); /* the alpha is dropped */
    hr_image_proc p = hr_image_proc_gemma3();
    p.width = 4;
    p.height = 2; /* no resize: the float steps alone */
    p.mean[1] = 0.48145466f; /* CLIP's: mean / r is not exact */
    float *out = malloc(sizeof(float) * 3 * 8);
    for (int be = 0; be < 2; be++) {
        p.backend = be ? HR_IMAGE_PIL : HR_IMAGE_TORCHVISION;
        assert_int_equal(hr_image_preprocess(&img, &p, out, NULL), 0);
        int differ = 0;
        for (int y = 0; y < 2; y++)
            for (int x = 0; x < 4; x++)
                for (int c = 0; c < 3; c++) {
                    uint8_t u = img.rgba[(y * 4 + x) * 4 + c];
                    float pil = ((float)((double)u * (1.0 / 255.0)) - p.mean[c]) / 0.5f;
                    float tv = ((float)u - p.mean[c] * 255.0f) / 127.5f;
                    float got = out[c * 8 + y * 4 + x]; /* channel first, exact */
                    assert_true(got == (be ? pil : tv));
                    differ += pil != tv;
                }
        assert_true(differ > 0); /* the two orders are not the same floats */
    }
    assert_true(out[0] >= -1.0f && out[0] <= 1.0f);
    free(out);
    free(img.rgba);
}

static void test_config(void **state) {
    (void)state;
    hr_image_proc p;
    hr_error e = {0};
    json_t *cfg = json_loads("{\"size\": {\"height\": 224, \"width\": 224}, \"resample\": 3,"
                             "\"image_mean\": [0.1, 0.2, 0.3], \"image_std\": 0.25,"
                             "\"rescale_factor\": 0.5}", 0, NULL);
    assert_int_equal(hr_image_proc_from_json(&p, cfg, hr_image_proc_gemma3(), &e), 0);
    assert_int_equal(p.height, 224);
    assert_int_equal(p.resample, HR_RESAMPLE_BICUBIC);
    assert_true(p.mean[2] == 0.3f && p.std[1] == 0.25f && p.rescale == 0.5);
    assert_int_equal(p.backend, HR_IMAGE_TORCHVISION);
    json_decref(cfg);
    cfg = json_loads("{\"do_pan_and_scan\": true}", 0, NULL);
    assert_int_equal(hr_image_proc_from_json(&p, cfg, hr_image_proc_gemma3(), &e), HR_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "pan"));
    json_decref(cfg);
    cfg = json_loads("{\"resample\": 1}", 0, NULL);
    assert_int_equal(hr_image_proc_from_json(&p, cfg, hr_image_proc_gemma3(), &e), HR_EUNSUPPORTED);
    json_decref(cfg);
    cfg = json_loads("{\"image_std\": [1, 0, 1]}", 0, NULL);
    assert_int_equal(hr_image_proc_from_json(&p, cfg, hr_image_proc_gemma3(), &e), HR_EFORMAT);
    json_decref(cfg);
    cfg = json_loads("{\"size\": {\"height\": 0, \"width\": 5}}", 0, NULL);
    assert_int_equal(hr_image_proc_from_json(&p, cfg, hr_image_proc_gemma3(), &e), HR_EFORMAT);
    json_decref(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pil_parity),
        cmocka_unit_test(test_torchvision_parity),
        cmocka_unit_test(test_preprocess),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
