/* Decoded images: JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp),
 * never by hand. Pixels are 8-bit RGBA, rows top to bottom. */
#ifndef HR_MEDIA_IMAGE_H
#define HR_MEDIA_IMAGE_H

#include "hearth.h"

#include <stddef.h>
#include <stdint.h>

#define HR_IMAGE_MAX_SIDE 16384          /* pixels, either side */
#define HR_IMAGE_MAX_PIXELS (64u << 20)  /* w * h: a decompression bomb's bound */

typedef enum hr_image_format {
    HR_IMAGE_UNKNOWN,
    HR_IMAGE_JPEG,
    HR_IMAGE_PNG,
    HR_IMAGE_WEBP,
} hr_image_format;

typedef struct hr_image {
    int w, h;
    uint8_t *rgba; /* (h, w, 4), malloc'd */
    hr_image_format format;
    uint8_t hash[16]; /* XXH3-128 of (w, h, pixels): the image's identity */
} hr_image;

/* The format the bytes' signature names (UNKNOWN for none of them). */
hr_image_format hr_image_sniff(const uint8_t *p, size_t n);
/* "jpeg", "png", "webp", "unknown". */
const char *hr_image_format_name(hr_image_format f);

/* Decodes p[0..n) into *img (caller frees with hr_image_deinit). The format
 * comes from the bytes' signature, not from a declared media type.
 * HR_EUNSUPPORTED for an unknown format or an unsupported variant (CMYK
 * JPEG), HR_EFORMAT for corrupt or truncated bytes, HR_ERANGE for an image
 * past HR_IMAGE_MAX_SIDE / HR_IMAGE_MAX_PIXELS (refused before its pixels
 * are allocated), HR_ENOMEM. */
int hr_image_decode(const uint8_t *p, size_t n, hr_image *img, hr_error *err);
void hr_image_deinit(hr_image *img); /* NULL and a zeroed image allowed */

#endif
