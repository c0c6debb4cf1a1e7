/* BERT's tokenizer parts, as HF tokenizers does them: the WordPiece model,
 * the BertNormalizer and the WordPiece decoder's clean-up. (The
 * BertPreTokenizer is whitespace split + punctuation isolation, pretok.c;
 * BertProcessing / TemplateProcessing are in postproc.c.) */
#include "tokenizer/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- WordPiece model ---------------------------------------------------- */

int hr__wordpiece_encode(const hr__bpe *b, const char *s, size_t n, hr_tokens *out) {
    size_t chars = 0;
    for (size_t i = 0; i < n; i += (size_t)hr__utf8_len((unsigned char)s[i]))
        chars++;
    if (chars > (size_t)b->wp_max_chars)
        return b->unk_id >= 0 ? hr_tokens_push(out, b->unk_id) : HR_EFORMAT;
    size_t n0 = out->n, pl = (size_t)b->wp_prefix_len;
    char stackbuf[256];
    char *buf = n + pl <= sizeof stackbuf ? stackbuf : malloc(n + pl);
    if (!buf)
        return HR_ENOMEM;
    memcpy(buf, b->wp_prefix, pl);
    int rc = 0;
    size_t start = 0;
    while (start < n) {
        size_t end = n;
        int32_t id = -1;
        while (start < end) {
            const char *k = s + start;
            size_t kl = end - start;
            if (start > 0) {
                memcpy(buf + pl, s + start, end - start);
                k = buf;
                kl += pl;
            }
            if ((id = hr__strmap_get(&b->vocab, k, kl)) >= 0)
                break;
            /* drop the last code point */
            size_t e = end - 1;
            while (e > start && ((unsigned char)s[e] & 0xC0) == 0x80)
                e--;
            end = e;
        }
        if (id < 0) { /* no piece matches: the whole word is unk */
            out->n = n0;
            rc = b->unk_id >= 0 ? hr_tokens_push(out, b->unk_id) : HR_EFORMAT;
            break;
        }
        if ((rc = hr_tokens_push(out, id)))
            break;
        start = end;
    }
    if (buf != stackbuf)
        free(buf);
    return rc;
}

/* ---- BertNormalizer ----------------------------------------------------- */

static int is_chinese(int32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* HF's is_control: Cc Cf Cs Co, minus \t \n \r. Unassigned code points (Cn)
 * stay (the oracle keeps U+0382, U+0E5E, U+FFFF, U+10FFFF). */
static int is_control(int32_t c) {
    if (c == '\t' || c == '\n' || c == '\r')
        return 0;
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF ||
           k == UTF8PROC_CATEGORY_CS || k == UTF8PROC_CATEGORY_CO;
}

static int put_cp(hr__buf *b, int32_t cp) {
    char u[4];
    return hr__buf_put(b, u, (size_t)hr__utf8_encode(cp, u));
}

/* clean_text and handle_chinese_chars, one pass */
static int clean_chinese(const hr__norm *x, const hr__buf *in, hr__buf *out) {
    out->len = 0;
    for (size_t i = 0; i < in->len;) {
        int32_t cp;
        int k = hr__utf8_decode(in->p + i, in->len - i, &cp);
        if (!k)
            return HR_EINVAL;
        i += (size_t)k;
        int rc = 0;
        if (x->clean && (cp == 0 || cp == 0xFFFD || is_control(cp)))
            continue;
        if (x->clean && (cp == '\t' || cp == '\n' || cp == '\r' || hr__uni_is_space(cp)))
            cp = ' ';
        if (x->chinese && is_chinese(cp))
            rc = hr__buf_put(out, " ", 1) || put_cp(out, cp) || hr__buf_put(out, " ", 1);
        else
            rc = put_cp(out, cp);
        if (rc)
            return HR_ENOMEM;
    }
    return 0;
}

/* NFD, then drop nonspacing marks (Mn) */
static int strip_accents(const hr__buf *in, hr__buf *out) {
    out->len = 0;
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)in->p, (utf8proc_ssize_t)in->len,
                                      &d, (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
    if (n < 0)
        return HR_ENOMEM;
    int rc = 0;
    for (utf8proc_ssize_t i = 0; i < n && !rc;) {
        int32_t cp;
        int k = hr__utf8_decode((const char *)d + i, (size_t)(n - i), &cp);
        if (!k) {
            rc = HR_EINVAL;
            break;
        }
        if (utf8proc_category(cp) != UTF8PROC_CATEGORY_MN)
            rc = hr__buf_put(out, d + i, (size_t)k);
        i += k;
    }
    free(d);
    return rc;
}

/* char by char to_lowercase (NormalizedString::lowercase: no final-sigma rule) */
static int lower_chars(const hr__buf *in, hr__buf *out) {
    out->len = 0;
    for (size_t i = 0; i < in->len;) {
        int32_t cp;
        int k = hr__utf8_decode(in->p + i, in->len - i, &cp);
        if (!k)
            return HR_EINVAL;
        i += (size_t)k;
        int rc = cp == 0x130 ? hr__buf_put(out, "i\xcc\x87", 3) : put_cp(out, utf8proc_tolower(cp));
        if (rc)
            return HR_ENOMEM;
    }
    return 0;
}

int hr__bert_norm(const hr__norm *x, const hr__buf *in, hr__buf *out, hr__buf *tmp) {
    int rc;
    if (x->clean || x->chinese) {
        if ((rc = clean_chinese(x, in, out)))
            return rc;
    } else {
        out->len = 0;
        if (hr__buf_put(out, in->p, in->len))
            return HR_ENOMEM;
    }
    if (x->strip_accents) {
        if ((rc = strip_accents(out, tmp)))
            return rc;
        hr__buf t = *out;
        *out = *tmp;
        *tmp = t;
    }
    if (x->lower) {
        if ((rc = lower_chars(out, tmp)))
            return rc;
        hr__buf t = *out;
        *out = *tmp;
        *tmp = t;
    }
    return 0;
}

/* ---- WordPiece decoder clean-up ----------------------------------------- */

static const struct { const char *from, *to; } WP_CLEAN[] = {
    {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
    {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
};

int hr__wordpiece_cleanup(hr__buf *t, hr__buf *tmp) {
    for (size_t k = 0; k < sizeof WP_CLEAN / sizeof WP_CLEAN[0]; k++) {
        size_t fl = strlen(WP_CLEAN[k].from), tl = strlen(WP_CLEAN[k].to);
        if (t->len < fl || !memmem(t->p, t->len, WP_CLEAN[k].from, fl))
            continue;
        tmp->len = 0;
        size_t i = 0;
        const char *f;
        while (i < t->len && (f = memmem(t->p + i, t->len - i, WP_CLEAN[k].from, fl))) {
            size_t at = (size_t)(f - t->p);
            if (hr__buf_put(tmp, t->p + i, at - i) || hr__buf_put(tmp, WP_CLEAN[k].to, tl))
                return HR_ENOMEM;
            i = at + fl;
        }
        if (hr__buf_put(tmp, t->p + i, t->len - i))
            return HR_ENOMEM;
        hr__buf sw = *t;
        *t = *tmp;
        *tmp = sw;
    }
    return 0;
}
