/* libFuzzer: the router's view of a request body (src/route/prefix.c),
 * run on every generation request a client sends to `hearth route`: any
 * bytes to any generation route either are refused (not a JSON object) or
 * give chunk hashes within bounds, the conversation's chunk at most one
 * past the last whole chunk, and NUL-terminated strings. The first byte
 * picks the route and the chunk size. */
#include "route/prefix.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const urls[] = {"/v1/chat/completions", "/v1/completions",
                                       "/v1/messages", "/v1/responses"};
    if (size < 1)
        return 0;
    const char *url = urls[data[0] & 3];
    size_t chunk = 16u << (data[0] >> 2 & 3);
    hr_prefix *px = malloc(sizeof *px);
    if (!px)
        return 0;
    if (hr_prefix_of(url, (const char *)data + 1, size - 1, chunk, px)) {
        if (px->n_chunks < 0 || px->n_chunks > HR_PREFIX_MAX_CHUNKS || px->conv_chunk < 0 ||
            (size_t)px->conv_chunk * chunk > size * 8 + 4096 ||
            strnlen(px->model, sizeof px->model) == sizeof px->model ||
            strnlen(px->prev_id, sizeof px->prev_id) == sizeof px->prev_id)
            __builtin_trap();
    }
    free(px);
    return 0;
}
