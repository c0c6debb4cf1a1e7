/* The tokenizer: loading tokenizer.json (+ tokenizer_config.json), the
 * encode pipeline, decode and accessors. */
#include "tokenizer/internal.h"
#include "core/error.h"
#include "core/file.h"

#include <stdlib.h>
#include <string.h>

/* ---- json helpers ------------------------------------------------------- */

const char *hr__json_str(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int hr__json_bool(json_t *o, const char *key, int dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* ---- lifecycle ---------------------------------------------------------- */

hr_tokenizer *hr__tok_alloc(void) {
    hr_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    if (hr__bpe_init(&t->bpe)) {
        free(t);
        return NULL;
    }
    t->bos = t->eos = t->pad = t->unk = -1;
    return t;
}

void hr_tokenizer_free(hr_tokenizer *t) {
    if (!t)
        return;
    free(t->pool);
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_special);
    hr__bpe_free(&t->bpe);
    hr__norm_free(&t->norm);
    hr__pretok_free(&t->pretok);
    hr__added_free(&t->added);
    hr__postproc_free(&t->post);
    hr__decoder_free(&t->dec);
    free(t->chat_template);
    json_decref(t->config);
    free(t);
}

/* ---- the ID table ------------------------------------------------------- */

int hr__tok_build_table(hr_tokenizer *t, hr_error *err) {
    const hr__strmap *v = &t->bpe.vocab;
    int64_t n = 0;
    size_t bytes = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (v->ent[i].val + 1 > n)
            n = v->ent[i].val + 1;
        bytes += v->ent[i].len;
    }
    for (int i = 0; i < t->added.n; i++) {
        if (t->added.v[i].id + 1 > n)
            n = t->added.v[i].id + 1;
        bytes += t->added.v[i].len;
    }
    if (n > INT32_MAX / 2 || bytes > UINT32_MAX)
        return hr_err(err, HR_EFORMAT, "vocabulary too large (%lld ids)", (long long)n);
    t->n_vocab = (int32_t)n;
    t->pool = malloc(bytes + 1);
    t->tok_off = calloc((size_t)n + 1, sizeof *t->tok_off);
    t->tok_len = malloc(((size_t)n + 1) * sizeof *t->tok_len);
    t->tok_special = calloc((size_t)n + 1, 1);
    if (!t->pool || !t->tok_off || !t->tok_len || !t->tok_special)
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
        t->tok_len[i] = -1;
    size_t off = 0;
    for (size_t i = 0; i < v->n; i++) {
        int32_t id = v->ent[i].val;
        memcpy(t->pool + off, v->pool + v->ent[i].off, v->ent[i].len);
        t->tok_off[id] = (uint32_t)off;
        t->tok_len[id] = (int32_t)v->ent[i].len;
        off += v->ent[i].len;
    }
    for (int i = 0; i < t->added.n; i++) { /* added content wins, as in HF */
        const hr__added *a = &t->added.v[i];
        memcpy(t->pool + off, a->content, a->len);
        t->tok_off[a->id] = (uint32_t)off;
        t->tok_len[a->id] = (int32_t)a->len;
        t->tok_special[a->id] = a->special;
        off += a->len;
    }
    return 0;
}

/* ---- config ------------------------------------------------------------- */

const char *hr_tokenizer_config_str(const hr_tokenizer *t, const char *key) {
    if (!t || !t->config)
        return NULL;
    json_t *v = json_object_get(t->config, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int hr_tokenizer_config_bool(const hr_tokenizer *t, const char *key, int dflt) {
    return t && t->config ? hr__json_bool(t->config, key, dflt) : dflt;
}

void hr__tok_resolve_specials(hr_tokenizer *t) {
    const char *keys[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    int32_t *dst[4] = {&t->bos, &t->eos, &t->pad, &t->unk};
    for (int i = 0; i < 4; i++) {
        const char *s = hr_tokenizer_config_str(t, keys[i]);
        if (s)
            *dst[i] = hr_tokenizer_find(t, s);
    }
    if (t->unk < 0)
        t->unk = t->bpe.unk_id;
}

/* Merge special_tokens_map.json into the config where the config is silent. */
static void merge_special_map(json_t *cfg, json_t *map) {
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        if (!json_object_get(cfg, key))
            json_object_set(cfg, key, v);
    }
}

static int set_chat_template(hr_tokenizer *t) {
    json_t *ct = json_object_get(t->config, "chat_template");
    const char *s = NULL;
    if (json_is_string(ct)) {
        s = json_string_value(ct);
    } else if (json_is_array(ct)) { /* [{"name": ..., "template": ...}] */
        size_t i;
        json_t *x;
        json_array_foreach(ct, i, x) {
            const char *name = hr__json_str(x, "name");
            if (name && !strcmp(name, "default"))
                s = hr__json_str(x, "template");
        }
    }
    if (s && !(t->chat_template = strdup(s)))
        return HR_ENOMEM;
    return 0;
}

/* ---- tokenizer.json ----------------------------------------------------- */

static int load_vocab(hr__bpe *b, json_t *vocab, hr_error *err) {
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= INT32_MAX / 2)
            return hr_err(err, HR_EFORMAT, "vocab entry '%.40s': bad id", key);
        if (hr__strmap_put(&b->vocab, key, strlen(key), (int32_t)json_integer_value(v)))
            return hr_err(err, HR_ENOMEM, "out of memory");
    }
    return 0;
}

static int load_wordpiece(hr__bpe *b, json_t *m, hr_error *err) {
    json_t *vocab = json_object_get(m, "vocab");
    if (!json_is_object(vocab))
        return hr_err(err, HR_EFORMAT, "WordPiece model needs \"vocab\"");
    const char *unk = hr__json_str(m, "unk_token"), *pre = hr__json_str(m, "continuing_subword_prefix");
    json_t *mc = json_object_get(m, "max_input_chars_per_word");
    unk = unk ? unk : "[UNK]";
    pre = pre ? pre : "##";
    if (strlen(pre) >= sizeof b->wp_prefix)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: a continuing_subword_prefix "
                      "of %zu bytes", strlen(pre));
    b->wordpiece = 1;
    memcpy(b->wp_prefix, pre, strlen(pre) + 1);
    b->wp_prefix_len = (int)strlen(pre);
    b->wp_max_chars = 100;
    if (json_is_integer(mc))
        b->wp_max_chars = json_integer_value(mc) < 0 ? 0
                        : json_integer_value(mc) > INT32_MAX ? INT32_MAX
                                                             : (int)json_integer_value(mc);
    int rc = load_vocab(b, vocab, err);
    if (rc)
        return rc;
    if ((b->unk_id = hr__strmap_get(&b->vocab, unk, strlen(unk))) < 0)
        return hr_err(err, HR_EFORMAT, "WordPiece unk_token '%.40s' is not in the vocab", unk);
    for (int i = 0; i < 256; i++)
        b->byte_id[i] = -1;
    return 0;
}

static int load_model(hr_tokenizer *t, json_t *m, hr_error *err) {
    const char *type = hr__json_str(m, "type");
    if (!json_is_object(m))
        return hr_err(err, HR_EFORMAT, "missing \"model\"");
    if (type && !strcmp(type, "WordPiece"))
        return load_wordpiece(&t->bpe, m, err);
    if (type && strcmp(type, "BPE"))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s model", type);
    json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return hr_err(err, HR_EFORMAT, "BPE model needs \"vocab\" and \"merges\"");
    json_t *dropout = json_object_get(m, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: BPE dropout");
    const char *csp = hr__json_str(m, "continuing_subword_prefix");
    const char *eow = hr__json_str(m, "end_of_word_suffix");
    if ((csp && *csp) || (eow && *eow))
        return hr_err(err, HR_EUNSUPPORTED,
                      "not supported yet: continuing_subword_prefix / end_of_word_suffix");
    hr__bpe *b = &t->bpe;
    b->byte_fallback = hr__json_bool(m, "byte_fallback", 0);
    b->fuse_unk = hr__json_bool(m, "fuse_unk", 0);
    b->ignore_merges = hr__json_bool(m, "ignore_merges", 0);
    int rc0 = load_vocab(b, vocab, err);
    if (rc0)
        return rc0;
    const char *unk = hr__json_str(m, "unk_token");
    if (unk && (b->unk_id = hr__strmap_get(&b->vocab, unk, strlen(unk))) < 0)
        return hr_err(err, HR_EFORMAT, "unk_token '%.40s' is not in the vocab", unk);
    for (int i = 0; i < 256; i++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", i);
        b->byte_id[i] = hr__strmap_get(&b->vocab, s, 6);
    }
    hr__buf cat = {0};
    size_t i;
    json_t *x;
    int rc = 0;
    json_array_foreach(merges, i, x) {
        const char *a, *c;
        size_t al, cl;
        if (json_is_string(x)) {
            a = json_string_value(x);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                rc = hr_err(err, HR_EFORMAT, "merge %zu '%.40s' is not 'a b'", i, a);
                break;
            }
            al = (size_t)(sp - a);
            c = sp + 1;
            cl = strlen(c);
        } else if (json_is_array(x) && json_array_size(x) == 2 &&
                   json_is_string(json_array_get(x, 0)) && json_is_string(json_array_get(x, 1))) {
            a = json_string_value(json_array_get(x, 0));
            al = json_string_length(json_array_get(x, 0));
            c = json_string_value(json_array_get(x, 1));
            cl = json_string_length(json_array_get(x, 1));
        } else {
            rc = hr_err(err, HR_EFORMAT, "merge %zu is neither \"a b\" nor [\"a\", \"b\"]", i);
            break;
        }
        int32_t ia = hr__strmap_get(&b->vocab, a, al), ic = hr__strmap_get(&b->vocab, c, cl);
        cat.len = 0;
        if (hr__buf_put(&cat, a, al) || hr__buf_put(&cat, c, cl)) {
            rc = hr_err(err, HR_ENOMEM, "out of memory");
            break;
        }
        int32_t in = hr__strmap_get(&b->vocab, cat.p, cat.len);
        if (ia < 0 || ic < 0 || in < 0) {
            rc = hr_err(err, HR_EFORMAT, "merge %zu '%.*s' '%.*s': token not in the vocab",
                        i, (int)(al > 30 ? 30 : al), a, (int)(cl > 30 ? 30 : cl), c);
            break;
        }
        if (i >= UINT32_MAX ||
            hr__u64map_put(&b->merges, (uint64_t)(uint32_t)ia << 32 | (uint32_t)ic,
                           (uint64_t)i << 32 | (uint32_t)in)) {
            rc = hr_err(err, HR_ENOMEM, "out of memory");
            break;
        }
    }
    free(cat.p);
    return rc;
}

/* HF assigns IDs itself; the "id" in the file is only compared (Rust
 * tokenizers warns, transformers too). A token already in the model's
 * vocabulary keeps that ID; any other gets the next ID after the
 * vocabulary's entry count (then one more per new token, in list order),
 * whatever it declares: added tokens declared as 500..502 over a 371-entry
 * vocabulary are 371..373 in HF, so they are here. A content listed twice
 * keeps its first entry's flags and is special when any entry says so (HF's
 * special-token set). */
static int load_added(hr_tokenizer *t, json_t *a, hr_error *err) {
    if (!a || json_is_null(a))
        return 0;
    if (!json_is_array(a))
        return hr_err(err, HR_EFORMAT, "\"added_tokens\" is not a list");
    int64_t next = (int64_t)t->bpe.vocab.n;
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x) {
        json_t *c = json_object_get(x, "content");
        if (!json_is_string(c))
            return hr_err(err, HR_EFORMAT, "added token %zu: needs \"content\"", i);
        const char *s = json_string_value(c);
        size_t len = json_string_length(c);
        if (!len)
            continue;
        int32_t k = hr__strmap_get(&t->added.by_content, s, len), id;
        if (k >= 0) {
            t->added.v[k].special |= (uint8_t)hr__json_bool(x, "special", 0);
            continue;
        }
        if ((id = hr__strmap_get(&t->bpe.vocab, s, len)) < 0) {
            if (next >= INT32_MAX / 2)
                return hr_err(err, HR_EFORMAT, "too many added tokens");
            id = (int32_t)next++;
        }
        int special = hr__json_bool(x, "special", 0);
        if (hr__added_add(&t->added, s, len, id, special, hr__json_bool(x, "lstrip", 0),
                          hr__json_bool(x, "rstrip", 0),
                          hr__json_bool(x, "normalized", !special),
                          hr__json_bool(x, "single_word", 0)))
            return hr_err(err, HR_ENOMEM, "out of memory");
    }
    return 0;
}

int hr_tokenizer_load_json(hr_tokenizer **out, const char *json, size_t len,
                           const char *config_json, size_t config_len,
                           hr_error *err) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_ALLOW_NUL, &je);
    if (!root) {
        hr_err(err, HR_EFORMAT, "tokenizer.json: %s at line %d", je.text, je.line);
        if (err)
            err->pos = je.position;
        return HR_EFORMAT;
    }
    hr_tokenizer *t = hr__tok_alloc();
    pcre2_match_data *md = pcre2_match_data_create(32, NULL);
    int rc = 0;
    if (!t || !md) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    if (!json_is_object(root)) {
        rc = hr_err(err, HR_EFORMAT, "tokenizer.json is not an object");
        goto done;
    }
    if ((rc = load_model(t, json_object_get(root, "model"), err)) ||
        (rc = hr__norm_parse(&t->norm, json_object_get(root, "normalizer"), err)) ||
        (rc = hr__pretok_parse(&t->pretok, json_object_get(root, "pre_tokenizer"), err)) ||
        (rc = hr__postproc_parse(&t->post, json_object_get(root, "post_processor"), err)) ||
        (rc = hr__decoder_parse(&t->dec, json_object_get(root, "decoder"), err)) ||
        (rc = load_added(t, json_object_get(root, "added_tokens"), err)) ||
        (rc = hr__added_build(&t->added, &t->norm, md, err)) ||
        (rc = hr__tok_build_table(t, err)))
        goto done;
    for (int i = 0; i < t->post.n_pre; i++)
        if (t->post.pre[i] >= t->n_vocab)
            rc = hr_err(err, HR_EFORMAT, "post_processor: id %d outside the vocabulary",
                        t->post.pre[i]);
    for (int i = 0; i < t->post.n_post; i++)
        if (t->post.post[i] >= t->n_vocab)
            rc = hr_err(err, HR_EFORMAT, "post_processor: id %d outside the vocabulary",
                        t->post.post[i]);
    if (rc)
        goto done;
    if (config_json) {
        t->config = json_loadb(config_json, config_len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
        if (!t->config || !json_is_object(t->config)) {
            rc = hr_err(err, HR_EFORMAT, "tokenizer_config.json: %s at line %d",
                        t->config ? "not an object" : je.text, je.line);
            goto done;
        }
        if (set_chat_template(t)) {
            rc = hr_err(err, HR_ENOMEM, "out of memory");
            goto done;
        }
    }
    hr__tok_resolve_specials(t);
done:
    pcre2_match_data_free(md);
    json_decref(root);
    if (rc) {
        hr_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- loading from a path ------------------------------------------------ */

int hr__tok_load_gguf_path(hr_tokenizer **out, const char *path, hr_error *err);

int hr_tokenizer_load(hr_tokenizer **out, const char *path, hr_error *err) {
    *out = NULL;
    size_t pl = strlen(path);
    if (pl > 5 && !strcmp(path + pl - 5, ".gguf"))
        return hr__tok_load_gguf_path(out, path, err);
    char p[4096];
    char *json = NULL, *cfg = NULL, *map = NULL, *tmpl = NULL;
    size_t jl = 0, cl = 0, ml = 0;
    int rc;
    if (!hr_dir_exists(path))
        return hr_err(err, HR_ENOTFOUND, "%s: no such model directory", path);
    if ((rc = hr_path_join(p, sizeof p, path, "tokenizer.json")))
        return hr_err(err, rc, "%s: path too long", path);
    if (!hr_file_exists(p))
        return hr_err(err, HR_ENOTFOUND, "%s: not found (a model directory needs tokenizer.json)", p);
    if ((rc = hr_file_read(p, &json, &jl, err)))
        return rc;
    hr_path_join(p, sizeof p, path, "tokenizer_config.json");
    if (hr_file_exists(p) && (rc = hr_file_read(p, &cfg, &cl, err)))
        goto done;
    rc = hr_tokenizer_load_json(out, json, jl, cfg, cl, err);
    if (rc) {
        hr_err_wrap(err, "%s", path);
        goto done;
    }
    hr_tokenizer *t = *out;
    if (!t->config && !(t->config = json_object())) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    hr_path_join(p, sizeof p, path, "special_tokens_map.json");
    if (hr_file_exists(p) && !hr_file_read(p, &map, &ml, NULL)) {
        json_t *m = json_loadb(map, ml, 0, NULL);
        if (json_is_object(m))
            merge_special_map(t->config, m);
        json_decref(m);
        hr__tok_resolve_specials(t);
    }
    hr_path_join(p, sizeof p, path, "chat_template.jinja");
    if (!t->chat_template && hr_file_exists(p) && !hr_file_read(p, &tmpl, NULL, NULL)) {
        t->chat_template = tmpl;
        tmpl = NULL;
    }
done:
    if (rc && *out) {
        hr_tokenizer_free(*out);
        *out = NULL;
    }
    free(json);
    free(cfg);
    free(map);
    free(tmpl);
    return rc;
}

/* ---- encode ------------------------------------------------------------- */

typedef struct work {
    hr__plist a, b;
    hr__buf norm, tmp, text;
    pcre2_match_data *md;
} work;

static void work_free(work *w) {
    hr__plist_free(&w->a);
    hr__plist_free(&w->b);
    free(w->norm.p);
    free(w->tmp.p);
    free(w->text.p);
    pcre2_match_data_free(w->md);
}

static int encode(const hr_tokenizer *t, const char *text, size_t len,
                  unsigned flags, hr_tokens *out, work *w) {
    int rc;
    if (!(w->md = pcre2_match_data_create(32, NULL)))
        return HR_ENOMEM;
    rc = hr__utf8_repair(text, len, &w->text);
    if (rc < 0)
        return HR_ENOMEM;
    if (rc > 0) {
        text = w->text.p;
        len = w->text.len;
    }
    int split = (flags & HR_TOK_SPLIT_SPECIAL) != 0;
    hr__plist *in = &w->a, *tmp = &w->b;
    if ((rc = hr__plist_push(in, text, len, -1, 1)) ||
        (rc = hr__added_split(&t->added, 0, split, in, tmp)))
        return rc;
    /* normalize the text pieces, then match normalized added tokens */
    if (t->norm.n) {
        hr__plist_reset(in);
        for (size_t i = 0; i < tmp->n; i++) {
            const hr__piece *x = &tmp->p[i];
            if (x->id >= 0) {
                rc = hr__plist_push(in, "", 0, x->id, 0);
            } else {
                rc = hr__norm_apply(&t->norm, tmp->buf + x->off, x->len, &w->norm,
                                    &w->tmp, w->md);
                if (!rc)
                    rc = hr__plist_push(in, w->norm.p, w->norm.len, -1, x->at_start);
            }
            if (rc)
                return rc;
        }
        if ((rc = hr__added_split(&t->added, 1, split, in, tmp)))
            return rc;
    } else if (t->added.normed.n) {
        if ((rc = hr__added_split(&t->added, 1, split, tmp, in)))
            return rc;
        hr__plist *s = in;
        in = tmp;
        tmp = s;
    }
    /* tmp holds the pieces: pre-tokenize (result back in tmp) */
    if ((rc = hr__pretok_apply(&t->pretok, &tmp, &in, w->md)))
        return rc;
    int add = (flags & HR_TOK_ADD_SPECIAL) != 0;
    for (int i = 0; add && i < t->post.n_pre; i++)
        if ((rc = hr_tokens_push(out, t->post.pre[i])))
            return rc;
    hr__bpe *bpe = (hr__bpe *)&t->bpe; /* the cache is internally locked */
    for (size_t i = 0; i < tmp->n; i++) {
        const hr__piece *x = &tmp->p[i];
        rc = x->id >= 0       ? hr_tokens_push(out, x->id)
             : bpe->wordpiece ? hr__wordpiece_encode(bpe, tmp->buf + x->off, x->len, out)
                              : hr__bpe_encode(bpe, tmp->buf + x->off, x->len, out);
        if (rc)
            return rc;
    }
    for (int i = 0; add && i < t->post.n_post; i++)
        if ((rc = hr_tokens_push(out, t->post.post[i])))
            return rc;
    return 0;
}

int hr_tokenizer_encode(const hr_tokenizer *t, const char *text, size_t len,
                        unsigned flags, hr_tokens *out, hr_error *err) {
    if (!t || !out || (!text && len))
        return hr_err(err, HR_EINVAL, "encode: NULL argument");
    if (len > (size_t)UINT32_MAX / 4)
        return hr_err(err, HR_ERANGE, "encode: text too long (%zu bytes)", len);
    size_t n0 = out->n;
    work w = {0};
    int rc = encode(t, text ? text : "", len, flags, out, &w);
    work_free(&w);
    if (rc) {
        out->n = n0;
        return hr_err(err, rc, "encode: %s", hr_strerror(rc));
    }
    return 0;
}

/* ---- decode and accessors ----------------------------------------------- */

int hr_tokenizer_decode(const hr_tokenizer *t, const int32_t *ids, size_t n,
                        unsigned flags, char **out, size_t *len, hr_error *err) {
    *out = NULL;
    hr__dec_state s;
    hr__buf b = {0};
    hr__dec_init(&s, t, flags);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        rc = hr__dec_push(&s, ids[i], &b);
        if (rc == HR_ERANGE)
            hr_err(err, rc, "decode: token id %d at position %zu is outside the vocabulary (0..%d)",
                   ids[i], i, t->n_vocab - 1);
    }
    if (!rc)
        rc = hr__dec_finish(&s, &b);
    hr__dec_deinit(&s);
    if (rc) {
        free(b.p);
        return rc == HR_ERANGE ? rc : hr_err(err, rc, "decode: %s", hr_strerror(rc));
    }
    *out = b.p;
    if (len)
        *len = b.len;
    return 0;
}

int32_t hr_tokenizer_n_vocab(const hr_tokenizer *t) { return t->n_vocab; }

const char *hr_tokenizer_token_to_piece(const hr_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || t->tok_len[id] < 0)
        return NULL;
    if (len)
        *len = (size_t)t->tok_len[id];
    return t->pool + t->tok_off[id];
}

int32_t hr_tokenizer_find(const hr_tokenizer *t, const char *text) {
    size_t n = strlen(text);
    int32_t k = hr__strmap_get(&t->added.by_content, text, n);
    if (k >= 0)
        return t->added.v[k].id;
    return hr__strmap_get(&t->bpe.vocab, text, n);
}

int hr_tokenizer_is_special(const hr_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->tok_special[id];
}

void hr_tokenizer_post_ids(const hr_tokenizer *t, const int32_t **pre, int *n_pre,
                           const int32_t **post, int *n_post) {
    *pre = t->post.pre;
    *n_pre = t->post.n_pre;
    *post = t->post.post;
    *n_post = t->post.n_post;
}

int32_t hr_tokenizer_bos(const hr_tokenizer *t) { return t->bos; }
int32_t hr_tokenizer_eos(const hr_tokenizer *t) { return t->eos; }
int32_t hr_tokenizer_pad(const hr_tokenizer *t) { return t->pad; }
int32_t hr_tokenizer_unk(const hr_tokenizer *t) { return t->unk; }
const char *hr_tokenizer_chat_template(const hr_tokenizer *t) { return t->chat_template; }
