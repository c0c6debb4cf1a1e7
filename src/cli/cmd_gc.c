/* hearth gc: removes from the Hugging Face cache what no model needs: old
 * revisions (snapshots no ref names), the blobs only they used, blobs no
 * snapshot links to, refs to missing snapshots and abandoned partial
 * downloads. --dry-run prints the same list and removes nothing. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "io/hfcache.h"
#include "io/hfscan.h"

#include <stdio.h>
#include <string.h>

static const char usage[] = "usage: hearth gc [ORG/NAME] [--dry-run]";

int hr_cmd_gc(int argc, char **argv) {
    int dry = 0;
    const hr_opt opts[] = {{"dry-run", HR_OPT_FLAG, &dry, "print what would go; remove nothing"}};
    const char *repo = NULL;
    char *rest[2];
    int n_rest = 0;
    for (int i = 0; i < argc; i++) /* one word, one flag */
        if (!repo && argv[i][0] != '-')
            repo = argv[i];
        else if (n_rest < 2)
            rest[n_rest++] = argv[i];
    hr_error err = {0};
    int rc = argc > 3 ? hr_err(&err, HR_EINVAL, "too many arguments (see --help)")
                      : hr_args_parse(n_rest, rest, opts, 1, usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    if (repo && hr_hf_repo_check(repo, &err))
        return hr_cli_fail(&err);
    char cache[HR_HF_PATH_MAX];
    hr_hf_scan *s = NULL;
    if (hr_hf_cache_dir(cache, sizeof cache, &err) || hr_hf_scan_open(&s, cache, &err))
        return hr_cli_fail(&err);
    bool found = !repo;
    for (int i = 0; i < s->n_repos; i++)
        found |= !strcmp(s->repos[i].id, repo ? repo : "");
    if (!found) {
        hr_hf_scan_free(s);
        return hr_cli_fail(&(hr_error){.msg = "that model is not in the Hugging Face cache "
                                              "(see hearth ls)"});
    }
    hr_hf_gc_item *items = NULL;
    int n = 0;
    if (hr_hf_gc_plan(s, repo, &items, &n, &err)) {
        hr_hf_scan_free(s);
        return hr_cli_fail(&err);
    }
    static const char *what[] = {"old revision (no ref names it)", "ref to a missing snapshot",
                                 "blob no kept revision uses", "partial download",
                                 "missing-file record (.no_exist)"};
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        const hr_hf_gc_item *it = &items[i];
        printf("%s %-32s %-28s %12llu B  %s\n", dry ? "would remove" : "removing",
               it->repo->id, what[it->kind], (unsigned long long)it->bytes, it->path);
        bytes += it->bytes;
    }
    rc = dry ? 0 : hr_hf_gc_apply(items, n, &err);
    if (!rc)
        printf("%s %d item%s, %llu bytes (%.1f MB)%s\n", dry ? "would free:" : "freed:", n,
               n == 1 ? "" : "s", (unsigned long long)bytes, 1e-6 * (double)bytes,
               dry && n ? "; run without --dry-run to remove them" : "");
    hr_hf_gc_free(items, n);
    hr_hf_scan_free(s);
    return rc ? hr_cli_fail(&err) : 0;
}
