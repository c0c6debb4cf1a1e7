#include "train/data.h"
#include "chat/messages.h"
#include "core/error.h"
#include "core/file.h"

#include <stdlib.h>
#include <string.h>

enum { FMT_NONE, FMT_COMPLETIONS, FMT_CHAT, FMT_TEXT, FMT_PREF };

/* ---- one example ------------------------------------------------------------------ */

static int encode_render(const hr_text_fns *f, const json_t *msgs, const json_t *tools,
                         bool add_gen, hr_tokens *out, hr_error *err) {
    char *text = NULL;
    int rc = f->render(f->ctx, msgs, tools, add_gen, &text, err);
    if (!rc)
        rc = f->encode(f->ctx, text, strlen(text), false, out, err);
    free(text);
    return rc;
}

/* messages (raw) -> tokens and the prompt's length (mask) */
static int chat_example(const hr_text_fns *f, const json_t *raw, const json_t *tools,
                        bool mask, hr_tokens *out, int *offset, hr_error *err) {
    json_t *msgs = NULL;
    int rc = hr_chat_messages_normalize(raw, &msgs, err);
    if (rc)
        return rc;
    size_t n0 = out->n;
    if ((rc = encode_render(f, msgs, tools, false, out, err)))
        goto done;
    *offset = 0;
    if (mask) {
        size_t nm = json_array_size(msgs);
        json_t *last = json_array_get(msgs, nm - 1);
        const char *role = json_string_value(json_object_get(last, "role"));
        json_t *head = json_array();
        for (size_t i = 0; head && i + 1 < nm; i++)
            json_array_append(head, json_array_get(msgs, i));
        hr_tokens pt = {0};
        rc = head ? encode_render(f, head, tools, role && !strcmp(role, "assistant"), &pt, err)
                  : hr_err(err, HR_ENOMEM, "out of memory");
        *offset = (int)pt.n;
        hr_tokens_free(&pt);
        json_decref(head);
    }
done:
    if (rc)
        out->n = n0;
    json_decref(msgs);
    return rc;
}

static int text_example(const hr_text_fns *f, const char *text, hr_tokens *out,
                        hr_error *err) {
    size_t n0 = out->n;
    int rc = f->encode(f->ctx, text, strlen(text), true, out, err);
    if (!rc && f->eos >= 0 && (out->n == n0 || out->ids[out->n - 1] != f->eos))
        rc = hr_tokens_push(out, f->eos);
    if (rc)
        out->n = n0;
    return rc;
}

/* a preference pair: the prompt as the user's message (after an optional
 * system message), each completion as the assistant's; the prompt's
 * tokens (rendered with the generation prompt) are no target */
static int pref_example(const hr_text_fns *f, const json_t *o, hr_tokens *out, size_t *mid,
                        int *offset, hr_error *err) {
    const json_t *p = json_object_get(o, "prompt"), *sys = json_object_get(o, "system");
    const json_t *c[2] = {json_object_get(o, "chosen"), json_object_get(o, "rejected")};
    if (!json_is_string(p) || !json_is_string(c[0]) || !json_is_string(c[1]))
        return hr_err(err, HR_EINVAL, "'prompt', 'chosen' and 'rejected' must be strings (the "
                      "file's first line has them)");
    if (sys && !json_is_null(sys) && !json_is_string(sys))
        return hr_err(err, HR_EINVAL, "'system' must be a string");
    size_t n0 = out->n;
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        json_t *msgs = json_array();
        if (msgs && json_is_string(sys))
            json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", sys));
        if (msgs)
            json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", p));
        if (msgs)
            json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "assistant", "content",
                                                  c[k]));
        if (!msgs || json_array_size(msgs) != (json_is_string(sys) ? 3u : 2u))
            rc = hr_err(err, HR_ENOMEM, "out of memory");
        if (!rc) {
            rc = chat_example(f, msgs, NULL, true, out, offset, err);
            if (!k)
                *mid = out->n;
        }
        json_decref(msgs);
    }
    if (rc)
        out->n = n0;
    return rc;
}

static int detect(const json_t *o) {
    if (json_object_get(o, "chosen") && json_object_get(o, "rejected"))
        return FMT_PREF;
    if (json_object_get(o, "prompt") && json_object_get(o, "completion"))
        return FMT_COMPLETIONS;
    if (json_object_get(o, "messages"))
        return FMT_CHAT;
    if (json_object_get(o, "text"))
        return FMT_TEXT;
    return FMT_NONE;
}

static int example(const hr_text_fns *f, int fmt, const json_t *o, bool mask, hr_tokens *out,
                   int *offset, hr_error *err) {
    const json_t *tools = json_object_get(o, "tools");
    if (tools && json_is_null(tools))
        tools = NULL;
    if (tools && !json_is_array(tools))
        return hr_err(err, HR_EINVAL, "'tools' must be a list");
    *offset = 0;
    switch (fmt) {
    case FMT_COMPLETIONS: {
        const json_t *p = json_object_get(o, "prompt"), *c = json_object_get(o, "completion");
        if (!json_is_string(p) || !json_is_string(c))
            return hr_err(err, HR_EINVAL, "'prompt' and 'completion' must be strings (the "
                          "file's first line has them)");
        json_t *msgs = json_pack("[{s:s, s:O}, {s:s, s:O}]", "role", "user", "content", p,
                                 "role", "assistant", "content", c);
        if (!msgs)
            return hr_err(err, HR_ENOMEM, "out of memory");
        int rc = chat_example(f, msgs, tools, mask, out, offset, err);
        json_decref(msgs);
        return rc;
    }
    case FMT_CHAT: {
        const json_t *m = json_object_get(o, "messages");
        if (!json_is_array(m) || json_array_size(m) == 0)
            return hr_err(err, HR_EINVAL, "'messages' must be a non-empty list (the file's "
                          "first line has it)");
        return chat_example(f, m, tools, mask, out, offset, err);
    }
    default: {
        const json_t *t = json_object_get(o, "text");
        if (!json_is_string(t))
            return hr_err(err, HR_EINVAL, "'text' must be a string (the file's first line "
                          "has it)");
        return text_example(f, json_string_value(t), out, err);
    }
    }
}

/* ---- a file ------------------------------------------------------------------------ */

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

int hr_train_data_parse(hr_train_data *out, const char *name, const char *text, size_t len,
                        const hr_text_fns *fns, bool mask_prompt, hr_error *err) {
    memset(out, 0, sizeof *out);
    hr_tokens toks = {0};
    size_t cap = 0;
    int fmt = FMT_NONE, rc = 0, line = 0;
    for (size_t p = 0; p < len && !rc;) {
        const char *nl = memchr(text + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - text) : len, ll = e - p;
        const char *s = text + p;
        p = e + 1;
        line++;
        if (blank(s, ll))
            continue;
        json_error_t je;
        json_t *o = json_loadb(s, ll, JSON_REJECT_DUPLICATES, &je);
        if (!o || !json_is_object(o)) {
            rc = hr_err(err, HR_EFORMAT, "%s:%d: %s", name, line,
                        o ? "not a JSON object" : je.text);
            json_decref(o);
            break;
        }
        if (fmt == FMT_NONE) {
            fmt = detect(o);
            if (fmt == FMT_NONE)
                rc = hr_err(err, HR_EINVAL, "%s:%d: unsupported data format: the first line "
                            "needs 'prompt' and 'completion', 'messages', 'text', or "
                            "'prompt', 'chosen' and 'rejected'", name, line);
            else if (fmt == FMT_TEXT && mask_prompt)
                rc = hr_err(err, HR_EINVAL, "%s:%d: --mask-prompt needs prompts: not "
                            "supported for the 'text' format", name, line);
        }
        if (!rc && out->n + 2 >= cap) {
            cap = cap ? 2 * cap : 64;
            size_t *ns = realloc(out->start, (cap + 1) * sizeof *ns);
            if (ns)
                out->start = ns;
            int *no = realloc(out->offset, cap * sizeof *no);
            if (no)
                out->offset = no;
            if (!ns || !no)
                rc = hr_err(err, HR_ENOMEM, "out of memory");
        }
        int off = 0;
        size_t mid = 0;
        if (!rc) {
            out->start[out->n] = toks.n;
            rc = fmt == FMT_PREF ? pref_example(fns, o, &toks, &mid, &off, err)
                                 : example(fns, fmt, o, mask_prompt, &toks, &off, err);
            if (rc)
                hr_err_wrap(err, "%s:%d", name, line);
        }
        json_decref(o);
        if (!rc && fmt == FMT_PREF) { /* chosen, then rejected; one prompt */
            out->offset[out->n++] = off;
            out->start[out->n] = mid;
        }
        if (!rc)
            out->offset[out->n++] = off;
    }
    if (!rc && out->n == 0)
        rc = hr_err(err, HR_EINVAL, "%s: no examples", name);
    if (rc) {
        hr_tokens_free(&toks);
        hr_train_data_free(out);
        return rc;
    }
    out->start[out->n] = toks.n;
    out->tok = toks.ids;
    out->pairs = fmt == FMT_PREF;
    return 0;
}

int hr_train_data_load(hr_train_data *out, const char *path, const hr_text_fns *fns,
                       bool mask_prompt, hr_error *err) {
    memset(out, 0, sizeof *out);
    char *text;
    size_t len;
    int rc = hr_file_read(path, &text, &len, err);
    if (rc)
        return rc;
    rc = hr_train_data_parse(out, path, text, len, fns, mask_prompt, err);
    free(text);
    return rc;
}

void hr_train_data_free(hr_train_data *d) {
    if (!d)
        return;
    free(d->tok);
    free(d->start);
    free(d->offset);
    memset(d, 0, sizeof *d);
}

/* ---- batches ------------------------------------------------------------------------ */

static const hr_train_data *g_sort_d; /* qsort has no context; one caller at a time */

/* by the length of example i * g_sort_step (a pair's chosen) */
static int g_sort_step;

static int by_len(const void *a, const void *b) {
    int i = *(const int *)a * g_sort_step, j = *(const int *)b * g_sort_step;
    size_t li = g_sort_d->start[i + 1] - g_sort_d->start[i];
    size_t lj = g_sort_d->start[j + 1] - g_sort_d->start[j];
    return li < lj ? -1 : li > lj ? 1 : (i > j) - (i < j); /* stable: ties by index */
}

int hr_train_batches(const hr_train_data *d, int batch_size, int **order, int *n_batches,
                     hr_error *err) {
    *order = NULL;
    *n_batches = 0;
    int g = d->pairs ? 2 : 1;
    size_t units = d->n / (size_t)g;
    if (batch_size < 1 || units < (size_t)batch_size)
        return hr_err(err, HR_EINVAL, "the dataset must have at least batch_size=%d %s "
                      "but only has %zu", batch_size, g == 2 ? "pairs" : "examples", units);
    int *idx = malloc(units * sizeof *idx), *ord = malloc(d->n * sizeof *ord);
    if (!idx || !ord) {
        free(idx);
        free(ord);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < units; i++)
        idx[i] = (int)i;
    g_sort_d = d;
    g_sort_step = g;
    qsort(idx, units, sizeof *idx, by_len);
    for (size_t i = 0; i < units; i++)
        for (int k = 0; k < g; k++)
            ord[i * g + k] = idx[i] * g + k;
    free(idx);
    *order = ord;
    *n_batches = (int)(units / (size_t)batch_size);
    return 0;
}
