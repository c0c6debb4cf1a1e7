/* Tool calls: the streaming parser. Output text goes through a two-state
 * machine: outside a call region it is content, minus a held-back tail that
 * may be the start of a region's open marker; inside, bytes accumulate until
 * the region closes (its close marker, or the end of its JSON value), then
 * the body is parsed: valid calls become events, anything else goes out as
 * content exactly as generated. */
#include "chat/toolcall_int.h"
#include "core/error.h"

#include <stdint.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

/* ---- events ----------------------------------------------------------------- */

/* While a push runs, event strings are stored as offsets + 1 (0 is NULL) in
 * the pointer fields, since the buffer may move; they become pointers when
 * the push returns. */
#define OFF(x) ((const char *)(uintptr_t)((x) + 1))
#define UNOFF(p) ((size_t)(uintptr_t)(p) - 1)

void hr_tool_events_reset(hr_tool_events *e) {
    e->n = 0;
    e->buf_len = 0;
}

void hr_tool_events_free(hr_tool_events *e) {
    if (!e)
        return;
    free(e->ev);
    free(e->buf);
    *e = (hr_tool_events){0};
}

/* Store s[0, n) + NUL; its offset in *off. */
static int ev_store(hr_tool_events *e, const char *s, size_t n, size_t *off) {
    if (e->buf_len + n + 1 > e->buf_cap) {
        size_t cap = e->buf_cap ? e->buf_cap : 256;
        while (cap < e->buf_len + n + 1)
            cap *= 2;
        char *b = realloc(e->buf, cap);
        if (!b)
            return HR_ENOMEM;
        e->buf = b;
        e->buf_cap = cap;
    }
    *off = e->buf_len;
    if (n)
        memcpy(e->buf + e->buf_len, s, n);
    e->buf[e->buf_len + n] = 0;
    e->buf_len += n + 1;
    return 0;
}

/* Offsets ride in the pointer fields (as integers) until ev_resolve. */
static int ev_add(hr_tool_events *e, hr_tool_event_kind kind, int index, const char *text,
                  size_t len, const char *id, const char *name) {
    if (kind == HR_TOOL_EV_CONTENT && len == 0)
        return 0;
    if (kind == HR_TOOL_EV_CONTENT && e->n && e->ev[e->n - 1].kind == HR_TOOL_EV_CONTENT) {
        hr_tool_event *last = &e->ev[e->n - 1];
        size_t off = UNOFF(last->text);
        if (off + last->len + 1 == e->buf_len) { /* the newest string: extend it */
            size_t dummy;
            e->buf_len--;
            if (ev_store(e, text, len, &dummy)) {
                e->buf_len++;
                return HR_ENOMEM;
            }
            last->len += len;
            return 0;
        }
    }
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 16;
        hr_tool_event *v = realloc(e->ev, cap * sizeof *v);
        if (!v)
            return HR_ENOMEM;
        e->ev = v;
        e->cap = cap;
    }
    size_t ot = 0, oi = 0, on = 0;
    if ((text && ev_store(e, text, len, &ot)) || (id && ev_store(e, id, strlen(id), &oi)) ||
        (name && ev_store(e, name, strlen(name), &on)))
        return HR_ENOMEM;
    e->ev[e->n++] = (hr_tool_event){kind, index, text ? OFF(ot) : NULL, len, id ? OFF(oi) : NULL,
                                     name ? OFF(on) : NULL};
    return 0;
}

/* Events hold offsets: make them pointers into buf. */
static void ev_resolve(hr_tool_events *e) {
    for (size_t i = 0; i < e->n; i++) {
        hr_tool_event *v = &e->ev[i];
        if (v->text)
            v->text = e->buf + UNOFF(v->text);
        if (v->id)
            v->id = e->buf + UNOFF(v->id);
        if (v->name)
            v->name = e->buf + UNOFF(v->name);
    }
}

/* Events resolved by an earlier push: back to offsets, so the buffer may move. */
static void ev_unresolve(hr_tool_events *e) {
    for (size_t i = 0; i < e->n; i++) {
        hr_tool_event *v = &e->ev[i];
        if (v->text)
            v->text = OFF(v->text - e->buf);
        if (v->id)
            v->id = OFF(v->id - e->buf);
        if (v->name)
            v->name = OFF(v->name - e->buf);
    }
}

/* ---- parser ------------------------------------------------------------------- */

struct hr_tool_parser {
    const hr_tool_format *f;
    json_t *tools;       /* deep copy, or NULL */
    uint64_t rng;        /* splitmix64 state */
    hr__tbuf buf;        /* output not yet consumed */
    size_t pos;          /* outside a region: consumed up to here */
    int in_region, syn;  /* inside: which syntax */
    size_t reg_start;    /* region's first byte (its open marker, or bare JSON's whitespace) */
    size_t body_start;   /* first byte after the open marker */
    size_t scan;         /* close-marker search resumes here */
    int seen_text;       /* non-whitespace content went out (bare JSON only starts a reply) */
    int n_calls;
    int finished;
    hr__tool_calls calls; /* scratch */
};

static uint64_t next_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int hr_tool_parser_new(hr_tool_parser **out, const hr_tool_format *f,
                       const hr_tool_parser_opts *opts, hr_error *err) {
    *out = NULL;
    if (!f)
        return hr_err(err, HR_EINVAL, "tool parser: no format");
    hr_tool_parser *p = calloc(1, sizeof *p);
    if (!p)
        return hr_err(err, HR_ENOMEM, "tool parser: out of memory");
    p->f = f;
    if (opts && opts->tools) {
        p->tools = json_deep_copy(opts->tools);
        if (!p->tools) {
            free(p);
            return hr_err(err, HR_ENOMEM, "tool parser: out of memory");
        }
    }
    if (opts && opts->seed) {
        p->rng = opts->seed;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        p->rng = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uintptr_t)p;
    }
    *out = p;
    return 0;
}

void hr_tool_parser_free(hr_tool_parser *p) {
    if (!p)
        return;
    json_decref(p->tools);
    hr__tbuf_free(&p->buf);
    hr__tool_calls_clear(&p->calls);
    free(p);
}

int hr_tool_parser_calls(const hr_tool_parser *p) { return p ? p->n_calls : 0; }

/* ---- the state machine ------------------------------------------------------------ */

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t find(const char *s, size_t n, size_t i, const char *m) {
    size_t k = strlen(m);
    for (; i + k <= n; i++)
        if (s[i] == m[0] && memcmp(s + i, m, k) == 0)
            return i;
    return n;
}

/* The longest tail of s[i, n) that is a proper prefix of an open marker. */
static size_t held_tail(const hr_tool_format *f, const char *s, size_t i, size_t n) {
    size_t best = 0;
    for (int k = 0; k < f->n_syn; k++) {
        const char *m = f->syn[k].open;
        if (!m)
            continue;
        size_t ml = strlen(m);
        for (size_t t = ml - 1 < n - i ? ml - 1 : n - i; t > best; t--)
            if (memcmp(s + n - t, m, t) == 0) {
                best = t;
                break;
            }
    }
    return best;
}

static int content(hr_tool_parser *p, hr_tool_events *out, size_t a, size_t b) {
    for (size_t i = a; i < b && !p->seen_text; i++)
        p->seen_text = !is_ws(p->buf.p[i]);
    return ev_add(out, HR_TOOL_EV_CONTENT, 0, p->buf.p + a, b - a, NULL, NULL);
}

static int emit_calls(hr_tool_parser *p, hr_tool_events *out) {
    static const char an[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    int rc = 0;
    for (size_t i = 0; i < p->calls.n && !rc; i++) {
        char id[5 + 24 + 1] = "call_";
        /* Mistral's templates refuse ids other than 9 alphanumerics */
        bool short_ids = !strncmp(p->f->name, "mistral", 7);
        int pre = short_ids ? 0 : 5, n = short_ids ? 9 : 24;
        for (int k = 0; k < n; k++)
            id[pre + k] = an[next_rand(&p->rng) % 62];
        id[pre + n] = 0;
        int idx = p->n_calls++;
        const char *args = p->calls.v[i].args;
        rc = ev_add(out, HR_TOOL_EV_CALL_START, idx, NULL, 0, id, p->calls.v[i].name);
        if (!rc)
            rc = ev_add(out, HR_TOOL_EV_CALL_ARGS, idx, args, strlen(args), NULL, NULL);
        if (!rc)
            rc = ev_add(out, HR_TOOL_EV_CALL_END, idx, NULL, 0, NULL, NULL);
    }
    hr__tool_calls_clear(&p->calls);
    p->seen_text = 1;
    return rc;
}

/* A region [reg_start, end) whose body is [body_start, body_end) is done:
 * calls when it parses, else content. */
static int close_region(hr_tool_parser *p, hr_tool_events *out, size_t body_end, size_t end) {
    const hr__tool_syntax *s = &p->f->syn[p->syn];
    int rc = hr__tool_parse_body(s, p->buf.p + p->body_start, body_end - p->body_start, p->tools,
                                 &p->calls);
    if (rc == HR_ENOMEM)
        return rc;
    rc = rc ? content(p, out, p->reg_start, end) : emit_calls(p, out);
    p->in_region = 0;
    p->pos = end;
    return rc;
}

/* Not a call after all: the open marker goes out as content, and scanning
 * resumes right after it. */
static int abandon_region(hr_tool_parser *p, hr_tool_events *out) {
    int rc = content(p, out, p->reg_start, p->body_start);
    p->seen_text = 1;
    p->in_region = 0;
    p->pos = p->body_start;
    return rc;
}

static void enter(hr_tool_parser *p, int syn, size_t start, size_t body) {
    p->in_region = 1;
    p->syn = syn;
    p->reg_start = start;
    p->body_start = p->scan = body;
}

static int run(hr_tool_parser *p, int final, hr_tool_events *out) {
    const hr_tool_format *f = p->f;
    int rc = 0;
    while (!rc) {
        const char *s = p->buf.p;
        size_t n = p->buf.n;
        if (p->in_region) {
            const hr__tool_syntax *sy = &f->syn[p->syn];
            if (*sy->close) {
                size_t cl = strlen(sy->close), k = find(s, n, p->scan, sy->close);
                if (k < n) {
                    rc = close_region(p, out, k, k + cl);
                    continue;
                }
                p->scan = n - p->body_start >= cl ? n - cl + 1 : p->body_start;
            } else {
                long e = hr__tool_open_extent(sy, s + p->body_start, n - p->body_start);
                if (e > 0) {
                    size_t end = p->body_start + (size_t)e;
                    rc = close_region(p, out, end, end);
                    continue;
                }
                if (e < 0) {
                    rc = abandon_region(p, out);
                    continue;
                }
            }
            if (!final)
                break;
            rc = abandon_region(p, out); /* unterminated at the end */
            continue;
        }
        size_t i = p->pos;
        if (i == n)
            break;
        int syn = -1;
        size_t at = n, len = 0;
        for (int k = 0; k < f->n_syn; k++) {
            const char *m = f->syn[k].open;
            if (!m) {
                if (p->seen_text)
                    continue;
                size_t j = i;
                while (j < n && is_ws(s[j]))
                    j++;
                if (j == n && !final)
                    return 0; /* only whitespace so far: wait */
                if (j < n && s[j] == '{' && i <= at) {
                    syn = k, at = i, len = j - i;
                    break;
                }
                continue;
            }
            size_t pos = find(s, n, i, m);
            if (pos < at || (pos == at && pos < n && strlen(m) > len))
                syn = k, at = pos, len = strlen(m);
        }
        if (syn >= 0) {
            rc = content(p, out, i, at);
            enter(p, syn, at, at + len);
            continue;
        }
        size_t hold = final ? 0 : held_tail(f, s, i, n);
        rc = content(p, out, i, n - hold);
        p->pos = n - hold;
        break;
    }
    return rc;
}

/* Drop consumed bytes from the front of the buffer. */
static void compact(hr_tool_parser *p) {
    size_t keep = p->in_region ? p->reg_start : p->pos;
    if (keep == 0)
        return;
    memmove(p->buf.p, p->buf.p + keep, p->buf.n - keep);
    p->buf.n -= keep;
    p->buf.p[p->buf.n] = 0;
    p->pos -= keep < p->pos ? keep : p->pos;
    if (p->in_region) {
        p->reg_start -= keep;
        p->body_start -= keep;
        p->scan -= keep;
    }
}

static int step(hr_tool_parser *p, const char *text, size_t len, int final, hr_tool_events *out) {
    if (!p || !out)
        return HR_EINVAL;
    if (p->finished)
        return HR_EINVAL;
    hr__tbuf_put(&p->buf, text, len);
    if (p->buf.oom)
        return HR_ENOMEM;
    ev_unresolve(out);
    int rc = run(p, final, out);
    ev_resolve(out);
    compact(p);
    if (final)
        p->finished = 1;
    return rc;
}

int hr_tool_parser_push(hr_tool_parser *p, const char *text, size_t len, hr_tool_events *out) {
    if (len && !text)
        return HR_EINVAL;
    return step(p, text, len, 0, out);
}

int hr_tool_parser_finish(hr_tool_parser *p, hr_tool_events *out) { return step(p, "", 0, 1, out); }
