/* What is in the Hugging Face cache (io/hfcache.h), for hearth ls and gc:
 * the model repos, their revisions (snapshots and the refs naming them),
 * their blobs and partial downloads; and the plan that gc carries out.
 * Only models--* folders are read; datasets and spaces are left alone. */
#ifndef HR_IO_HFSCAN_H
#define HR_IO_HFSCAN_H

#include "hearth.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hr_hf_blob {
    char *name;      /* the file name in blobs/ (the etag) */
    uint64_t size;
    double mtime;
} hr_hf_blob;

typedef struct hr_hf_rev {
    char *commit;    /* the snapshot's folder name */
    char *dir;       /* its path */
    char **refs;     /* the refs naming it ("main", "refs/pr/1"), sorted */
    int n_refs;
    int n_files;     /* files in the snapshot (links or copies) */
    int n_broken;    /* links whose blob is missing */
    int *blobs;      /* indexes into the repo's blobs of the files' blobs */
    int n_blobs;     /* (distinct) */
    uint64_t bytes;  /* the distinct blobs' sizes */
    double mtime;    /* the newest blob's, else the folder's */
} hr_hf_rev;

typedef struct hr_hf_repo {
    char *id;        /* "org/name" */
    char *dir;
    hr_hf_rev *revs; /* newest first */
    int n_revs;
    hr_hf_blob *blobs;   /* every complete blob, sorted by name */
    int n_blobs;
    hr_hf_blob *partial; /* blobs/<etag>.incomplete (name without the suffix) */
    int n_partial;
    char **dangling;     /* refs naming a snapshot that is not there */
    int n_dangling;
    uint64_t bytes;      /* all complete blobs */
} hr_hf_repo;

typedef struct hr_hf_scan {
    char *dir;
    hr_hf_repo *repos;   /* sorted by id */
    int n_repos;
} hr_hf_scan;

/* Reads the cache at dir. A cache that does not exist is empty, not an
 * error; unreadable entries are skipped. Free with hr_hf_scan_free. */
int hr_hf_scan_open(hr_hf_scan **out, const char *dir, hr_error *err);
void hr_hf_scan_free(hr_hf_scan *s);

/* ---- gc ------------------------------------------------------------------------------------ */

typedef enum hr_hf_gc_kind {
    HR_HF_GC_SNAPSHOT, /* a revision no ref names (the newest is kept when none is named) */
    HR_HF_GC_REF,      /* a ref naming a missing snapshot */
    HR_HF_GC_BLOB,     /* a blob no kept snapshot links to */
    HR_HF_GC_PARTIAL,  /* a partial download no one is writing (its lock is free) */
    HR_HF_GC_NO_EXIST, /* .no_exist/<commit> (huggingface_hub's record of missing
                        * files) of a revision that is not kept */
} hr_hf_gc_kind;

typedef struct hr_hf_gc_item {
    hr_hf_gc_kind kind;
    const hr_hf_repo *repo;
    char *path;
    const char *name;  /* the commit, ref or blob name (points into the scan) */
    uint64_t bytes;    /* freed (snapshots: 0, their blobs are listed) */
} hr_hf_gc_item;

/* What gc removes from s, in the order it removes it (snapshots, their
 * .no_exist records, refs, blobs, partial files). repo (may be NULL: every repo) limits it to one.
 * *items is malloc'd (hr_hf_gc_free). */
int hr_hf_gc_plan(const hr_hf_scan *s, const char *repo, hr_hf_gc_item **items, int *n,
                  hr_error *err);
/* Removes them; a snapshot (a .no_exist record) goes as a whole folder. Stops at the first
 * failure, naming it. */
int hr_hf_gc_apply(const hr_hf_gc_item *items, int n, hr_error *err);
void hr_hf_gc_free(hr_hf_gc_item *items, int n);

#endif
