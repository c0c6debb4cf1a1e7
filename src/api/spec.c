/* Speculative decoding at the API layer: the draft model's tokenizer
 * check, and the mode names of --spec and the request's "spec" field
 * (docs/speculative.md). */
#include "api/api.h"
#include "core/error.h"

#include <string.h>
#include <strings.h>

int hr__spec_mode_parse(const char *name, const char *what, int *mode, hr_error *err) {
    if (!strcasecmp(name, "off") || !strcasecmp(name, "none"))
        *mode = HR_SPEC_OFF;
    else if (!strcasecmp(name, "ngram") || !strcasecmp(name, "prompt-lookup"))
        *mode = HR_SPEC_NGRAM;
    else if (!strcasecmp(name, "draft"))
        *mode = HR_SPEC_DRAFT;
    else
        return hr_err(err, HR_EINVAL, "%s must be off, ngram or draft, not '%s'", what, name);
    return 0;
}

/* Printable form of a vocabulary string for an error message. */
static void show(char *buf, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; s && i < n && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        o += (size_t)snprintf(buf + o, cap - o, c < 0x20 || c == 0x7f ? "\\x%02x" : "%c", c);
    }
    buf[o] = 0;
    if (!s)
        snprintf(buf, cap, "(none)");
}

int hr__spec_check_tokenizers(const hr_tokenizer *model, const hr_tokenizer *draft,
                              hr_error *err) {
    int32_t nm = hr_tokenizer_n_vocab(model), nd = hr_tokenizer_n_vocab(draft);
    int32_t n = nm < nd ? nm : nd;
    for (int32_t id = 0; id < n; id++) {
        size_t la = 0, lb = 0;
        const char *a = hr_tokenizer_token_to_piece(model, id, &la);
        const char *b = hr_tokenizer_token_to_piece(draft, id, &lb);
        if ((a == NULL) != (b == NULL) || la != lb || (a && memcmp(a, b, la))) {
            char sa[64], sb[64];
            show(sa, sizeof sa, a, la);
            show(sb, sizeof sb, b, lb);
            return hr_err(err, HR_EINVAL, "the draft model's tokenizer differs from the "
                          "model's: token %d is '%s' in the model, '%s' in the draft", id, sa,
                          sb);
        }
    }
    if (nm != nd)
        return hr_err(err, HR_EINVAL, "the draft model's tokenizer differs from the model's: "
                      "%d tokens in the model, %d in the draft", nm, nd);
    if (hr_tokenizer_eos(model) != hr_tokenizer_eos(draft))
        return hr_err(err, HR_EINVAL, "the draft model's tokenizer differs from the model's: "
                      "end-of-sequence token %d in the model, %d in the draft",
                      hr_tokenizer_eos(model), hr_tokenizer_eos(draft));
    return 0;
}
