/* data: URLs (RFC 2397) as OpenAI's image_url parts carry them:
 * data:<mime>[;param=value]*;base64,<base64 bytes>. */
#ifndef HR_MEDIA_DATAURL_H
#define HR_MEDIA_DATAURL_H

#include "hearth.h"

#include <stddef.h>
#include <stdint.h>

/* Decodes url[0..len). mime (mime_n bytes) gets the media type, lowercased
 * ("" when the URL names none). *out: the decoded bytes (malloc'd, caller
 * frees), *n their count. HR_EINVAL for a malformed URL or base64 (the
 * message says which and where), HR_EUNSUPPORTED for a URL that is not
 * base64, HR_ERANGE when the bytes would pass max_bytes, HR_ENOMEM. */
int hr_dataurl_decode(const char *url, size_t len, size_t max_bytes, char *mime, size_t mime_n,
                      uint8_t **out, size_t *n, hr_error *err);

/* Strict base64 (RFC 4648 alphabet, '=' padding optional at the end only).
 * dst holds at least len / 4 * 3 + 3 bytes; *n the bytes written. Returns
 * -1 on success, else the offset of the first bad character. */
long hr_base64_decode(const char *src, size_t len, uint8_t *dst, size_t *n);

#endif
