/* URL to image (media/media.h). */
#include "media/media.h"
#include "media/dataurl.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

int hr_media_load_image(const char *url, const hr_media_opts *o, hr_image *img, hr_error *err) {
    memset(img, 0, sizeof *img);
    uint8_t *bytes = NULL;
    size_t n = 0;
    char mime[64];
    int rc;
    size_t max = o->max_bytes ? o->max_bytes : HR_MEDIA_DEFAULT_MAX_BYTES;
    if (!strncasecmp(url, "data:", 5)) {
        rc = hr_dataurl_decode(url, strlen(url), max, mime, sizeof mime, &bytes, &n, err);
        if (!rc && mime[0] && strncmp(mime, "image/", 6)) {
            free(bytes);
            return hr_err(err, HR_EINVAL, "the data: URL's media type is '%s', not an image", mime);
        }
    } else {
        rc = hr_media_fetch(url, o, &bytes, &n, mime, sizeof mime, err);
    }
    if (rc)
        return rc;
    rc = hr_image_decode(bytes, n, img, err);
    free(bytes);
    return rc;
}
