#include "core/file.h"
#include "core/fault.h"
#include "core/error.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Open a regular file for reading; *size gets its size. */
static int open_regular(const char *path, int *fd, size_t *size, hr_error *err) {
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return hr_err(err, HR_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(*fd);
        return hr_err(err, HR_EIO, "%s: not a regular file", path);
    }
    *size = (size_t)st.st_size;
    return 0;
}

int hr_file_read(const char *path, char **out, size_t *len, hr_error *err) {
    *out = NULL;
    int fd;
    size_t n;
    int rc = open_regular(path, &fd, &n, err);
    if (rc)
        return rc;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return hr_err(err, HR_ENOMEM, "%s: cannot allocate %zu bytes", path, n);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            close(fd);
            return hr_err(err, HR_EIO, "%s: short read", path);
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *out = buf;
    if (len)
        *len = n;
    return 0;
}

int hr_mmap_open(hr_mmap *m, const char *path, hr_error *err) {
    m->data = NULL;
    m->size = 0;
    int fd;
    size_t size;
    int rc = open_regular(path, &fd, &size, err);
    if (rc)
        return rc;
    if (size > 0) {
        void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return hr_err(err, HR_EIO, "%s: mmap: %s", path, strerror(errno));
        }
        m->data = p;
        m->size = size;
    }
    close(fd);
    return 0;
}

void hr_mmap_close(hr_mmap *m) {
    if (m && m->data)
        munmap(m->data, m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}

void hr_mmap_drop(const void *p, size_t n) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)p + pg - 1) / pg * pg,
              e = ((uintptr_t)p + n) / pg * pg;
    if (e > a)
        madvise((void *)a, e - a, MADV_DONTNEED); /* advice: a failure changes nothing */
}

int hr_write_all(int fd, const void *buf, size_t n) {
    if (hr_fault_hit(HR_FAULT_WRITE)) {
        errno = EIO;
        return -1;
    }
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        if (w == 0) { /* no progress and no reason: call it a full disk */
            errno = ENOSPC;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int hr_file_write_atomic(const char *path, const void *buf, size_t len,
                         hr_error *err) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >=
        (int)sizeof tmp)
        return hr_err(err, HR_ERANGE, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return hr_err(err, HR_EIO, "%s: %s", tmp, strerror(errno));
    if (hr_write_all(fd, buf, len) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return hr_err(err, HR_EIO, "%s: %s", tmp, strerror(e));
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        unlink(tmp);
        return hr_err(err, HR_EIO, "%s: %s", tmp, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return hr_err(err, HR_EIO, "%s: rename: %s", path, strerror(e));
    }
    return 0;
}

int hr_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int hr_dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int hr_path_join(char *out, size_t n, const char *dir, const char *name) {
    int w = snprintf(out, n, "%s/%s", dir, name);
    return (w < 0 || (size_t)w >= n) ? HR_ERANGE : 0;
}
