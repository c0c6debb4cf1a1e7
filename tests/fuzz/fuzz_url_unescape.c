/* libFuzzer: the server's URL decoding (src/server/guard.c), run on every
 * request line before routing: never longer than its input, never a NUL
 * byte inside (a "%00" stays as it is), and "%XX" of anything else decoded. */
#include "server/http.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    size_t in = strlen(s); /* libmicrohttpd hands over a C string */
    size_t out = hr__unescape(NULL, NULL, s);
    if (out > in || strlen(s) != out)
        __builtin_trap();
    free(s);
    return 0;
}
