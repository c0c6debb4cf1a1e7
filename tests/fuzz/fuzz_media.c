/* libFuzzer: an image_url part's untrusted bytes. The input is decoded as
 * image bytes (JPEG, PNG, WebP through their libraries: an error or an
 * image within the size bounds, never a crash) and, as text, as a data: URL
 * (strict base64: never more bytes out than 3/4 of the text). */
#include "media/dataurl.h"
#include "media/image.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_image img;
    if (hr_image_decode(data, size, &img, NULL) == 0) {
        if (img.w <= 0 || img.h <= 0 || img.w > HR_IMAGE_MAX_SIDE || img.h > HR_IMAGE_MAX_SIDE ||
            !img.rgba)
            __builtin_trap();
        volatile uint8_t last = img.rgba[(size_t)img.w * img.h * 4 - 1];
        (void)last;
        hr_image_deinit(&img);
    }
    char mime[64];
    uint8_t *out = NULL;
    size_t n = 0;
    if (hr_dataurl_decode((const char *)data, size, 1 << 20, mime, sizeof mime, &out, &n, NULL) ==
        0) {
        if (!out || n == 0 || n > size || strlen(mime) >= sizeof mime)
            __builtin_trap();
        free(out);
    } else if (out) {
        __builtin_trap();
    }
    return 0;
}
