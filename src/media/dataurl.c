/* data: URL decoding (media/dataurl.h). */
#include "media/dataurl.h"
#include "core/error.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long hr_base64_decode(const char *src, size_t len, uint8_t *dst, size_t *n) {
    size_t end = len, k = 0;
    /* at most two '=' at the very end, and only where a quantum ends */
    while (end > 0 && len - end < 2 && src[end - 1] == '=')
        end--;
    if (end < len && len % 4)
        return (long)end;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < end; i++) {
        int v = b64_value((unsigned char)src[i]);
        if (v < 0)
            return (long)i;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            dst[k++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (bits >= 6 || (bits && acc)) /* a lone 6-bit tail, or nonzero pad bits */
        return (long)end;
    *n = k;
    return -1;
}

int hr_dataurl_decode(const char *url, size_t len, size_t max_bytes, char *mime, size_t mime_n,
                      uint8_t **out, size_t *n, hr_error *err) {
    *out = NULL;
    *n = 0;
    if (mime_n)
        mime[0] = 0;
    if (len < 5 || strncasecmp(url, "data:", 5))
        return hr_err(err, HR_EINVAL, "not a data: URL");
    const char *comma = memchr(url, ',', len);
    if (!comma)
        return hr_err(err, HR_EINVAL, "data: URL without ',' before its data");
    const char *meta = url + 5;
    size_t ml = (size_t)(comma - meta);
    /* the media type: up to the first ';' */
    const char *semi = memchr(meta, ';', ml);
    size_t tl = semi ? (size_t)(semi - meta) : ml;
    if (tl >= mime_n)
        return hr_err(err, HR_EINVAL, "data: URL media type longer than %zu bytes", mime_n - 1);
    for (size_t i = 0; i < tl; i++) {
        unsigned char c = (unsigned char)meta[i];
        if (c <= 0x20 || c >= 0x7f)
            return hr_err(err, HR_EINVAL, "data: URL media type has a bad byte at %zu", 5 + i);
        mime[i] = (char)tolower(c);
    }
    mime[tl] = 0;
    bool base64 = ml >= 7 && !strncasecmp(comma - 7, ";base64", 7) && (size_t)(comma - 7 - meta) >= tl;
    if (!base64)
        return hr_err(err, HR_EUNSUPPORTED,
                      "not supported yet: data: URLs that are not base64 (add ';base64')");
    const char *b = comma + 1;
    size_t bl = len - (size_t)(b - url);
    if (bl / 4 * 3 > max_bytes + 3)
        return hr_err(err, HR_ERANGE, "data: URL holds more than %zu bytes", max_bytes);
    uint8_t *buf = malloc(bl / 4 * 3 + 3);
    if (!buf)
        return hr_err(err, HR_ENOMEM, "out of memory");
    size_t k = 0;
    long bad = hr_base64_decode(b, bl, buf, &k);
    if (bad >= 0) {
        free(buf);
        return hr_err(err, HR_EINVAL, "data: URL has bad base64 at byte %zu",
                      (size_t)(b - url) + (size_t)bad);
    }
    if (k > max_bytes) {
        free(buf);
        return hr_err(err, HR_ERANGE, "data: URL holds more than %zu bytes", max_bytes);
    }
    if (k == 0) {
        free(buf);
        return hr_err(err, HR_EINVAL, "data: URL holds no bytes");
    }
    *out = buf;
    *n = k;
    return 0;
}
