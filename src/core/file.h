/* Files: whole-file reads, read-only mmaps, atomic writes. */
#ifndef HR_CORE_FILE_H
#define HR_CORE_FILE_H

#include "hearth.h"

#include <stddef.h>

/* Read a whole file into a NUL-terminated malloc'd buffer (caller frees).
 * *len (may be NULL) gets the byte count without the NUL. */
int hr_file_read(const char *path, char **out, size_t *len, hr_error *err);

typedef struct hr_mmap {
    void *data;
    size_t size;
} hr_mmap;

/* Map a file read-only. An empty file maps to data == NULL, size == 0. */
int hr_mmap_open(hr_mmap *m, const char *path, hr_error *err);
void hr_mmap_close(hr_mmap *m);
/* The pages wholly inside [p, p + n) of a read-only file mapping are not
 * needed now: they leave this process's memory (a later read brings them
 * back from the file). */
void hr_mmap_drop(const void *p, size_t n);

/* Write all n bytes to fd, retrying short writes and EINTR. 0, or -1 with
 * errno saying why (a short write's cause, e.g. ENOSPC; EIO for an injected
 * HEARTH_FAULT=write:N). Each call is one write event for core/fault.h. */
int hr_write_all(int fd, const void *buf, size_t n);

/* Write buf to path atomically: a temp file beside it, fsync, rename. */
int hr_file_write_atomic(const char *path, const void *buf, size_t len,
                         hr_error *err);

int hr_file_exists(const char *path);
int hr_dir_exists(const char *path);

/* dir + "/" + name into out (size n); HR_ERANGE if it does not fit. */
int hr_path_join(char *out, size_t n, const char *dir, const char *name);

#endif
