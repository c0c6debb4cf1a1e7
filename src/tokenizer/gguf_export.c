/* A tokenizer.json as llama.cpp's GGUF vocabulary keys, as
 * convert_hf_to_gguf.py's _set_vocab_gpt2 + gguf-py's SpecialVocab write
 * them. Only byte-level BPE whose pre-tokenizer llama.cpp implements by
 * name has an equivalent (src/llama-vocab.cpp):
 *   Split(regex of Qwen2)  + ByteLevel  -> pre "qwen2"
 *   Split(regex of Llama3) + ByteLevel  -> pre "llama-bpe" (ignore_merges)
 *   ByteLevel(use_regex)                -> pre "gpt-2"
 * llama.cpp picks the pre-tokenizer by hashing the tokens of a test string;
 * here the regex itself is compared, which is the same decision for these
 * three. Everything is checked before the first key is written, so an
 * unsupported tokenizer leaves the writer untouched. */
#include "core/error.h"
#include "core/file.h"
#include "io/gguf_write.h"
#include "tokenizer/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5 };

/* The Oniguruma regexes of the Hugging Face tokenizer.json files. */
static const char HF_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char HF_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int is_type(json_t *o, const char *type) {
    const char *t = hr__json_str(o, "type");
    return t && !strcmp(t, type);
}

static int empty_or_null(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return !v || json_is_null(v) || (json_is_string(v) && !json_string_length(v)) ||
           (json_is_number(v) && json_number_value(v) == 0);
}

/* llama.cpp's pre-tokenizer name for root's pipeline, or NULL (err set). */
static const char *pre_name(json_t *root, hr_error *err) {
    json_t *model = json_object_get(root, "model"), *norm = json_object_get(root, "normalizer");
    json_t *pre = json_object_get(root, "pre_tokenizer"), *dec = json_object_get(root, "decoder");
    const char *what = NULL, *name = NULL;
    if (!is_type(model, "BPE") || hr__json_bool(model, "byte_fallback", 0) ||
        !empty_or_null(model, "dropout") || !empty_or_null(model, "continuing_subword_prefix") ||
        !empty_or_null(model, "end_of_word_suffix"))
        what = "a model other than plain BPE";
    else if (norm && !json_is_null(norm) && !is_type(norm, "NFC"))
        what = "a normalizer";
    else if (!is_type(dec, "ByteLevel"))
        what = "a decoder other than ByteLevel";
    if (what) {
        hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of a tokenizer with %s "
               "(llama.cpp's byte-level BPE has none)", what);
        return NULL;
    }
    if (is_type(pre, "ByteLevel")) {
        if (hr__json_bool(pre, "use_regex", 1) && !hr__json_bool(pre, "add_prefix_space", 0))
            name = "gpt-2";
    } else if (is_type(pre, "Sequence")) {
        json_t *v = json_object_get(pre, "pretokenizers");
        json_t *split = json_array_get(v, 0), *bl = json_array_get(v, 1);
        const char *re = hr__json_str(json_object_get(split, "pattern"), "Regex");
        const char *beh = hr__json_str(split, "behavior");
        if (json_array_size(v) == 2 && is_type(split, "Split") && re && beh &&
            !strcmp(beh, "Isolated") && !hr__json_bool(split, "invert", 0) &&
            is_type(bl, "ByteLevel") && !hr__json_bool(bl, "use_regex", 1) &&
            !hr__json_bool(bl, "add_prefix_space", 0))
            name = !strcmp(re, HF_QWEN2) ? "qwen2" : !strcmp(re, HF_LLAMA3) ? "llama-bpe" : NULL;
    }
    if (!name) {
        hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of this pre-tokenizer "
               "(llama.cpp equivalents exported: the Qwen2, Llama 3 and GPT-2 byte-level ones)");
        return NULL;
    }
    /* llama.cpp ignores merges (whole words in the vocabulary win) for llama3 only */
    if (hr__json_bool(model, "ignore_merges", 0) != !strcmp(name, "llama-bpe")) {
        hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of pre-tokenizer '%s' "
               "with ignore_merges %s", name, hr__json_bool(model, "ignore_merges", 0) ?
               "true" : "false");
        return NULL;
    }
    return name;
}

/* model.merges as llama.cpp's "a b" strings (a space inside a pair's part,
 * possible in the ["a", "b"] form, is written as U+0120, as gguf-py does),
 * concatenated NUL-separated into b; *n gets the count. */
static int merges_of(json_t *model, hr__buf *b, size_t *n, hr_error *err) {
    json_t *m = json_object_get(model, "merges"), *e;
    size_t i;
    *n = 0;
    if (!m || json_is_null(m))
        return 0; /* no merges: every token is one byte or an added token */
    if (!json_is_array(m))
        return hr_err(err, HR_EFORMAT, "tokenizer.json: model.merges is not an array");
    json_array_foreach(m, i, e) {
        int ok = 1;
        if (json_is_string(e)) {
            ok = !hr__buf_put(b, json_string_value(e), json_string_length(e) + 1);
        } else if (json_is_array(e) && json_array_size(e) == 2 &&
                   json_is_string(json_array_get(e, 0)) && json_is_string(json_array_get(e, 1))) {
            for (size_t k = 0; k < 2 && ok; k++) {
                const char *s = json_string_value(json_array_get(e, k));
                for (; *s && ok; s++)
                    ok = !(*s == ' ' ? hr__buf_put(b, "\xc4\xa0", 2) : hr__buf_put(b, s, 1));
                ok = ok && !hr__buf_put(b, k ? "" : " ", 1);
            }
        } else {
            return hr_err(err, HR_EFORMAT, "tokenizer.json: merge %zu is not \"a b\" or "
                          "[\"a\", \"b\"]", i);
        }
        if (!ok)
            return hr_err(err, HR_ENOMEM, "out of memory");
    }
    *n = json_array_size(m);
    return 0;
}

/* Pointers to the n NUL-separated strings of b (malloc'd array). */
static const char **split_strs(const hr__buf *b, size_t n) {
    const char **v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return NULL;
    const char *p = b->p;
    for (size_t i = 0; i < n; i++, p += strlen(p) + 1)
        v[i] = p;
    return v;
}

int hr_tokenizer_gguf_export(struct hr_gguf_w *w, const char *dir, int32_t n_vocab,
                             int32_t bos_dflt, int32_t eos_dflt, const char **pre,
                             hr_error *err) {
    char path[4096];
    hr_tokenizer *t = NULL;
    json_t *root = NULL;
    hr__buf toks = {0}, merges = {0};
    const char **tv = NULL, **mv = NULL;
    int32_t *types = NULL;
    size_t n_merges = 0;
    int rc = hr_path_join(path, sizeof path, dir, "tokenizer.json");
    if (rc)
        return hr_err(err, rc, "%s: path too long", dir);
    if (!hr_file_exists(path))
        return hr_err(err, HR_ENOTFOUND, "%s: not found", path);
    if ((rc = hr_tokenizer_load(&t, dir, err)))
        return rc;
    json_error_t je;
    if (!(root = json_load_file(path, 0, &je))) {
        rc = hr_err(err, HR_EFORMAT, "%s: %s (line %d)", path, je.text, je.line);
        goto done;
    }
    const char *name = pre_name(root, err);
    if (!name) {
        rc = err ? err->code : HR_EUNSUPPORTED;
        goto done;
    }
    if (t->n_vocab > n_vocab) {
        rc = hr_err(err, HR_EINVAL, "%s: %d token ids, more than the model's %d embedding rows",
                    path, t->n_vocab, n_vocab);
        goto done;
    }
    /* special tokens: tokenizer_config.json first, then config.json's ids
     * (SpecialVocab's order); the post-processor decides add_bos/add_eos */
    int32_t bos = t->bos >= 0 ? t->bos : bos_dflt, eos = t->eos >= 0 ? t->eos : eos_dflt;
    if (t->post.n_pre > 1 || t->post.n_post > 1 ||
        (t->post.n_pre && bos >= 0 && t->post.pre[0] != bos) ||
        (t->post.n_post && t->post.post[0] != eos)) {
        rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of a post-processor "
                    "that adds tokens other than BOS and EOS");
        goto done;
    }
    if (t->post.n_pre)
        bos = t->post.pre[0];
    if ((rc = merges_of(json_object_get(root, "model"), &merges, &n_merges, err)))
        goto done;
    if (!(types = malloc((size_t)n_vocab * sizeof *types))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    for (int32_t i = 0; i < n_vocab && !rc; i++) {
        size_t len = 0;
        const char *s = i < t->n_vocab ? hr_tokenizer_token_to_piece(t, i, &len) : NULL;
        char pad[32];
        if (!s) { /* an id the tokenizer lacks (embedding rows past it) */
            len = (size_t)snprintf(pad, sizeof pad, "[PAD%d]", i);
            s = pad;
            types[i] = TT_UNUSED;
        } else {
            int32_t a = hr__strmap_get(&t->added.by_content, s, len);
            types[i] = a < 0 || t->added.v[a].id != i ? TT_NORMAL
                       : t->added.v[a].special        ? TT_CONTROL
                                                      : TT_USER;
        }
        if (memchr(s, 0, len))
            rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of token %d "
                        "(contains a NUL byte)", i);
        else if (hr__buf_put(&toks, s, len) || hr__buf_put(&toks, "", 1))
            rc = hr_err(err, HR_ENOMEM, "out of memory");
    }
    if (rc)
        goto done;
    if (!(tv = split_strs(&toks, (size_t)n_vocab)) || !(mv = split_strs(&merges, n_merges))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    hr_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    hr_gguf_w_str(w, "tokenizer.ggml.pre", name);
    hr_gguf_w_arr_str(w, "tokenizer.ggml.tokens", tv, (size_t)n_vocab);
    hr_gguf_w_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)n_vocab);
    hr_gguf_w_arr_str(w, "tokenizer.ggml.merges", mv, n_merges);
    if (bos >= 0)
        hr_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0)
        hr_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (t->unk >= 0)
        hr_gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk);
    if (t->pad >= 0)
        hr_gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad);
    hr_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", t->post.n_pre == 1);
    hr_gguf_w_bool(w, "tokenizer.ggml.add_eos_token", t->post.n_post == 1);
    if (t->chat_template)
        hr_gguf_w_str(w, "tokenizer.chat_template", t->chat_template);
    if (pre)
        *pre = name;
done:
    free(mv);
    free(tv);
    free(types);
    free(toks.p);
    free(merges.p);
    json_decref(root);
    hr_tokenizer_free(t);
    return rc;
}
