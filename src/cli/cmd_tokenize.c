/* hearth tokenize: text -> token IDs. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "tokenizer/tokenizer.h"

#include "core/timer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_ids(const hr_tokens *t, int json) {
    if (json)
        putchar('[');
    for (size_t i = 0; i < t->n; i++)
        printf(i ? (json ? ", %d" : " %d") : "%d", t->ids[i]);
    printf(json ? "]\n" : "\n");
}

/* One JSON string per line in, one JSON array of IDs per line out. */
static int run_jsonl(const hr_tokenizer *tok, const char *path, unsigned flags,
                     hr_error *err) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f)
        return hr_err(err, HR_EIO, "%s: cannot open", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int rc = 0;
    hr_tokens ids = {0};
    while (!rc && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        json_error_t je;
        json_t *s = json_loadb(line, (size_t)n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!json_is_string(s)) {
            rc = hr_err(err, HR_EINVAL, "%s:%ld: expected one JSON string per line", path, lineno);
        } else {
            ids.n = 0;
            rc = hr_tokenizer_encode(tok, json_string_value(s), json_string_length(s), flags,
                                     &ids, err);
            if (!rc)
                print_ids(&ids, 1);
        }
        json_decref(s);
    }
    free(line);
    hr_tokens_free(&ids);
    if (f != stdin)
        fclose(f);
    return rc;
}

int hr_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL, *jsonl = NULL;
    int json = 0, no_add = 0, split = 0;
    long repeat = 0;
    hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "model directory (tokenizer.json ...) or .gguf file; or ORG/NAME[@REV]"},
        {"text", HR_OPT_STR, &text, "text to tokenize"},
        {"file", HR_OPT_STR, &file, "file whose bytes to tokenize"},
        {"jsonl", HR_OPT_STR, &jsonl, "file with one JSON string per line ('-': stdin)"},
        {"json", HR_OPT_FLAG, &json, "print a JSON array"},
        {"no-add-special", HR_OPT_FLAG, &no_add, "do not add BOS/EOS (add_special_tokens=False)"},
        {"split-special", HR_OPT_FLAG, &split, "special-token text is plain text"},
        {"repeat", HR_OPT_INT, &repeat,
         "benchmark: encode N times (whole text, then line by line), print JSON timings"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0],
                           "usage: hearth tokenize --model PATH (--text T | --file F | --jsonl F) [--json]",
                           &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!model) {
        hr_err(&err, HR_EINVAL, "tokenize: --model is required");
        return hr_cli_fail(&err);
    }
    if (!!text + !!file + !!jsonl != 1) {
        hr_err(&err, HR_EINVAL, "tokenize: give exactly one of --text, --file, --jsonl");
        return hr_cli_fail(&err);
    }
    hr_tokenizer *tok = NULL;
    if (hr_tokenizer_load(&tok, model, &err))
        return hr_cli_fail(&err);
    unsigned flags = (no_add ? 0 : HR_TOK_ADD_SPECIAL) | (split ? HR_TOK_SPLIT_SPECIAL : 0);
    char *buf = NULL;
    size_t len = 0;
    hr_tokens ids = {0};
    if (jsonl) {
        rc = run_jsonl(tok, jsonl, flags, &err);
    } else {
        if (file)
            rc = hr_file_read(file, &buf, &len, &err);
        else
            len = strlen(text);
        if (!rc && repeat > 0) {
            double best = 1e30;
            size_t whole = 0;
            for (long i = 0; i < repeat && !rc; i++) {
                ids.n = 0;
                double t0 = hr_now();
                rc = hr_tokenizer_encode(tok, file ? buf : text, len, flags, &ids, &err);
                double dt = hr_now() - t0;
                best = dt < best ? dt : best;
                whole = ids.n;
            }
            /* the same text line by line: one encode call per line */
            const char *src = file ? buf : text;
            double lbest = 1e30;
            size_t ltok = 0;
            for (long i = 0; i < repeat && !rc; i++) {
                double t0 = hr_now();
                ltok = 0;
                for (size_t a = 0; a < len && !rc;) {
                    const char *nl = memchr(src + a, '\n', len - a);
                    size_t b = nl ? (size_t)(nl - src) + 1 : len;
                    ids.n = 0;
                    rc = hr_tokenizer_encode(tok, src + a, b - a, flags, &ids, &err);
                    ltok += ids.n;
                    a = b;
                }
                double dt = hr_now() - t0;
                lbest = dt < lbest ? dt : lbest;
            }
            if (!rc)
                printf("{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, \"mb_per_s\": %.2f, "
                       "\"line_tokens\": %zu, \"lines_mb_per_s\": %.2f}\n",
                       len, whole, best, (double)len / 1e6 / best, ltok,
                       (double)len / 1e6 / lbest);
        } else if (!rc) {
            rc = hr_tokenizer_encode(tok, file ? buf : text, len, flags, &ids, &err);
            if (!rc)
                print_ids(&ids, json);
        }
    }
    hr_tokens_free(&ids);
    free(buf);
    hr_tokenizer_free(tok);
    return rc ? hr_cli_fail(&err) : 0;
}
