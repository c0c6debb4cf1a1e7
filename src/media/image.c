/* Image decoding through the packaged libraries (media/image.h). */
#include "media/image.h"
#include "core/error.h"

#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>
#include <xxhash.h>

hr_image_format hr_image_sniff(const uint8_t *p, size_t n) {
    if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
        return HR_IMAGE_JPEG;
    if (n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8))
        return HR_IMAGE_PNG;
    if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4))
        return HR_IMAGE_WEBP;
    return HR_IMAGE_UNKNOWN;
}

const char *hr_image_format_name(hr_image_format f) {
    switch (f) {
    case HR_IMAGE_JPEG: return "jpeg";
    case HR_IMAGE_PNG: return "png";
    case HR_IMAGE_WEBP: return "webp";
    case HR_IMAGE_UNKNOWN: break;
    }
    return "unknown";
}

static int check_size(unsigned long w, unsigned long h, hr_error *err) {
    if (w == 0 || h == 0)
        return hr_err(err, HR_EFORMAT, "the image has no pixels (%lux%lu)", w, h);
    if (w > HR_IMAGE_MAX_SIDE || h > HR_IMAGE_MAX_SIDE || (uint64_t)w * h > HR_IMAGE_MAX_PIXELS)
        return hr_err(err, HR_ERANGE, "the image is %lux%lu; at most %d pixels a side and %u "
                      "pixels in all are accepted", w, h, HR_IMAGE_MAX_SIDE, HR_IMAGE_MAX_PIXELS);
    return 0;
}

/* ---- JPEG --------------------------------------------------------------------- */

typedef struct jerr {
    struct jpeg_error_mgr mgr;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jerr;

static void jpeg_fail(j_common_ptr c) {
    jerr *e = (jerr *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

static void jpeg_quiet(j_common_ptr c, int level) {
    (void)c;
    (void)level; /* warnings (corrupt-but-decodable data) are not printed */
}

static int decode_jpeg(const uint8_t *p, size_t n, hr_image *img, hr_error *err) {
    struct jpeg_decompress_struct d;
    jerr je;
    JSAMPROW row = NULL;
    uint8_t *volatile px = NULL;
    volatile int rc = 0;
    d.err = jpeg_std_error(&je.mgr);
    je.mgr.error_exit = jpeg_fail;
    je.mgr.emit_message = jpeg_quiet;
    je.msg[0] = 0;
    jpeg_create_decompress(&d);
    if (setjmp(je.jb)) {
        rc = hr_err(err, HR_EFORMAT, "bad JPEG: %s", je.msg);
        goto done;
    }
    jpeg_mem_src(&d, p, (unsigned long)n);
    jpeg_read_header(&d, TRUE);
    if (d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK) {
        rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: CMYK JPEG images");
        goto done;
    }
    if ((rc = check_size(d.image_width, d.image_height, err)))
        goto done;
    d.out_color_space = JCS_EXT_RGBA;
    jpeg_start_decompress(&d);
    size_t w = d.output_width, h = d.output_height;
    px = malloc(w * h * 4);
    if (!px) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    while (d.output_scanline < d.output_height) {
        row = px + (size_t)d.output_scanline * w * 4;
        jpeg_read_scanlines(&d, &row, 1);
    }
    jpeg_finish_decompress(&d);
    img->w = (int)w;
    img->h = (int)h;
    img->rgba = px;
    px = NULL;
done:
    jpeg_destroy_decompress(&d);
    free(px);
    return rc;
}

/* ---- PNG ---------------------------------------------------------------------- */

typedef struct png_src {
    const uint8_t *p;
    size_t n, at;
    char msg[200];
} png_src;

static void png_read_mem(png_structp png, png_bytep out, size_t len) {
    png_src *s = png_get_io_ptr(png);
    if (len > s->n - s->at)
        png_error(png, "truncated");
    memcpy(out, s->p + s->at, len);
    s->at += len;
}

static void png_fail(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_warn(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

/* The classic API, not png_image_*: that one applies gAMA/cHRM colour
 * conversion, which PIL (what the HF image processors read with) does not. */
static int decode_png(const uint8_t *p, size_t n, hr_image *img, hr_error *err) {
    png_src src = {.p = p, .n = n};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_warn);
    if (!png)
        return hr_err(err, HR_ENOMEM, "out of memory");
    png_infop info = png_create_info_struct(png);
    uint8_t *volatile px = NULL;
    png_bytep *volatile rows = NULL;
    volatile int rc = 0;
    if (!info) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    if (setjmp(png_jmpbuf(png))) {
        rc = hr_err(err, HR_EFORMAT, "bad PNG: %s", src.msg);
        goto done;
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, HR_IMAGE_MAX_SIDE, HR_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(png, 8u << 20);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if ((rc = check_size(w, h, err)))
        goto done;
    int ct = png_get_color_type(png, info);
    png_set_expand(png); /* palette to RGB, gray below 8 bits to 8, tRNS to alpha */
    png_set_strip_16(png); /* the high byte, as PIL keeps */
    if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER); /* no effect where alpha is there */
    int passes = png_set_interlace_handling(png);
    (void)passes;
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 4) {
        rc = hr_err(err, HR_EFORMAT, "bad PNG: unexpected row layout");
        goto done;
    }
    px = malloc((size_t)w * h * 4);
    rows = malloc(sizeof(png_bytep) * h);
    if (!px || !rows) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    for (png_uint_32 y = 0; y < h; y++)
        rows[y] = px + (size_t)y * w * 4;
    png_read_image(png, rows);
    img->w = (int)w;
    img->h = (int)h;
    img->rgba = px;
    px = NULL;
done:
    png_destroy_read_struct(&png, info ? &info : NULL, NULL);
    free(rows);
    free(px);
    return rc;
}

/* ---- WebP --------------------------------------------------------------------- */

static int decode_webp(const uint8_t *p, size_t n, hr_image *img, hr_error *err) {
    int w = 0, h = 0;
    if (!WebPGetInfo(p, n, &w, &h))
        return hr_err(err, HR_EFORMAT, "bad WebP: unreadable header");
    int rc = check_size((unsigned long)w, (unsigned long)h, err);
    if (rc)
        return rc;
    uint8_t *px = malloc((size_t)w * h * 4);
    if (!px)
        return hr_err(err, HR_ENOMEM, "out of memory");
    if (!WebPDecodeRGBAInto(p, n, px, (size_t)w * h * 4, w * 4)) {
        free(px);
        return hr_err(err, HR_EFORMAT, "bad WebP: the image data does not decode");
    }
    img->w = w;
    img->h = h;
    img->rgba = px;
    return 0;
}

/* ---- entry -------------------------------------------------------------------- */

int hr_image_decode(const uint8_t *p, size_t n, hr_image *img, hr_error *err) {
    memset(img, 0, sizeof *img);
    hr_image_format f = hr_image_sniff(p, n);
    int rc;
    switch (f) {
    case HR_IMAGE_JPEG: rc = decode_jpeg(p, n, img, err); break;
    case HR_IMAGE_PNG: rc = decode_png(p, n, img, err); break;
    case HR_IMAGE_WEBP: rc = decode_webp(p, n, img, err); break;
    default:
        return hr_err(err, HR_EUNSUPPORTED, "not an image hearth reads (JPEG, PNG and WebP are)");
    }
    if (rc)
        return rc;
    img->format = f;
    XXH3_state_t *st = XXH3_createState();
    if (!st) {
        hr_image_deinit(img);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    int32_t dims[2] = {img->w, img->h};
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, dims, sizeof dims);
    XXH3_128bits_update(st, img->rgba, (size_t)img->w * img->h * 4);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    XXH3_freeState(st);
    memcpy(img->hash, c.digest, 16);
    return 0;
}

void hr_image_deinit(hr_image *img) {
    if (!img)
        return;
    free(img->rgba);
    memset(img, 0, sizeof *img);
}
