/* hearth embed: texts -> embeddings, one JSON line per input, through the
 * engine (hr_embed: the inputs of a batch run together). */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "hearth.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 64 /* inputs per hr_embed call */

static const char USAGE[] =
    "usage: hearth embed --model PATH (--text T | --file F) [--prompt-name N] "
    "[--dimensions K] [--threads T] [--device D]\n"
    "  --file: one input per line ('-': stdin); empty lines are skipped";

/* Embeds ins[0..n) and prints a line each, numbered from first. */
static int flush(hr_session *s, hr_embed_input *ins, int n, const hr_embed_opts *o, int dims,
                 long first, hr_error *err) {
    if (!n)
        return 0;
    float *out = malloc((size_t)n * dims * sizeof *out);
    if (!out)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int rc = hr_embed(s, ins, n, o, out, NULL, err);
    for (int i = 0; i < n && !rc; i++) {
        printf("{\"index\": %ld, \"embedding\": [", first + i);
        for (int k = 0; k < dims; k++)
            printf(k ? ", %.9g" : "%.9g", (double)out[(size_t)i * dims + k]);
        printf("]}\n");
    }
    fflush(stdout);
    free(out);
    return rc;
}

int hr_cmd_embed(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL, *prompt_name = NULL, *device = "auto";
    long dimensions = 0, threads = 0;
    hr_opt opts[] = {
        {"model", HR_OPT_MODEL, &model, "embedding model directory or .gguf file; or ORG/NAME[@REV]"},
        {"text", HR_OPT_STR, &text, "one text to embed"},
        {"file", HR_OPT_STR, &file, "one text per line ('-': stdin)"},
        {"prompt-name", HR_OPT_STR, &prompt_name,
         "a prompt of the model's sentence-transformers config (default: its default_prompt_name; '': none)"},
        {"dimensions", HR_OPT_INT, &dimensions, "keep the first K values, re-normalised (Matryoshka)"},
        {"threads", HR_OPT_INT, &threads, "compute threads (default: all cores)"},
        {"device", HR_OPT_STR, &device, "where the model runs: auto, cpu (embeddings: the CPU only, for now)"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], USAGE, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (!model || !!text + !!file != 1)
        return hr_cli_fail(&(hr_error){.msg = "embed: give --model and exactly one of --text, "
                                              "--file (see --help)"});
    if (threads < 0 || dimensions < 0)
        return hr_cli_fail(&(hr_error){.msg = "embed: --threads and --dimensions must be >= 0"});
    hr_llm *m = NULL;
    hr_session *s = NULL;
    FILE *f = NULL;
    char *lines[BATCH] = {0};
    hr_embed_input ins[BATCH];
    int n = 0, status = 1;
    long done = 0;
    hr_llm_opts lo = {.n_threads = (int)threads, .device = device};
    if ((rc = hr_llm_load(&m, model, &lo, &err)))
        goto out;
    int dim = hr_llm_embed_dim(m);
    if (!dim) { /* the model cannot embed: hr_embed says why */
        if (!(rc = hr_session_new(&s, m, NULL, &err)))
            rc = hr_embed(s, &(hr_embed_input){.text = "x", .text_len = 1}, 1, NULL,
                          (float[1]){0}, NULL, &err);
        if (!rc)
            rc = hr_err(&err, HR_EUNSUPPORTED, "this model cannot embed");
        goto out;
    }
    if (dimensions > dim) {
        rc = hr_err(&err, HR_ERANGE, "--dimensions %ld: this model's embeddings have %d", dimensions,
                    dim);
        goto out;
    }
    hr_session_opts so = {.n_threads = (int)threads, .max_batch = 16, .prompt_cache = -1};
    if ((rc = hr_session_new(&s, m, &so, &err)))
        goto out;
    hr_embed_opts eo = {.prompt_name = prompt_name, .dimensions = (int)dimensions};
    int dims = dimensions ? (int)dimensions : dim;
    if (text) {
        ins[0] = (hr_embed_input){.text = text, .text_len = strlen(text)};
        rc = flush(s, ins, 1, &eo, dims, 0, &err);
    } else {
        f = strcmp(file, "-") ? fopen(file, "rb") : stdin;
        if (!f) {
            rc = hr_err(&err, HR_EIO, "%s: cannot open", file);
            goto out;
        }
        size_t cap = 0;
        ssize_t len;
        char *line = NULL;
        while (!rc && (len = getline(&line, &cap, f)) >= 0) {
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
                line[--len] = 0;
            if (!len)
                continue;
            free(lines[n]);
            lines[n] = line;
            line = NULL;
            cap = 0;
            ins[n] = (hr_embed_input){.text = lines[n], .text_len = (size_t)len};
            if (++n == BATCH) {
                rc = flush(s, ins, n, &eo, dims, done, &err);
                done += n;
                n = 0;
            }
        }
        free(line);
        if (!rc)
            rc = flush(s, ins, n, &eo, dims, done, &err);
    }
    status = rc ? 1 : 0;
out:
    if (rc)
        hr_cli_fail(&err);
    for (int i = 0; i < BATCH; i++)
        free(lines[i]);
    if (f && f != stdin)
        fclose(f);
    hr_session_free(s);
    hr_llm_free(m);
    return rc ? 1 : status;
}
