/* src/media: base64 and data: URLs, and decoding JPEG/PNG/WebP through the
 * packaged libraries (test images made here with the same libraries'
 * encoders): pixels exact for the lossless formats, bad bytes refused with
 * the error that names them, oversized images refused before decoding. */
#include "core/error.h"
#include "media/dataurl.h"
#include "media/image.h"
#include "media/media.h"

#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <webp/encode.h>

/* ---- encoders (test inputs) -------------------------------------------------------- */

static uint8_t *pattern(int w, int h, int ch) {
    uint8_t *p = malloc((size_t)w * h * ch);
    for (int i = 0; i < w * h * ch; i++)
        p[i] = (uint8_t)(i * 37 + i / 7);
    return p;
}

typedef struct membuf {
    uint8_t *p;
    size_t n;
} membuf;

static void png_write_mem(png_structp png, png_bytep d, size_t n) {
    membuf *m = png_get_io_ptr(png);
    m->p = realloc(m->p, m->n + n);
    memcpy(m->p + m->n, d, n);
    m->n += n;
}

static void png_flush_mem(png_structp png) {
    (void)png;
}

/* color: PNG_COLOR_TYPE_RGB, _RGBA or _GRAY; 8 bits */
static membuf encode_png(const uint8_t *px, int w, int h, int color) {
    membuf m = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_set_write_fn(png, &m, png_write_mem, png_flush_mem);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, color, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    int ch = color == PNG_COLOR_TYPE_RGB ? 3 : color == PNG_COLOR_TYPE_RGBA ? 4 : 1;
    for (int y = 0; y < h; y++)
        png_write_row(png, px + (size_t)y * w * ch);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return m;
}

static membuf encode_jpeg(const uint8_t *rgb, int w, int h, int quality) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    unsigned char *out = NULL;
    unsigned long n = 0;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &out, &n);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)c.next_scanline * w * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    membuf m = {malloc(n), n};
    memcpy(m.p, out, n);
    free(out);
    return m;
}

/* ---- base64 and data: URLs ------------------------------------------------------- */

static void test_base64(void **state) {
    (void)state;
    uint8_t out[16];
    size_t n = 0;
    assert_int_equal(hr_base64_decode("aGVsbG8=", 8, out, &n), -1);
    assert_int_equal(n, 5);
    assert_memory_equal(out, "hello", 5);
    assert_int_equal(hr_base64_decode("aGVsbG8", 7, out, &n), -1); /* padding optional */
    assert_int_equal(n, 5);
    assert_int_equal(hr_base64_decode("aGVsbA==", 8, out, &n), -1);
    assert_int_equal(n, 4);
    assert_int_equal(hr_base64_decode("", 0, out, &n), -1);
    assert_int_equal(n, 0);
    assert_int_equal(hr_base64_decode("aGV$bG8=", 8, out, &n), 3);   /* bad character */
    assert_int_equal(hr_base64_decode("aG=sbG8=", 8, out, &n), 2);   /* '=' inside */
    assert_int_equal(hr_base64_decode("aGVsbG8==", 9, out, &n), 7);  /* misplaced pad */
    assert_int_equal(hr_base64_decode("aGVsb", 5, out, &n), 5);      /* a lone 6-bit tail */
    assert_int_equal(hr_base64_decode("aGVsbG9=", 8, out, &n), 7);   /* nonzero pad bits */
    assert_true(hr_base64_decode("aGVs bG8=", 9, out, &n) >= 0);     /* no whitespace */
}

static void test_dataurl(void **state) {
    (void)state;
    hr_error e = {0};
    char mime[64];
    uint8_t *b = NULL;
    size_t n = 0;
    const char *u = "data:Image/PNG;name=x;base64,aGVsbG8=";
    assert_int_equal(hr_dataurl_decode(u, strlen(u), 100, mime, sizeof mime, &b, &n, &e), 0);
    assert_string_equal(mime, "image/png");
    assert_int_equal(n, 5);
    free(b);
    u = "data:;base64,aGVsbG8=";
    assert_int_equal(hr_dataurl_decode(u, strlen(u), 100, mime, sizeof mime, &b, &n, &e), 0);
    assert_string_equal(mime, "");
    free(b);
    u = "data:image/png,hello";
    assert_int_equal(hr_dataurl_decode(u, strlen(u), 100, mime, sizeof mime, &b, &n, &e),
                     HR_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "base64"));
    u = "data:image/png;base64";
    assert_int_equal(hr_dataurl_decode(u, strlen(u), 100, mime, sizeof mime, &b, &n, &e), HR_EINVAL);
    u = "data:image/png;base64,aGVs!G8=";
    assert_int_equal(hr_dataurl_decode(u, strlen(u), 100, mime, sizeof mime, &b, &n, &e), HR_EINVAL);
    assert_non_null(strstr(e.msg, "at byte 26"));
    u = "data:image/png;base64,aGVsbG8=";
    assert_int_equal(hr_dataurl_decode(u, strlen(u), 4, mime, sizeof mime, &b, &n, &e), HR_ERANGE);
    u = "data:image/png;base64,";
    assert_int_equal(hr_dataurl_decode(u, strlen(u), 100, mime, sizeof mime, &b, &n, &e), HR_EINVAL);
    u = "http://x/y";
    assert_int_equal(hr_dataurl_decode(u, strlen(u), 100, mime, sizeof mime, &b, &n, &e), HR_EINVAL);
    assert_null(b);
}

/* ---- decoding ------------------------------------------------------------------- */

static void test_png(void **state) {
    (void)state;
    int w = 13, h = 7;
    uint8_t *rgba = pattern(w, h, 4), *rgb = pattern(w, h, 3), *gray = pattern(w, h, 1);
    hr_image img;
    hr_error e = {0};
    membuf m = encode_png(rgba, w, h, PNG_COLOR_TYPE_RGBA);
    assert_int_equal(hr_image_sniff(m.p, m.n), HR_IMAGE_PNG);
    assert_int_equal(hr_image_decode(m.p, m.n, &img, &e), 0);
    assert_int_equal(img.w, w);
    assert_int_equal(img.h, h);
    assert_int_equal(img.format, HR_IMAGE_PNG);
    assert_memory_equal(img.rgba, rgba, (size_t)w * h * 4);
    uint8_t h1[16];
    memcpy(h1, img.hash, 16);
    hr_image_deinit(&img);
    /* every truncation before the IEND chunk (12 bytes, not read) is an
     * error, never a crash */
    for (size_t cut = 0; cut < m.n - 12; cut += 3) {
        int rc = hr_image_decode(m.p, cut, &img, &e);
        assert_true(rc == HR_EFORMAT || rc == HR_EUNSUPPORTED);
        assert_null(img.rgba);
    }
    free(m.p);
    m = encode_png(rgb, w, h, PNG_COLOR_TYPE_RGB);
    assert_int_equal(hr_image_decode(m.p, m.n, &img, &e), 0);
    for (int i = 0; i < w * h; i++) {
        assert_memory_equal(img.rgba + 4 * i, rgb + 3 * i, 3);
        assert_int_equal(img.rgba[4 * i + 3], 255);
    }
    assert_memory_not_equal(img.hash, h1, 16); /* other pixels, other identity */
    hr_image_deinit(&img);
    free(m.p);
    m = encode_png(gray, w, h, PNG_COLOR_TYPE_GRAY);
    assert_int_equal(hr_image_decode(m.p, m.n, &img, &e), 0);
    for (int i = 0; i < w * h; i++) {
        assert_int_equal(img.rgba[4 * i], gray[i]);
        assert_int_equal(img.rgba[4 * i + 2], gray[i]);
    }
    hr_image_deinit(&img);
    /* a flipped byte in the image data: the CRC says so */
    m.p[m.n - 20] ^= 0x40;
    assert_int_equal(hr_image_decode(m.p, m.n, &img, &e), HR_EFORMAT);
    assert_non_null(strstr(e.msg, "bad PNG"));
    free(m.p);
    free(rgba);
    free(rgb);
    free(gray);
}

static void test_png_too_large(void **state) {
    (void)state;
    /* a 20000 x 20000 header: refused before any pixel is allocated */
    uint8_t *px = calloc(1, 4);
    membuf m = encode_png(px, 1, 1, PNG_COLOR_TYPE_RGBA);
    uint8_t *ihdr = m.p + 16; /* width, height */
    uint32_t big = 20000;
    uint8_t be[4] = {(uint8_t)(big >> 24), (uint8_t)(big >> 16), (uint8_t)(big >> 8), (uint8_t)big};
    memcpy(ihdr, be, 4);
    memcpy(ihdr + 4, be, 4);
    hr_image img;
    hr_error e = {0};
    int rc = hr_image_decode(m.p, m.n, &img, &e);
    /* the IHDR CRC no longer matches: libpng refuses it as bad bytes, or the
     * size check does; either way nothing is decoded */
    assert_true(rc == HR_ERANGE || rc == HR_EFORMAT);
    free(m.p);
    free(px);
}

static void test_jpeg(void **state) {
    (void)state;
    int w = 33, h = 17;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++) { /* smooth: JPEG keeps it within a few levels */
        rgb[3 * i] = (uint8_t)(i % w * 4);
        rgb[3 * i + 1] = (uint8_t)(i / w * 8);
        rgb[3 * i + 2] = 128;
    }
    membuf m = encode_jpeg(rgb, w, h, 95);
    hr_image img;
    hr_error e = {0};
    assert_int_equal(hr_image_sniff(m.p, m.n), HR_IMAGE_JPEG);
    assert_int_equal(hr_image_decode(m.p, m.n, &img, &e), 0);
    assert_int_equal(img.w, w);
    assert_int_equal(img.h, h);
    int worst = 0;
    for (int i = 0; i < w * h; i++)
        for (int c = 0; c < 3; c++) {
            int d = abs((int)img.rgba[4 * i + c] - rgb[3 * i + c]);
            worst = d > worst ? d : worst;
        }
    assert_true(worst <= 12);
    hr_image_deinit(&img);
    for (size_t cut = 3; cut < m.n / 2; cut += 7) { /* a header cut short */
        int rc = hr_image_decode(m.p, cut, &img, &e);
        assert_true(rc == HR_EFORMAT || rc == 0); /* libjpeg pads short scans with gray */
        hr_image_deinit(&img);
    }
    assert_int_equal(hr_image_decode(m.p, 40, &img, &e), HR_EFORMAT);
    assert_non_null(strstr(e.msg, "bad JPEG"));
    free(m.p);
    free(rgb);
}

static void test_webp(void **state) {
    (void)state;
    int w = 9, h = 11;
    uint8_t *rgba = pattern(w, h, 4), *out = NULL;
    size_t n = WebPEncodeLosslessRGBA(rgba, w, h, w * 4, &out);
    assert_true(n > 0);
    hr_image img;
    hr_error e = {0};
    assert_int_equal(hr_image_sniff(out, n), HR_IMAGE_WEBP);
    assert_int_equal(hr_image_decode(out, n, &img, &e), 0);
    assert_int_equal(img.w, w);
    assert_int_equal(img.h, h);
    assert_memory_equal(img.rgba, rgba, (size_t)w * h * 4);
    hr_image_deinit(&img);
    assert_int_equal(hr_image_decode(out, n / 2, &img, &e), HR_EFORMAT);
    assert_non_null(strstr(e.msg, "WebP"));
    WebPFree(out);
    free(rgba);
}

static void test_unknown(void **state) {
    (void)state;
    hr_image img;
    hr_error e = {0};
    const uint8_t gif[] = "GIF89a\x01\x00\x01\x00";
    assert_int_equal(hr_image_decode(gif, sizeof gif, &img, &e), HR_EUNSUPPORTED);
    assert_non_null(strstr(e.msg, "JPEG, PNG and WebP"));
    assert_int_equal(hr_image_decode(gif, 0, &img, &e), HR_EUNSUPPORTED);
}

/* hr_media_load_image on data: URLs (http(s) is tests/e2e/media.sh's) */
static void test_load_data_url(void **state) {
    (void)state;
    uint8_t *rgba = pattern(3, 2, 4);
    membuf m = encode_png(rgba, 3, 2, PNG_COLOR_TYPE_RGBA);
    static const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *url = malloc(64 + m.n * 2);
    size_t k = (size_t)sprintf(url, "data:image/png;base64,");
    for (size_t i = 0; i < m.n; i += 3) {
        uint32_t v = (uint32_t)m.p[i] << 16 | (i + 1 < m.n ? m.p[i + 1] : 0) << 8 |
                     (i + 2 < m.n ? m.p[i + 2] : 0);
        url[k++] = abc[v >> 18 & 63];
        url[k++] = abc[v >> 12 & 63];
        url[k++] = i + 1 < m.n ? abc[v >> 6 & 63] : '=';
        url[k++] = i + 2 < m.n ? abc[v & 63] : '=';
    }
    url[k] = 0;
    hr_media_opts o = {0};
    hr_image img;
    hr_error e = {0};
    assert_int_equal(hr_media_load_image(url, &o, &img, &e), 0);
    assert_memory_equal(img.rgba, rgba, 24);
    hr_image_deinit(&img);
    memcpy(url + 5, "text/pl", 7); /* "data:text/pl;base64,": not an image type */
    memmove(url + 12, url + 14, strlen(url + 14) + 1);
    assert_int_equal(hr_media_load_image(url, &o, &img, &e), HR_EINVAL);
    assert_non_null(strstr(e.msg, "text/pl"));
    o.max_bytes = 10;
    assert_int_equal(hr_media_load_image("data:image/png;base64,aGVsbG8gd29ybGQh", &o, &img, &e),
                     HR_ERANGE);
    o.max_bytes = 0;
    assert_int_equal(hr_media_load_image("data:image/png;base64,aGVsbG8=", &o, &img, &e),
                     HR_EUNSUPPORTED); /* "hello" is no image */
    assert_int_equal(hr_media_load_image("ftp://example.com/a.png", &o, &img, &e), HR_EUNSUPPORTED);
    assert_int_equal(hr_media_load_image("http://10.0.0.1/a.png", &o, &img, &e), HR_EINVAL);
    assert_non_null(strstr(e.msg, "private"));
    assert_int_equal(hr_media_load_image("http://[fe80::1]/a.png", &o, &img, &e), HR_EINVAL);
    assert_non_null(strstr(e.msg, "link-local"));
    assert_int_equal(hr_media_load_image("not a url", &o, &img, &e), HR_EINVAL);
    free(url);
    free(m.p);
    free(rgba);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),        cmocka_unit_test(test_dataurl),
        cmocka_unit_test(test_png),           cmocka_unit_test(test_png_too_large),
        cmocka_unit_test(test_jpeg),          cmocka_unit_test(test_webp),
        cmocka_unit_test(test_unknown),       cmocka_unit_test(test_load_data_url),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
