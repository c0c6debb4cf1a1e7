/* hearth get's HTTP exchanges (io/hub.c's transport, private to io/):
 * one libcurl request at a time, no redirect followed except for the
 * revision listing, the headers the hub's protocol needs kept, a file's body
 * written straight into its blob at an offset, progress on a terminal. */
#ifndef HR_IO_HUB_HTTP_H
#define HR_IO_HUB_HTTP_H

#include "hearth.h"
#include "io/hfcache.h"
#include "io/hub.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* What we keep of a response's headers (values cut to fit, control bytes
 * dropped: they reach error messages). */
typedef struct hr__resp {
    long status;
    char etag[160], linked_etag[160], commit[64], location[2048], error_code[64];
    char error_msg[200], content_range[96];
    int64_t linked_size, content_length;
} hr__resp;

typedef struct hr__hub {
    CURL *curl;
    char endpoint[1024];
    char auth[4200]; /* "Authorization: Bearer ..." or "" */
    const char *repo;
    char repo_dir[HR_HF_PATH_MAX], locks[HR_HF_PATH_MAX];
    FILE *progress;
    hr_hub_result *res;
    /* the body of the exchange in flight */
    hr__resp *r;
    char *mem;                 /* API: the body in memory */
    size_t len, cap;
    int fd;                    /* file: written at off (-1: to mem) */
    int64_t off, start;        /* where the body goes; where it started */
    int werr;                  /* errno of a failed write, or -1: bad Content-Range */
    const char *name;          /* the file, for progress */
    int64_t total;
    double t0, t_shown;
} hr__hub;

/* One request to url (HEAD or GET); from > 0 asks for bytes from..end. The
 * response's headers land in r; a 200/206 body goes to h->fd at h->off when
 * h->fd >= 0, any other body to h->mem. Returns libcurl's code; h->werr is
 * set when writing the body failed (-1: a 206 for the wrong range). */
CURLcode hr__hub_perform(hr__hub *h, bool head, const char *url, bool auth, int64_t from,
                         hr__resp *r);
/* The progress line of the file in flight (a terminal only; throttled
 * unless last). */
void hr__hub_show(hr__hub *h, bool last);
/* A transfer that failed, or an HTTP error in huggingface_hub's terms
 * (X-Error-Code first); file is NULL for the revision listing. */
int hr__hub_transport_error(CURLcode cc, const char *url, hr_error *err);
int hr__hub_http_error(hr__hub *h, const hr__resp *r, const char *rev, const char *file,
                       hr_error *err);

#endif
