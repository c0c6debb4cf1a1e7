/* hearth get: a model from the Hugging Face hub into its cache. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "io/hfcache.h"
#include "io/hub.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: hearth get ORG/NAME[@REV] [--revision R] [--include GLOB]... [--quiet]\n"
    "downloads into the Hugging Face cache from $HF_ENDPOINT (default https://huggingface.co),\n"
    "with $HF_TOKEN when set";

int hr_cmd_get(int argc, char **argv) {
    const char *revision = NULL;
    hr_opt_list include = {0};
    int quiet = 0;
    const hr_opt opts[] = {
        {"revision", HR_OPT_STR, &revision, "branch, tag or commit (default main)"},
        {"include", HR_OPT_LIST, &include,
         "only files matching this glob ('*' crosses '/'; may repeat)"},
        {"quiet", HR_OPT_FLAG, &quiet, "no progress, even on a terminal"},
    };
    /* the repo is the word that is no flag's value */
    const char *repo = NULL;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int n_rest = 0, rc;
    hr_error err = {0};
    if (!rest) {
        rc = hr_cli_fail(&(hr_error){.msg = "out of memory"});
        goto done;
    }
    for (int i = 0; i < argc; i++) {
        bool value = i && (!strcmp(argv[i - 1], "--revision") || !strcmp(argv[i - 1], "--include"));
        if (!repo && argv[i][0] != '-' && !value)
            repo = argv[i];
        else
            rest[n_rest++] = argv[i];
    }
    if ((rc = hr_args_parse(n_rest, rest, opts, sizeof opts / sizeof opts[0], usage, &err))) {
        rc = rc > 0 ? 0 : hr_cli_fail(&err);
        goto done;
    }
    if (!repo) {
        rc = hr_cli_fail(&(hr_error){.msg = "which model? hearth get ORG/NAME (see --help)"});
        goto done;
    }
    hr_hf_ref ref;
    if (hr_hf_ref_parse(&ref, repo, &err)) {
        rc = hr_cli_fail(&err);
        goto done;
    }
    if (strchr(repo, '@') && revision && strcmp(revision, ref.revision)) {
        rc = hr_cli_fail(&(hr_error){.msg = "two revisions: ORG/NAME@REV and --revision"});
        goto done;
    }
    signal(SIGXFSZ, SIG_IGN); /* a file size limit is a failed write, like a full disk */
    hr_hub_opts o = {
        .revision = revision ? revision : ref.revision,
        .include = include.v,
        .n_include = include.n,
        .progress = !quiet && isatty(STDERR_FILENO) ? stderr : NULL,
    };
    hr_hub_result res;
    if (hr_hub_download(ref.repo, &o, &res, &err)) {
        rc = hr_cli_fail(&err);
        goto done;
    }
    printf("%s\n", res.snapshot);
    if (o.progress)
        fprintf(stderr, "%s@%.12s: %d files, %d downloaded (%.1f MB)\n", ref.repo, res.commit,
                res.n_files, res.n_fetched, 1e-6 * (double)res.bytes);
    rc = 0;
done:
    free(rest);
    return rc;
}
