#include "support/tree.h"
#include "core/file.h"
#include "io/hfcache.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* root/rel into p, its directory made */
static int prepare(char *p, size_t n, const char *root, const char *rel) {
    snprintf(p, n, "%s/%s", root, rel);
    char *slash = strrchr(p, '/');
    *slash = 0;
    int rc = hr_hf_mkdirs(p, NULL);
    *slash = '/';
    return rc;
}

int hr_test_put(const char *root, const char *rel, const char *text) {
    char p[HR_HF_PATH_MAX];
    int rc = prepare(p, sizeof p, root, rel);
    return rc ? rc : hr_file_write_atomic(p, text, strlen(text), NULL);
}

int hr_test_link(const char *root, const char *rel, const char *target) {
    char p[HR_HF_PATH_MAX];
    int rc = prepare(p, sizeof p, root, rel);
    return rc ? rc : symlink(target, p) == 0 ? 0 : HR_EIO;
}
