/* GGUF vocabularies (tokenizer.ggml.*) as hearth tokenizers, with
 * llama.cpp's semantics (src/llama-vocab.cpp):
 *   "gpt2":   byte-level BPE; the pre-tokenizer regex is chosen by
 *             tokenizer.ggml.pre (qwen2, llama-bpe, gpt-2/default).
 *   "llama":  SentencePiece: a space is prepended to every text fragment
 *             (add_space_prefix), spaces become U+2581, then pairs merge by
 *             the highest score; unknown characters become <0xXX> bytes.
 *   "gemma4": BPE on raw UTF-8 with spaces as U+2581, split at newlines.
 * Token types CONTROL and UNKNOWN become special added tokens, USER_DEFINED
 * non-special ones, so HR_TOK_SPLIT_SPECIAL is llama.cpp's
 * parse_special=false; "gpt2" UNUSED tokens are holes in the id space. Everything is built from the same components as
 * tokenizer.json, described here as small JSON objects. */
#include "tokenizer/internal.h"
#include "core/error.h"
#include "io/gguf.h"

#include <stdlib.h>
#include <string.h>

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static const char RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char RE_LLAMA3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int str_key(const hr_gguf *g, const char *key, char *out, size_t n) {
    const char *s;
    size_t l;
    if (hr_gguf_key_str(g, key, &s, &l) || l >= n)
        return -1;
    memcpy(out, s, l);
    out[l] = 0;
    return 0;
}

static int bool_key(const hr_gguf *g, const char *key, int dflt) {
    int64_t i = hr_gguf_find(g, key);
    int v;
    return i >= 0 && !hr_gguf_get_bool(g, i, &v) ? v : dflt;
}

static int32_t id_key(const hr_gguf *g, const char *key, int32_t n) {
    int64_t v;
    return !hr_gguf_key_int(g, key, &v) && v >= 0 && v < n ? (int32_t)v : -1;
}

/* Parse a component from a jansson value (stolen). */
static int component(int (*parse)(void *, json_t *, hr_error *), void *dst, json_t *j,
                     hr_error *err) {
    if (!j)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int rc = parse(dst, j, err);
    json_decref(j);
    return rc;
}

static int p_norm(void *d, json_t *j, hr_error *e) { return hr__norm_parse(d, j, e); }
static int p_pre(void *d, json_t *j, hr_error *e) { return hr__pretok_parse(d, j, e); }
static int p_dec(void *d, json_t *j, hr_error *e) { return hr__decoder_parse(d, j, e); }

/* skip_unused: UNUSED entries (convert_hf_to_gguf.py's "[PAD<id>]" rows past
 * a BPE tokenizer) are holes, as ids past a tokenizer.json's vocabulary are:
 * BPE never produces them and they decode to nothing. */
static int load_vocab(hr_tokenizer *t, const hr_gguf *g, int64_t ki, uint64_t n,
                      int with_scores, int skip_unused, hr_error *err) {
    int64_t ti = hr_gguf_find(g, "tokenizer.ggml.token_type");
    int64_t si = hr_gguf_find(g, "tokenizer.ggml.scores");
    hr_gguf_type et;
    uint64_t m;
    if (ti >= 0 && (hr_gguf_get_arr(g, ti, &et, &m) || m != n || et == HR_GGUF_STRING))
        return hr_err(err, HR_EFORMAT, "tokenizer.ggml.token_type: not %llu integers",
                      (unsigned long long)n);
    if (with_scores) {
        if (si < 0 || hr_gguf_get_arr(g, si, &et, &m) || m != n ||
            (et != HR_GGUF_FLOAT32 && et != HR_GGUF_FLOAT64))
            return hr_err(err, HR_EFORMAT, "tokenizer.ggml.scores: not %llu floats",
                          (unsigned long long)n);
        if (!(t->bpe.scores = malloc(n * sizeof *t->bpe.scores)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        t->bpe.n_scores = (int32_t)n;
    }
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t l;
        int64_t type = TT_NORMAL;
        hr_gguf_arr_str(g, ki, i, &s, &l);
        if (ti >= 0)
            hr_gguf_arr_int(g, ti, i, &type);
        if (with_scores) {
            double sc;
            hr_gguf_arr_float(g, si, i, &sc);
            t->bpe.scores[i] = (float)sc;
        }
        if (skip_unused && type == TT_UNUSED)
            continue;
        if (hr__strmap_put(&t->bpe.vocab, s, l, (int32_t)i))
            return hr_err(err, HR_ENOMEM, "out of memory");
        if ((type == TT_CONTROL || type == TT_UNKNOWN || type == TT_USER) && l &&
            hr__added_add(&t->added, s, l, (int32_t)i, type != TT_USER, 0, 0, 0, 0))
            return hr_err(err, HR_ENOMEM, "out of memory");
    }
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        t->bpe.byte_id[b] = hr__strmap_get(&t->bpe.vocab, s, 6);
    }
    return 0;
}

static int load_merges(hr_tokenizer *t, const hr_gguf *g, hr_error *err) {
    int64_t mi = hr_gguf_find(g, "tokenizer.ggml.merges");
    hr_gguf_type et;
    uint64_t n;
    if (mi < 0 || hr_gguf_get_arr(g, mi, &et, &n) || et != HR_GGUF_STRING)
        return hr_err(err, HR_EFORMAT, "tokenizer.ggml.merges: missing or not strings");
    hr__buf cat = {0};
    int rc = 0;
    for (uint64_t i = 0; i < n && !rc && i < UINT32_MAX; i++) {
        const char *s;
        size_t l;
        hr_gguf_arr_str(g, mi, i, &s, &l);
        const char *sp = l > 1 ? memchr(s + 1, ' ', l - 1) : NULL; /* find(' ', 1) */
        if (!sp)
            continue;
        size_t al = (size_t)(sp - s), bl = l - al - 1;
        int32_t a = hr__strmap_get(&t->bpe.vocab, s, al);
        int32_t b = hr__strmap_get(&t->bpe.vocab, sp + 1, bl);
        cat.len = 0;
        if (hr__buf_put(&cat, s, al) || hr__buf_put(&cat, sp + 1, bl)) {
            rc = hr_err(err, HR_ENOMEM, "out of memory");
            break;
        }
        int32_t c = hr__strmap_get(&t->bpe.vocab, cat.p, cat.len);
        if (a < 0 || b < 0 || c < 0)
            continue; /* cannot produce a token */
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b, old;
        if (hr__u64map_get(&t->bpe.merges, key, &old))
            continue; /* llama.cpp keeps the first rank of a pair */
        if (hr__u64map_put(&t->bpe.merges, key, i << 32 | (uint32_t)c))
            rc = hr_err(err, HR_ENOMEM, "out of memory");
    }
    free(cat.p);
    return rc;
}

int hr__tok_from_gguf(hr_tokenizer *t, const hr_gguf *g, hr_error *err) {
    char model[64], pre[64];
    if (str_key(g, "tokenizer.ggml.model", model, sizeof model))
        return hr_err(err, HR_EFORMAT, "no tokenizer.ggml.model");
    if (str_key(g, "tokenizer.ggml.pre", pre, sizeof pre))
        strcpy(pre, "default");
    int64_t ki = hr_gguf_find(g, "tokenizer.ggml.tokens");
    hr_gguf_type et;
    uint64_t n;
    if (ki < 0 || hr_gguf_get_arr(g, ki, &et, &n) || et != HR_GGUF_STRING || !n ||
        n > INT32_MAX / 2)
        return hr_err(err, HR_EFORMAT, "tokenizer.ggml.tokens: missing or not strings");
    int spm = !strcmp(model, "llama"), gemma4 = !strcmp(model, "gemma4");
    int gpt2 = !strcmp(model, "gpt2");
    if (!spm && !gemma4 && !gpt2)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF tokenizer model '%s'", model);
    int rc = load_vocab(t, g, ki, n, spm, gpt2, err);
    if (rc)
        return rc;
    t->bpe.unk_id = id_key(g, "tokenizer.ggml.unknown_token_id", (int32_t)n);
    int add_bos_dflt = 0;
    if (spm) {
        int prefix = bool_key(g, "tokenizer.ggml.add_space_prefix", 1);
        if (prefix) {
            rc = component(p_pre, &t->pretok,
                           json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace",
                                     "replacement", "\xe2\x96\x81", "prepend_scheme",
                                     "always", "split", 0), err);
            if (!rc)
                t->pretok.v[0].prepend = 3; /* always, even before a space */
        } else {
            rc = component(p_norm, &t->norm,
                           json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern",
                                     "String", " ", "content", "\xe2\x96\x81"), err);
        }
        if (!rc)
            rc = component(p_dec, &t->dec,
                           json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}",
                                     "type", "Sequence", "decoders", "type", "Replace", "pattern",
                                     "String", "\xe2\x96\x81", "content", " ", "type",
                                     "ByteFallback", "type", "Fuse", "type", "Strip", "content",
                                     " ", "start", prefix ? 1 : 0, "stop", 0), err);
        add_bos_dflt = 1;
    } else if (gemma4) {
        t->bpe.byte_fallback = 1;
        t->bpe.newline_words_whole = 1;
        rc = load_merges(t, g, err);
        if (!rc)
            rc = component(p_norm, &t->norm,
                           json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern",
                                     "String", " ", "content", "\xe2\x96\x81"), err);
        if (!rc)
            rc = component(p_pre, &t->pretok,
                           json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern",
                                     "Regex", "[^\\n]+|[\\n]+", "behavior", "Isolated",
                                     "invert", 0), err);
        if (!rc)
            rc = component(p_dec, &t->dec,
                           json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}]}", "type",
                                     "Sequence", "decoders", "type", "Replace", "pattern",
                                     "String", "\xe2\x96\x81", "content", " ", "type",
                                     "ByteFallback", "type", "Fuse"), err);
        add_bos_dflt = 1;
    } else {
        const char *re;
        if (!strcmp(pre, "qwen2"))
            re = RE_QWEN2;
        else if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3"))
            re = RE_LLAMA3, t->bpe.ignore_merges = 1, add_bos_dflt = 1;
        else if (!strcmp(pre, "gpt-2") || !strcmp(pre, "default"))
            re = RE_GPT2;
        else
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF pre-tokenizer '%s'", pre);
        rc = load_merges(t, g, err);
        if (!rc)
            rc = component(p_pre, &t->pretok,
                           json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b}]}",
                                     "type", "Sequence", "pretokenizers", "type", "Split",
                                     "pattern", "Regex", re, "behavior", "Isolated", "invert",
                                     0, "type", "ByteLevel", "add_prefix_space", 0, "use_regex",
                                     0), err);
        if (!rc)
            rc = component(p_dec, &t->dec, json_pack("{s:s}", "type", "ByteLevel"), err);
    }
    if (rc)
        return rc;
    pcre2_match_data *md = pcre2_match_data_create(32, NULL);
    if (!md)
        return hr_err(err, HR_ENOMEM, "out of memory");
    rc = hr__added_build(&t->added, &t->norm, md, err);
    pcre2_match_data_free(md);
    if (rc || (rc = hr__tok_build_table(t, err)))
        return rc;
    t->bos = id_key(g, "tokenizer.ggml.bos_token_id", t->n_vocab);
    t->eos = id_key(g, "tokenizer.ggml.eos_token_id", t->n_vocab);
    t->pad = id_key(g, "tokenizer.ggml.padding_token_id", t->n_vocab);
    t->unk = t->bpe.unk_id;
    int32_t *one = NULL;
    if (bool_key(g, "tokenizer.ggml.add_bos_token", add_bos_dflt) && t->bos >= 0) {
        if (!(one = malloc(sizeof *one)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        one[0] = t->bos;
        t->post.pre = one;
        t->post.n_pre = 1;
    }
    if (bool_key(g, "tokenizer.ggml.add_eos_token", 0) && t->eos >= 0) {
        if (!(one = malloc(sizeof *one)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        one[0] = t->eos;
        t->post.post = one;
        t->post.n_post = 1;
    }
    const char *ct;
    size_t cl;
    if (!hr_gguf_key_str(g, "tokenizer.chat_template", &ct, &cl)) {
        if (!(t->chat_template = malloc(cl + 1)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        memcpy(t->chat_template, ct, cl);
        t->chat_template[cl] = 0;
    }
    return 0;
}

int hr__tok_load_gguf_path(hr_tokenizer **out, const char *path, hr_error *err);
int hr__tok_load_gguf_path(hr_tokenizer **out, const char *path, hr_error *err) {
    *out = NULL;
    hr_gguf *g = NULL;
    int rc = hr_gguf_open(&g, path, err);
    if (rc)
        return rc;
    hr_tokenizer *t = hr__tok_alloc();
    if (!t) {
        hr_gguf_close(g);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    rc = hr__tok_from_gguf(t, g, err);
    hr_gguf_close(g);
    if (rc) {
        hr_err_wrap(err, "%s", path);
        hr_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
