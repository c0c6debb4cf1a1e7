#include "api/stop.h"
#include "hearth.h"

#include <stdlib.h>
#include <string.h>

int hr_stop_init(hr_stop *s, const char *const *strs, int n) {
    memset(s, 0, sizeof *s);
    if (n > 0 && !(s->strs = calloc((size_t)n, sizeof *s->strs)))
        return HR_ENOMEM;
    for (int i = 0; i < n; i++) {
        if (!strs[i] || !strs[i][0])
            continue;
        if (!(s->strs[s->n] = strdup(strs[i]))) {
            hr_stop_deinit(s);
            return HR_ENOMEM;
        }
        s->n++;
    }
    return 0;
}

void hr_stop_deinit(hr_stop *s) {
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        free(s->strs[i]);
    free(s->strs);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

/* Length of the longest suffix of buf[0..len) that is a proper prefix of a
 * stop string. */
static size_t held_suffix(const hr_stop *s) {
    size_t best = 0;
    for (int i = 0; i < s->n; i++) {
        size_t sl = strlen(s->strs[i]);
        size_t k = sl - 1 < s->len ? sl - 1 : s->len;
        for (; k > best; k--)
            if (!memcmp(s->buf + s->len - k, s->strs[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

int hr_stop_push(hr_stop *s, const char *text, size_t len, const char **emit,
                 size_t *emit_len) {
    *emit = "";
    *emit_len = 0;
    if (s->stopped)
        return 1;
    /* drop what the previous call handed out */
    if (s->out_off) {
        memmove(s->buf, s->buf + s->out_off, s->len - s->out_off);
        s->len -= s->out_off;
        s->out_off = 0;
    }
    if (s->len + len + 1 > s->cap) {
        size_t cap = (s->len + len + 1) * 2;
        char *b = realloc(s->buf, cap);
        if (!b)
            return HR_ENOMEM;
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, text, len);
    s->len += len;
    s->buf[s->len] = 0;
    /* the earliest complete stop string wins */
    size_t cut = (size_t)-1;
    int which = -1;
    for (int i = 0; i < s->n; i++) {
        const char *hit = memmem(s->buf, s->len, s->strs[i], strlen(s->strs[i]));
        if (hit && (size_t)(hit - s->buf) < cut) {
            cut = (size_t)(hit - s->buf);
            which = i;
        }
    }
    if (cut != (size_t)-1) {
        s->stopped = 1;
        s->which = which;
        *emit = s->buf;
        *emit_len = cut;
        s->out_off = 0;
        s->len = cut;
        return 1;
    }
    size_t keep = held_suffix(s);
    *emit = s->buf;
    *emit_len = s->len - keep;
    s->out_off = s->len - keep;
    return 0;
}

const char *hr_stop_matched(const hr_stop *s) {
    return s->stopped ? s->strs[s->which] : NULL;
}

void hr_stop_flush(hr_stop *s, const char **emit, size_t *emit_len) {
    if (s->stopped) {
        *emit = "";
        *emit_len = 0;
        return;
    }
    *emit = s->buf ? s->buf + s->out_off : "";
    *emit_len = s->len - s->out_off;
    s->out_off = s->len;
}
