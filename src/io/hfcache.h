/* The Hugging Face hub cache, laid out as huggingface_hub lays it out, so
 * models downloaded by mlx-lm, transformers or huggingface-cli are found and
 * models hearth downloads are theirs too:
 *
 *   <cache>/models--<org>--<name>/
 *     refs/<revision>            a file holding a 40-hex commit ("main",
 *                                a tag, or "refs/pr/1" as refs/refs/pr/1)
 *     snapshots/<commit>/<path>  relative symlinks into ../../blobs (one more
 *                                "../" per directory level of <path>)
 *     blobs/<etag>               the bytes: the sha256 of an LFS file, the
 *                                git blob sha1 of any other; <etag>.incomplete
 *                                while downloading
 *   <cache>/.locks/models--<org>--<name>/<etag>.lock   flock(2) while a blob
 *                                is written (huggingface_hub's filelock)
 *
 * <cache> is $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub,
 * else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub
 * (huggingface_hub's constants.py; a leading "~/" is expanded). Paths are
 * written into caller buffers; every function fails with HR_ERANGE rather
 * than truncate one. */
#ifndef HR_IO_HFCACHE_H
#define HR_IO_HFCACHE_H

#include "hearth.h"

#include <stdbool.h>
#include <stddef.h>

#define HR_HF_PATH_MAX 4096

/* A model named on the command line: ORG/NAME[@REVISION]. */
typedef struct hr_hf_ref {
    char repo[128];     /* "org/name" */
    char revision[256]; /* "main" when none was given */
} hr_hf_ref;

/* The cache directory (it need not exist). */
int hr_hf_cache_dir(char *out, size_t n, hr_error *err);

/* A repo id as the hub accepts it: ORG/NAME, each part of [A-Za-z0-9_.-]
 * starting and ending with a letter, digit or '_', no "--" or "..", at most
 * 96 characters. HR_EINVAL naming what is wrong. */
int hr_hf_repo_check(const char *repo, hr_error *err);

/* A revision (branch, tag, commit, "refs/pr/N") that is safe as a path under
 * refs/: [A-Za-z0-9_.+=-] components separated by single '/', none starting
 * with '.'. */
int hr_hf_revision_check(const char *rev, hr_error *err);

/* True for a full commit hash (40 lowercase hex digits). */
bool hr_hf_is_commit(const char *rev);

/* Parses "ORG/NAME[@REV]"; HR_EINVAL when s is not of that form. */
int hr_hf_ref_parse(hr_hf_ref *ref, const char *s, hr_error *err);

/* <cache>/models--org--name. */
int hr_hf_repo_dir(char *out, size_t n, const char *cache, const char *repo, hr_error *err);

/* The snapshot directory of ref in cache: a commit names snapshots/<commit>,
 * anything else is read from refs/<revision>. commit (may be NULL, else 41
 * bytes) gets the commit. HR_ENOTFOUND with a message saying what is
 * missing (the repo, the ref, the snapshot). */
int hr_hf_snapshot(char *out, size_t n, char *commit, const char *cache, const hr_hf_ref *ref,
                   hr_error *err);

/* What --model means: an existing file or directory is itself; an
 * ORG/NAME[@REV] that is not a path is its snapshot in the cache (or the
 * snapshot's one .gguf file, when it has no config.json and exactly one);
 * anything else is copied unchanged, for the loader to report. HR_ENOTFOUND
 * when a name is not in the cache, naming the cache and `hearth get`. */
int hr_hf_model_path(char *out, size_t n, const char *arg, hr_error *err);

/* "org/name" when path lies in a cache snapshot
 * (.../models--org--name/snapshots/<commit>[/...]); 0 on success, HR_ENOTFOUND
 * otherwise. Lexical: the path is not resolved. */
int hr_hf_repo_of_path(char *out, size_t n, const char *path);

/* mkdir -p of dir (mode 0777 & ~umask). */
int hr_hf_mkdirs(const char *dir, hr_error *err);

#endif
