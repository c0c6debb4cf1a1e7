/* Decoders: IDs -> text, as HF's decoders do it, as a state machine fed one
 * token at a time, so that the full decode and the streaming detokenizer are
 * one piece of code and cannot disagree.
 *
 * Per token, the steps before a Fuse run in order (Replace, ByteFallback,
 * Strip, Metaspace, ByteLevel). Then the repair stage: ByteLevel output is
 * decoded as lossy UTF-8 over the whole text (an incomplete sequence is held
 * until the next byte decides it); a ByteFallback run of <0xXX> tokens is held
 * until a non-byte token ends it, then emitted if valid UTF-8, else as one
 * U+FFFD per byte token (HF's rule). A Strip after Fuse drops leading code
 * points of the whole text. Optional clean-up (transformers'
 * clean_up_tokenization_spaces) holds back a space that may still go. */
#include "tokenizer/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* ---- parsing ------------------------------------------------------------ */

static int push(hr__decoder *d, const hr__dec *x) {
    hr__dec *v = realloc(d->v, (size_t)(d->n + 1) * sizeof *v);
    if (!v)
        return HR_ENOMEM;
    d->v = v;
    d->v[d->n++] = *x;
    return 0;
}

static char *dupn(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

static int parse(hr__decoder *d, json_t *j, int *fused, hr_error *err) {
    const char *type = hr__json_str(j, "type");
    if (!type)
        return hr_err(err, HR_EFORMAT, "decoder without a \"type\"");
    hr__dec x = {0};
    if (!strcmp(type, "Sequence")) {
        json_t *a = json_object_get(j, "decoders");
        if (!json_is_array(a))
            return hr_err(err, HR_EFORMAT, "Sequence decoder without \"decoders\"");
        size_t i;
        json_t *e;
        json_array_foreach(a, i, e) {
            int rc = parse(d, e, fused, err);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (!strcmp(type, "Fuse")) {
        *fused = 1;
        return 0;
    }
    if (!strcmp(type, "Strip")) {
        const char *c = hr__json_str(j, "content");
        int32_t cp;
        if (!c || (size_t)hr__utf8_decode(c, strlen(c), &cp) != strlen(c))
            return hr_err(err, HR_EFORMAT, "Strip decoder: content must be one character");
        json_t *st = json_object_get(j, "start"), *sp = json_object_get(j, "stop");
        x.kind = HR__DEC_STRIP;
        x.strip_cp = cp;
        x.start = json_is_integer(st) ? (int)json_integer_value(st) : 0;
        x.stop = json_is_integer(sp) ? (int)json_integer_value(sp) : 0;
        if (x.start < 0 || x.stop < 0 || x.start > 1 << 20 || x.stop > 1 << 20)
            return hr_err(err, HR_EFORMAT, "Strip decoder: bad start/stop");
        if (*fused) {
            if (x.stop)
                return hr_err(err, HR_EUNSUPPORTED,
                              "not supported yet: Strip decoder with stop after Fuse");
            d->lead_strip = x.start;
            d->lead_cp = cp;
            return 0;
        }
        return push(d, &x) ? hr_err(err, HR_ENOMEM, "out of memory") : 0;
    }
    if (*fused && !strcmp(type, "Metaspace")) { /* on the whole text */
        const char *r = hr__json_str(j, "replacement");
        r = r ? r : "\xe2\x96\x81";
        size_t rl = strlen(r);
        int32_t cp;
        const char *ps = hr__json_str(j, "prepend_scheme");
        if (!rl || rl > 4 || (size_t)hr__utf8_decode(r, rl, &cp) != rl)
            return hr_err(err, HR_EFORMAT, "Metaspace decoder: replacement must be one character");
        d->post_meta_cp = cp;
        d->post_meta = (ps ? strcmp(ps, "never") != 0 : hr__json_bool(j, "add_prefix_space", 1))
                           ? 1 : 2;
        return 0;
    }
    if (*fused)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s decoder after Fuse", type);
    if (!strcmp(type, "ByteLevel")) {
        x.kind = HR__DEC_BYTELEVEL;
        d->bytelevel = 1;
        *fused = 1; /* HF's ByteLevel decoder returns one string */
    } else if (!strcmp(type, "ByteFallback")) {
        x.kind = HR__DEC_BYTEFALLBACK;
        d->bytefallback = 1;
    } else if (!strcmp(type, "Replace")) {
        json_t *pat = json_object_get(j, "pattern");
        json_t *s = json_object_get(pat, "String");
        json_t *c = json_object_get(j, "content");
        if (!json_is_string(s))
            return hr_err(err, HR_EUNSUPPORTED,
                          "not supported yet: Replace decoder with a regex pattern");
        if (!json_is_string(c))
            return hr_err(err, HR_EFORMAT, "Replace decoder without \"content\"");
        x.kind = HR__DEC_REPLACE;
        x.pat_len = json_string_length(s);
        x.content_len = json_string_length(c);
        x.pat = dupn(json_string_value(s), x.pat_len);
        x.content = dupn(json_string_value(c), x.content_len);
        if (!x.pat || !x.content) {
            free(x.pat);
            free(x.content);
            return hr_err(err, HR_ENOMEM, "out of memory");
        }
    } else if (!strcmp(type, "WordPiece")) {
        const char *pre = hr__json_str(j, "prefix");
        pre = pre ? pre : "##";
        x.kind = HR__DEC_WORDPIECE;
        x.pat_len = strlen(pre);
        x.start = hr__json_bool(j, "cleanup", 1);
        if (!(x.pat = dupn(pre, x.pat_len)))
            return hr_err(err, HR_ENOMEM, "out of memory");
    } else if (!strcmp(type, "Metaspace")) {
        const char *r = hr__json_str(j, "replacement");
        if (!r)
            r = "\xe2\x96\x81";
        size_t rl = strlen(r);
        int32_t cp;
        if (!rl || rl > 4 || (size_t)hr__utf8_decode(r, rl, &cp) != rl)
            return hr_err(err, HR_EFORMAT, "Metaspace decoder: replacement must be one character");
        x.kind = HR__DEC_METASPACE;
        memcpy(x.repl, r, rl);
        x.repl_len = (int)rl;
        const char *ps = hr__json_str(j, "prepend_scheme");
        x.prepend = ps ? strcmp(ps, "never") != 0 : hr__json_bool(j, "add_prefix_space", 1);
    } else {
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s decoder", type);
    }
    if (push(d, &x)) {
        free(x.pat);
        free(x.content);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    return 0;
}

int hr__decoder_parse(hr__decoder *d, json_t *j, hr_error *err) {
    if (!j || json_is_null(j)) {
        d->no_decoder = 1;
        return 0;
    }
    int fused = 0;
    int rc = parse(d, j, &fused, err);
    if (!rc && d->bytelevel && d->bytefallback)
        rc = hr_err(err, HR_EUNSUPPORTED,
                    "not supported yet: ByteLevel and ByteFallback decoders together");
    return rc;
}

void hr__decoder_free(hr__decoder *d) {
    if (!d)
        return;
    for (int i = 0; i < d->n; i++) {
        free(d->v[i].pat);
        free(d->v[i].content);
    }
    free(d->v);
    memset(d, 0, sizeof *d);
}

/* ---- state -------------------------------------------------------------- */

void hr__dec_init(hr__dec_state *s, const hr_tokenizer *t, unsigned flags) {
    memset(s, 0, sizeof *s);
    s->t = t;
    s->flags = flags;
    s->lead_left = t->dec.lead_strip;
}

void hr__dec_deinit(hr__dec_state *s) {
    free(s->pend.p);
    free(s->tok.p);
    free(s->clean.p);
    free(s->tmp.p);
    free(s->meta.p);
    memset(s, 0, sizeof *s);
}

/* clean_up_tokenization_spaces, in transformers' order */
static const struct { const char *from, *to; } CLEAN[] = {
    {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
    {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
};

/* Final stage: emits from s->clean what no later text can change. */
static int clean_flush(hr__dec_state *s, hr__buf *out, int final) {
    hr__buf *c = &s->clean;
    size_t i = 0, run = 0;
    if (!c->len)
        return 0;
    while (i < c->len) {
        if (c->p[i] != ' ') {
            i++;
            continue;
        }
        size_t rest = c->len - i;
        int done = 0, maybe = 0;
        for (size_t k = 0; k < sizeof CLEAN / sizeof CLEAN[0]; k++) {
            size_t fl = strlen(CLEAN[k].from);
            if (rest >= fl && !memcmp(c->p + i, CLEAN[k].from, fl)) {
                if (hr__buf_put(out, c->p + run, i - run) ||
                    hr__buf_put(out, CLEAN[k].to, strlen(CLEAN[k].to)))
                    return HR_ENOMEM;
                i += fl;
                run = i;
                done = 1;
                break;
            }
            if (rest < fl && !memcmp(c->p + i, CLEAN[k].from, rest))
                maybe = 1;
        }
        if (done)
            continue;
        if (maybe && !final)
            break;
        i++;
    }
    if (hr__buf_put(out, c->p + run, i - run))
        return HR_ENOMEM;
    memmove(c->p, c->p + i, c->len - i);
    c->len -= i;
    return 0;
}

/* Text that is final for the repair stage: a Metaspace after the fuse, the
 * lead strip, then clean-up. Chunks are whole code points. */
static int emit(hr__dec_state *s, const char *p, size_t n, hr__buf *out) {
    const hr__decoder *d = &s->t->dec;
    if (d->post_meta && n) {
        char r[4];
        int rl = hr__utf8_encode(d->post_meta_cp, r);
        if (memmem(p, n, r, (size_t)rl)) {
            hr__buf *m = &s->meta;
            m->len = 0;
            for (size_t i = 0; i < n;) {
                if (i + (size_t)rl <= n && !memcmp(p + i, r, (size_t)rl)) {
                    if (d->post_meta == 2 && hr__buf_put(m, " ", 1))
                        return HR_ENOMEM;
                    i += (size_t)rl;
                } else if (hr__buf_put(m, p + i++, 1)) {
                    return HR_ENOMEM;
                }
            }
            p = m->p;
            n = m->len;
        }
    }
    while (s->lead_left > 0 && n) {
        int32_t cp;
        int k = hr__utf8_decode(p, n, &cp);
        if (!k || cp != s->t->dec.lead_cp) {
            s->lead_left = 0;
            break;
        }
        p += k;
        n -= (size_t)k;
        s->lead_left--;
    }
    if (!n)
        return 0;
    s->lead_left = 0;
    if (!(s->flags & HR_DETOK_CLEANUP))
        return hr__buf_put(out, p, n);
    if (hr__buf_put(&s->clean, p, n))
        return HR_ENOMEM;
    return clean_flush(s, out, 0);
}

/* Lossy UTF-8 over s->pend: emit all but an incomplete tail (unless final). */
static int lossy_flush(hr__dec_state *s, hr__buf *out, int final) {
    hr__buf *b = &s->pend;
    size_t i = 0, run = 0;
    int rc = 0;
    if (!b->len)
        return 0;
    while (i < b->len && !rc) {
        if ((unsigned char)b->p[i] < 0x80) {
            i++;
            continue;
        }
        int need, k = hr__utf8_prefix((const unsigned char *)b->p + i, b->len - i, &need);
        if (need && k == need) {
            i += (size_t)k;
            continue;
        }
        if (need && (size_t)k == b->len - i && !final)
            break; /* may still complete */
        rc = emit(s, b->p + run, i - run, out);
        if (!rc)
            rc = emit(s, FFFD, 3, out);
        size_t skip = k > 0 ? (size_t)k : 1; /* the maximal ill-formed part */
        i += skip;
        run = i;
    }
    if (!rc)
        rc = emit(s, b->p + run, i - run, out);
    memmove(b->p, b->p + i, b->len - i);
    b->len -= i;
    return rc;
}

static int run_flush(hr__dec_state *s, hr__buf *out) {
    int rc = 0;
    if (!s->run)
        return 0;
    if (hr__utf8_valid(s->pend.p, s->pend.len)) {
        rc = emit(s, s->pend.p, s->pend.len, out);
    } else {
        for (int i = 0; i < s->run && !rc; i++)
            rc = emit(s, FFFD, 3, out);
    }
    s->pend.len = 0;
    s->run = 0;
    return rc;
}

static int byte_token(const char *p, size_t n) {
    if (n != 6 || memcmp(p, "<0x", 3) || p[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Transformations of one token in place (tmp: scratch where it grows). */
static int replace_all(hr__buf *t, const hr__dec *x, hr__buf *tmp) {
    if (!x->pat_len || !memmem(t->p, t->len, x->pat, x->pat_len))
        return 0;
    tmp->len = 0;
    size_t i = 0;
    const char *f;
    while ((f = i <= t->len ? memmem(t->p + i, t->len - i, x->pat, x->pat_len) : NULL)) {
        size_t at = (size_t)(f - t->p);
        if (hr__buf_put(tmp, t->p + i, at - i) || hr__buf_put(tmp, x->content, x->content_len))
            return HR_ENOMEM;
        i = at + x->pat_len;
    }
    if (hr__buf_put(tmp, t->p + i, t->len - i))
        return HR_ENOMEM;
    hr__buf sw = *t;
    *t = *tmp;
    *tmp = sw;
    return 0;
}

static void strip_token(hr__buf *t, const hr__dec *x) {
    size_t a = 0, b = t->len;
    int32_t cp;
    for (int i = 0; i < x->start && a < b; i++) {
        int k = hr__utf8_decode(t->p + a, b - a, &cp);
        if (!k || cp != x->strip_cp)
            break;
        a += (size_t)k;
    }
    for (int i = 0; i < x->stop && b > a; i++) {
        size_t s = b - 1;
        while (s > a && ((unsigned char)t->p[s] & 0xC0) == 0x80)
            s--;
        if (!hr__utf8_decode(t->p + s, b - s, &cp) || cp != x->strip_cp)
            break;
        b = s;
    }
    memmove(t->p, t->p + a, b - a);
    t->len = b - a;
}

static void metaspace_token(hr__buf *t, const hr__dec *x, int first) {
    size_t o = 0, rl = (size_t)x->repl_len;
    for (size_t i = 0; i < t->len;) {
        if (i + rl <= t->len && !memcmp(t->p + i, x->repl, rl)) {
            if (!(first && x->prepend))
                t->p[o++] = ' ';
            i += rl;
        } else {
            t->p[o++] = t->p[i++];
        }
    }
    t->len = o;
}

/* ByteLevel: every char maps to a byte, or the token's raw bytes are used. */
static void bytelevel_token(hr__buf *t) {
    size_t o = 0;
    for (size_t i = 0; i < t->len;) {
        int32_t cp;
        int k = hr__utf8_decode(t->p + i, t->len - i, &cp);
        int b = k ? hr__cp_to_byte(cp) : -1;
        if (b < 0)
            return; /* unmapped: keep the token as it is */
        i += (size_t)k;
        o++;
    }
    o = 0;
    for (size_t i = 0; i < t->len;) {
        int32_t cp;
        int k = hr__utf8_decode(t->p + i, t->len - i, &cp);
        t->p[o++] = (char)hr__cp_to_byte(cp);
        i += (size_t)k;
    }
    t->len = o;
}

/* WordPiece: a continuation loses its prefix, any other token but the first
 * gets a leading space; then the per-token clean-up. */
static int wordpiece_token(hr__buf *t, const hr__dec *x, int first, hr__buf *tmp) {
    if (!first) {
        if (t->len >= x->pat_len && !memcmp(t->p, x->pat, x->pat_len)) {
            memmove(t->p, t->p + x->pat_len, t->len - x->pat_len);
            t->len -= x->pat_len;
        } else {
            if (hr__buf_put(t, " ", 1))
                return HR_ENOMEM;
            memmove(t->p + 1, t->p, t->len - 1);
            t->p[0] = ' ';
        }
    }
    return x->start ? hr__wordpiece_cleanup(t, tmp) : 0;
}

int hr__dec_push(hr__dec_state *s, int32_t id, hr__buf *out) {
    const hr_tokenizer *t = s->t;
    const hr__decoder *d = &t->dec;
    if (id < 0 || id >= t->n_vocab || t->tok_len[id] < 0)
        return HR_ERANGE;
    if ((s->flags & HR_DETOK_SKIP_SPECIAL) && t->tok_special[id])
        return 0;
    int first = s->n_tok++ == 0;
    hr__buf *tk = &s->tok;
    tk->len = 0;
    if (hr__buf_put(tk, t->pool + t->tok_off[id], (size_t)t->tok_len[id]))
        return HR_ENOMEM;
    if (d->no_decoder) {
        if (!first && emit(s, " ", 1, out))
            return HR_ENOMEM;
        return emit(s, tk->p, tk->len, out);
    }
    int rc = 0;
    for (int i = 0; i < d->n && !rc; i++) {
        const hr__dec *x = &d->v[i];
        switch (x->kind) {
        case HR__DEC_REPLACE:
            rc = replace_all(tk, x, &s->tmp);
            break;
        case HR__DEC_BYTEFALLBACK: {
            int b = byte_token(tk->p, tk->len);
            if (b >= 0) {
                char c = (char)b;
                s->run++;
                return hr__buf_put(&s->pend, &c, 1);
            }
            rc = run_flush(s, out);
            break;
        }
        case HR__DEC_STRIP:
            strip_token(tk, x);
            break;
        case HR__DEC_METASPACE:
            metaspace_token(tk, x, first);
            break;
        case HR__DEC_BYTELEVEL:
            bytelevel_token(tk);
            break;
        case HR__DEC_WORDPIECE:
            rc = wordpiece_token(tk, x, first, &s->tmp);
            break;
        case HR__DEC_FUSE:
            break;
        }
    }
    if (rc)
        return rc;
    if (d->bytelevel) {
        if (hr__buf_put(&s->pend, tk->p, tk->len))
            return HR_ENOMEM;
        return lossy_flush(s, out, 0);
    }
    return emit(s, tk->p, tk->len, out);
}

int hr__dec_finish(hr__dec_state *s, hr__buf *out) {
    int rc = s->t->dec.bytelevel ? lossy_flush(s, out, 1) : run_flush(s, out);
    if (!rc && (s->flags & HR_DETOK_CLEANUP))
        rc = clean_flush(s, out, 1);
    if (!out->p && !rc)
        rc = hr__buf_put(out, "", 0);
    unsigned flags = s->flags;
    const hr_tokenizer *t = s->t;
    hr__buf keep[5] = {s->pend, s->tok, s->clean, s->tmp, s->meta};
    hr__dec_init(s, t, flags);
    s->pend = keep[0];
    s->tok = keep[1];
    s->clean = keep[2];
    s->tmp = keep[3];
    s->meta = keep[4];
    s->pend.len = s->tok.len = s->clean.len = s->tmp.len = s->meta.len = 0;
    return rc;
}

/* ---- one token's bytes ---------------------------------------------------
 * The per-token steps of hr__dec_push for a token in the middle of a text
 * (not the first: no Metaspace prepend or lead strip), before the repair
 * stage, so a byte-level or <0xXX> token gives its raw bytes. */
int hr_tokenizer_token_bytes(const hr_tokenizer *t, int32_t id, char *buf,
                             size_t cap, size_t *len) {
    const hr__decoder *d = &t->dec;
    if (id < 0 || id >= t->n_vocab || t->tok_len[id] < 0)
        return HR_ERANGE;
    hr__buf tk = {0}, tmp = {0};
    int rc = hr__buf_put(&tk, t->pool + t->tok_off[id], (size_t)t->tok_len[id]);
    for (int i = 0; i < d->n && !rc && !d->no_decoder; i++) {
        const hr__dec *x = &d->v[i];
        int b;
        switch (x->kind) {
        case HR__DEC_REPLACE:
            rc = replace_all(&tk, x, &tmp);
            break;
        case HR__DEC_BYTEFALLBACK:
            if ((b = byte_token(tk.p, tk.len)) >= 0) {
                tk.p[0] = (char)b;
                tk.len = 1;
                i = d->n; /* a byte token skips the later steps */
            }
            break;
        case HR__DEC_STRIP:
            strip_token(&tk, x);
            break;
        case HR__DEC_METASPACE:
            metaspace_token(&tk, x, 0);
            break;
        case HR__DEC_BYTELEVEL:
            bytelevel_token(&tk);
            break;
        case HR__DEC_WORDPIECE:
            rc = wordpiece_token(&tk, x, 0, &tmp);
            break;
        case HR__DEC_FUSE:
            break;
        }
    }
    if (!rc && d->post_meta) {
        char r[4];
        size_t rl = (size_t)hr__utf8_encode(d->post_meta_cp, r), o = 0;
        for (size_t i = 0; i < tk.len;) {
            if (i + rl <= tk.len && !memcmp(tk.p + i, r, rl)) {
                if (d->post_meta == 2)
                    tk.p[o++] = ' ';
                i += rl;
            } else {
                tk.p[o++] = tk.p[i++];
            }
        }
        tk.len = o;
    }
    if (!rc) {
        *len = tk.len;
        if (tk.len > cap)
            rc = HR_ERANGE;
        else if (tk.len)
            memcpy(buf, tk.p, tk.len);
    }
    free(tk.p);
    free(tmp.p);
    return rc;
}
