/* An image_url part's URL to a decoded image: data: URLs decoded in place,
 * http(s) URLs fetched through the SSRF guard (media/fetch.h), the bytes
 * decoded by media/image.h. */
#ifndef HR_MEDIA_MEDIA_H
#define HR_MEDIA_MEDIA_H

#include "media/fetch.h"
#include "media/image.h"

/* Loads url into *img (caller frees with hr_image_deinit). Errors as
 * hr_dataurl_decode, hr_media_fetch and hr_image_decode give them; a
 * data: URL or reply whose media type is not image/ is HR_EINVAL. */
int hr_media_load_image(const char *url, const hr_media_opts *o, hr_image *img, hr_error *err);

#endif
