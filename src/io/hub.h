/* Downloads from the Hugging Face hub into the cache (io/hfcache.h), over the
 * hub's HTTP API as huggingface_hub speaks it:
 *
 *   GET  {endpoint}/api/models/{repo}/revision/{rev}  -> {"sha", "siblings":
 *        [{"rfilename"}, ...]}: the commit and its files
 *   HEAD {endpoint}/{repo}/resolve/{commit}/{file}    -> X-Repo-Commit, the
 *        blob's id (X-Linked-Etag for an LFS file: its sha256; else ETag: the
 *        git blob sha1), its size (X-Linked-Size, else Content-Length) and,
 *        on a redirect to another host (a CDN), Location; relative redirects
 *        (a renamed repo) are followed
 *   GET  the file (Range: bytes=N- to resume blobs/<etag>.incomplete)
 *
 * Every blob is checked before it is placed: its size, and its sha256 or git
 * sha1 when the etag is one (anything else has no check). Then it is renamed
 * into blobs/, a relative symlink is renamed into snapshots/<commit>/, and,
 * once every file is there, refs/<rev> is written (temp + rename). An error
 * leaves no partial file in snapshots/ or blobs/ (only the .incomplete file,
 * which the next run resumes). Authorization: Bearer <token> goes to the hub
 * only, never to a redirect's other host. */
#ifndef HR_IO_HUB_H
#define HR_IO_HUB_H

#include "hearth.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- the revision listing (untrusted JSON from the network) ------------------------------ */

typedef struct hr_hub_info {
    char sha[41];  /* the commit */
    char **files;  /* repo-relative paths, each checked by hr_hub_path_check */
    int n_files;
} hr_hub_info;

/* Parses the body of /api/models/{repo}/revision/{rev}. HR_EFORMAT naming
 * the problem: not JSON, no 40-hex "sha", "siblings" not an array of objects
 * with a string "rfilename", or a file path that could leave the snapshot. */
int hr_hub_info_parse(hr_hub_info *info, const char *buf, size_t len, hr_error *err);
void hr_hub_info_deinit(hr_hub_info *info);

/* A path from the hub that is safe under snapshots/<commit>/: relative,
 * '/'-separated, no empty, "." or ".." component, no control character or
 * backslash, at most 1024 bytes. */
int hr_hub_path_check(const char *path, hr_error *err);

/* fnmatch(3) without FNM_PATHNAME, as huggingface_hub's allow_patterns
 * (fnmatchcase: '*' crosses '/'); a pattern ending in '/' matches everything
 * under that folder. */
bool hr_hub_glob_match(const char *pattern, const char *path);

/* ---- download ------------------------------------------------------------------------------ */

typedef struct hr_hub_opts {
    const char *endpoint;        /* NULL: $HF_ENDPOINT, else https://huggingface.co */
    const char *token;           /* NULL: $HF_TOKEN, else $HF_TOKEN_PATH or $HF_HOME/token */
    const char *cache;           /* NULL: hr_hf_cache_dir() */
    const char *revision;        /* NULL: "main" */
    const char *const *include;  /* globs; a file is fetched when one matches */
    int n_include;               /* 0: every file */
    FILE *progress;              /* progress lines (a terminal), or NULL */
} hr_hub_opts;

typedef struct hr_hub_result {
    char commit[41];
    char snapshot[4096];
    int n_files;           /* files of the snapshot that were asked for */
    int n_fetched;         /* of those, downloaded now (the rest were cached) */
    uint64_t bytes;        /* bytes received now */
} hr_hub_result;

/* Downloads repo ("org/name") at opts->revision into the cache. res may be
 * NULL. Errors are one line: no such repo or revision, HTTP 401/403 (naming
 * HF_TOKEN), a missing file, a size or hash mismatch, a full disk, a cut
 * connection after 5 resumed tries. */
int hr_hub_download(const char *repo, const hr_hub_opts *opts, hr_hub_result *res,
                    hr_error *err);

#endif
