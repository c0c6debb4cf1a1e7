/* The SSD tier's files of format version 3 rewritten as version 4, so that
 * an upgrade keeps the user's cache. Version 4 has version 3's fields, the
 * same payload and the same checksum; only its header is padded to
 * HDR_BYTES (direct I/O). A directory that may hold version-3 files (one
 * that existed without the marker UPGRADED_MARK) is walked by the writer
 * thread between its jobs, a file at a time; until the walk ends, a
 * reader takes a version-3 file for a miss rather than quarantining it
 * (hr__ssd_old). The marker is written once the walk has ended; a walk cut
 * short (a stop, a failed write) goes on at the next start. */
#include "engine/ssd_int.h"
#include "core/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OLD_VERSION 3u
#define UPGRADED_MARK "format-4"

/* The first header bytes of the file open at fd: version 3's. */
static bool is_old(int fd, unsigned char *h, size_t n) {
    uint32_t version;
    if (pread(fd, h, n, 0) != (ssize_t)n || memcmp(h, MAGIC, 8))
        return false;
    memcpy(&version, h + 8, 4);
    return version == OLD_VERSION;
}

bool hr__ssd_old(hr_ssd *s, int fd) {
    unsigned char h[12];
    return atomic_load(&s->old_files) && is_old(fd, h, sizeof h);
}

static void mark_path(const hr_ssd *s, char *out, size_t n) {
    snprintf(out, n, "%s/%s", s->dir, UPGRADED_MARK);
}

/* The directory marked as holding no version-3 file; whether it is. */
static bool mark(const hr_ssd *s) {
    char path[4200];
    mark_path(s, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

void hr__ssd_upgrade_start(hr_ssd *s, bool fresh) {
    char path[4200];
    mark_path(s, path, sizeof path);
    if (fresh) { /* a new directory: nothing to convert, ever */
        mark(s);
        return;
    }
    if (access(path, F_OK) == 0 || !(s->upgrade = opendir(s->dir)))
        return;
    atomic_store(&s->old_files, true);
}

/* convert's answer for a file that fails its checks (quarantined) */
static const char damaged[] = "damaged";

/* The version-3 file at path (fd, its header h: HDR_FIELDS bytes, st)
 * rewritten as version 4 with its mtime (the budget's eviction order). Why
 * it could not be (the file is left where it is), or NULL. */
static const char *convert(hr_ssd *s, int fd, const char *path, const unsigned char *h,
                           const struct stat *st) {
    uint32_t hdr;
    uint64_t sb, sum, hsum;
    memcpy(&hdr, h + 12, 4);
    memcpy(&sb, h + HDR_FIELDS - 24, 8);
    memcpy(&sum, h + HDR_FIELDS - 16, 8);
    memcpy(&hsum, h + HDR_FIELDS - 8, 8);
    size_t len = s->payload + sb;
    if (hdr != HDR_FIELDS || (sb != 0 && sb != s->state_bytes) ||
        (size_t)st->st_size != HDR_FIELDS + len || XXH64(h, HDR_FIELDS - 8, 0) != hsum)
        return damaged;
    unsigned char *buf = malloc(len);
    if (!buf)
        return "out of memory";
    const char *why = NULL;
    if (pread(fd, buf, len, HDR_FIELDS) != (ssize_t)len)
        why = "unreadable";
    else if (XXH64(buf, len, 0) != sum)
        why = damaged;
    if (!why) {
        unsigned char nh[HDR_BYTES] = {0};
        uint32_t u32[] = {VERSION, HDR_BYTES};
        memcpy(nh, h, HDR_FIELDS - 8);
        memcpy(nh + 8, u32, sizeof u32);
        hsum = XXH64(nh, HDR_FIELDS - 8, 0);
        memcpy(nh + HDR_FIELDS - 8, &hsum, 8);
        struct iovec iov[] = {{nh, HDR_BYTES}, {buf, len}};
        if (hr__ssd_write_file(path, iov, 2) != 0) {
            why = "not written";
        } else {
            utimensat(AT_FDCWD, path, (struct timespec[2]){st->st_atim, st->st_mtim}, 0);
            hr__ssd_wrote(s, HDR_BYTES + len, (size_t)st->st_size, false);
            s->n_upgraded++;
        }
    }
    free(buf);
    return why;
}

/* Ends the walk: the marker written, readers back to quarantining. */
static void finish(hr_ssd *s) {
    closedir(s->upgrade);
    s->upgrade = NULL;
    if (!mark(s)) /* (the next start walks again) */
        return;
    atomic_store(&s->old_files, false);
    if (s->n_upgraded)
        hr_log(HR_LOG_INFO, "SSD cache: %ld files of format version %u converted to %u in %s",
               s->n_upgraded, OLD_VERSION, VERSION, s->dir);
}

void hr__ssd_upgrade_step(hr_ssd *s) {
    struct dirent *e = readdir(s->upgrade);
    if (!e) {
        finish(s);
        return;
    }
    size_t l = strlen(e->d_name);
    if (l < 4 || strcmp(e->d_name + l - 3, ".kv"))
        return;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    unsigned char h[HDR_FIELDS];
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && is_old(fd, h, sizeof h)) {
        const char *why = convert(s, fd, path, h, &st);
        if (why == damaged) {
            hr__ssd_quarantine(s, path, "is format version 3 and damaged");
        } else if (why) { /* left for the next start */
            hr_log(HR_LOG_WARN, "SSD cache: %s of format version %u %s (%s); converted at the "
                   "next start", path, OLD_VERSION, why, strerror(errno));
            closedir(s->upgrade);
            s->upgrade = NULL;
        }
    } else {
        /* the peek must not leave the file's first page cached: a restart's
         * cold files are read with O_DIRECT (ssd_run.c) */
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
    close(fd);
}
