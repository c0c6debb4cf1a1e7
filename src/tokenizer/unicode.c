/* UTF-8, Unicode classes (as Rust's char methods define them), the GPT-2
 * byte map and PCRE2 regexes in Oniguruma's flavour. */
#include "tokenizer/internal.h"
#include "core/error.h"

#include <string.h>
#include <utf8proc.h>

/* ---- UTF-8 -------------------------------------------------------------- */

int hr__utf8_len(unsigned char c) {
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 1;
}

/* How many bytes of s[0..n) form a prefix of a well-formed sequence (k), and
 * how long that sequence must be (*need, 0 for an invalid lead byte). */
int hr__utf8_prefix(const unsigned char *s, size_t n, int *need) {
    unsigned c = s[0];
    if (c < 0x80) {
        *need = 1;
        return 1;
    }
    int len = hr__utf8_len((unsigned char)c);
    if (len == 1) {
        *need = 0;
        return 0;
    }
    *need = len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    int k = 1;
    for (; k < len && (size_t)k < n; k++) {
        unsigned b = s[k];
        if (b < lo || b > hi)
            break;
        lo = 0x80;
        hi = 0xBF;
    }
    return k;
}

int hr__utf8_decode(const char *s, size_t n, int32_t *cp) {
    if (!n)
        return 0;
    const unsigned char *u = (const unsigned char *)s;
    int need, k = hr__utf8_prefix(u, n, &need);
    if (!need || k != need)
        return 0;
    switch (need) {
    case 1: *cp = u[0]; break;
    case 2: *cp = (int32_t)(((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu)); break;
    case 3: *cp = (int32_t)(((u[0] & 0x0Fu) << 12) | ((u[1] & 0x3Fu) << 6) | (u[2] & 0x3Fu)); break;
    default:
        *cp = (int32_t)(((u[0] & 0x07u) << 18) | ((u[1] & 0x3Fu) << 12) |
                        ((u[2] & 0x3Fu) << 6) | (u[3] & 0x3Fu));
    }
    return need;
}

int hr__utf8_encode(int32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t hr__utf8_maximal_subpart(const char *s, size_t n) {
    if (!n)
        return 0;
    int need, k = hr__utf8_prefix((const unsigned char *)s, n, &need);
    if (need && k < need && (size_t)k == n)
        return (size_t)k; /* truncated, could still complete */
    return 0;
}

int hr__utf8_valid(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        int need, k = hr__utf8_prefix((const unsigned char *)s + i, n - i, &need);
        if (!need || k != need)
            return 0;
        i += (size_t)k;
    }
    return 1;
}

int hr__utf8_repair(const char *s, size_t n, hr__buf *out) {
    static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    int changed = 0;
    out->len = 0;
    if (hr__buf_reserve(out, n))
        return -1;
    size_t i = 0, run = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        int need, k = hr__utf8_prefix((const unsigned char *)s + i, n - i, &need);
        if (need && k == need) {
            i += (size_t)k;
            continue;
        }
        if (hr__buf_put(out, s + run, i - run) || hr__buf_put(out, fffd, 3))
            return -1;
        i += k > 0 ? (size_t)k : 1;
        run = i;
        changed = 1;
    }
    if (hr__buf_put(out, s + run, n - run))
        return -1;
    return changed;
}

/* ---- classes ------------------------------------------------------------ */

int hr__uni_is_space(int32_t c) {
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

int hr__uni_is_word(int32_t c) {
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
               (c >= 'A' && c <= 'Z') || c == '_';
    if (c == 0x200C || c == 0x200D)
        return 1;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

int hr__uni_is_numeric(int32_t c) {
    if (c < 0x80)
        return c >= '0' && c <= '9';
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL ||
           k == UTF8PROC_CATEGORY_NO;
}

int hr__uni_is_punct(int32_t c) {
    if (c < 0x80)
        return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) ||
               (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
    /* HF's table (Rust unicode_categories) predates Unicode 14: U+061D
     * ARABIC END OF TEXT MARK (Po since 14.0) is not punctuation there
     * (seen in the WordPiece fixture). */
    if (c == 0x61D)
        return 0;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        return 1;
    default:
        return 0;
    }
}

/* ---- GPT-2 byte map ----------------------------------------------------- */

/* Printable bytes map to themselves; the others, in order, to 256, 257... */
const uint16_t hr__byte_to_cp[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271,
    272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287,
    288, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
    48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
    80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
    96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
    112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289,
    290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305,
    306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321,
    322, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175,
    176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191,
    192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207,
    208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223,
    224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
    240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255,
};

static const uint8_t cp_to_byte_hi[68] = {
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
    32, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141,
    142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157,
    158, 159, 160, 173,
};

int hr__cp_to_byte(int32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) ||
        (cp >= 0xAE && cp <= 0xFF))
        return cp;
    if (cp < 256 || cp > 323)
        return -1;
    return cp_to_byte_hi[cp - 256];
}

/* ---- regexes ------------------------------------------------------------ */

/* Oniguruma's \s includes U+0085 (NEL), PCRE2 10.42's does not: widen it. */
static int translate(const char *p, size_t n, hr__buf *out) {
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            int rc = 0;
            if (d == 's')
                rc = hr__buf_put(out, in_class ? "\\s\\x{85}" : "[\\s\\x{85}]",
                                 in_class ? 8 : 10);
            else if (d == 'S' && !in_class)
                rc = hr__buf_put(out, "[^\\s\\x{85}]", 11);
            else
                rc = hr__buf_put(out, p + i, 2);
            if (rc)
                return rc;
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            if (hr__buf_put(out, p + i, 1))
                return HR_ENOMEM;
            /* a ']' or '^]' right after '[' is literal */
            if (i + 1 < n && p[i + 1] == '^') {
                if (hr__buf_put(out, "^", 1))
                    return HR_ENOMEM;
                i++;
            }
            if (i + 1 < n && p[i + 1] == ']') {
                if (hr__buf_put(out, "]", 1))
                    return HR_ENOMEM;
                i++;
            }
            continue;
        }
        if (c == ']' && in_class)
            in_class = 0;
        if (hr__buf_put(out, &c, 1))
            return HR_ENOMEM;
    }
    return 0;
}

pcre2_code *hr__regex_compile(const char *pattern, size_t len, int literal,
                              hr_error *err) {
    hr__buf b = {0};
    const char *pat = pattern;
    size_t plen = len;
    if (!literal) {
        if (translate(pattern, len, &b)) {
            free(b.p);
            hr_err(err, HR_ENOMEM, "out of memory");
            return NULL;
        }
        pat = b.p ? b.p : "";
        plen = b.len;
    }
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, plen, opts, &ec, &eo, NULL);
    free(b.p);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        hr_err(err, HR_EFORMAT, "bad regex '%.*s' at %zu: %s",
               (int)(len > 80 ? 80 : len), pattern, (size_t)eo, (char *)msg);
        return NULL;
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* interpreter if no JIT */
    return re;
}

int hr__regex_next(const pcre2_code *re, pcre2_match_data *md,
                   const char *s, size_t n, size_t start, size_t *ms,
                   size_t *me) {
    if (start > n)
        return 0;
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md,
                         NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, start,
                         PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0)
        return HR_ERANGE;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}
