/* The hub's revision listing and the checks on names that come from it. */
#include "core/error.h"
#include "io/hfcache.h"
#include "io/hub.h"

#include <fnmatch.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int hr_hub_path_check(const char *path, hr_error *err) {
    size_t len = strlen(path);
    if (!len || len > 1024)
        return hr_err(err, HR_EFORMAT, "file name of %zu bytes", len);
    const char *c = path;
    while (*c) {
        const char *end = strchr(c, '/');
        size_t n = end ? (size_t)(end - c) : strlen(c);
        if (!n || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return hr_err(err, HR_EFORMAT, "file name '%.200s' leaves its folder", path);
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f || c[i] == '\\')
                return hr_err(err, HR_EFORMAT, "file name '%.200s' has a control character "
                              "or backslash", path);
        if (!end)
            break;
        c = end + 1;
        if (!*c)
            return hr_err(err, HR_EFORMAT, "file name '%.200s' ends with '/'", path);
    }
    return 0;
}

bool hr_hub_glob_match(const char *pattern, const char *path) {
    size_t n = strlen(pattern);
    if (n && pattern[n - 1] == '/') {
        char *p = malloc(n + 2);
        if (!p)
            return false;
        memcpy(p, pattern, n);
        strcpy(p + n, "*");
        bool m = fnmatch(p, path, 0) == 0;
        free(p);
        return m;
    }
    return fnmatch(pattern, path, 0) == 0;
}

void hr_hub_info_deinit(hr_hub_info *info) {
    if (!info)
        return;
    for (int i = 0; i < info->n_files; i++)
        free(info->files[i]);
    free(info->files);
    memset(info, 0, sizeof *info);
}

int hr_hub_info_parse(hr_hub_info *info, const char *buf, size_t len, hr_error *err) {
    memset(info, 0, sizeof *info);
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    int rc = 0;
    if (!root) {
        hr_err(err, HR_EFORMAT, "revision listing: bad JSON: %s (line %d)", je.text, je.line);
        for (char *c = err ? err->msg : NULL; c && *c; c++)
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = ' '; /* it quotes the input: keep the message one line */
        return HR_EFORMAT;
    }
    const json_t *sha = json_object_get(root, "sha");
    const json_t *sib = json_object_get(root, "siblings");
    if (!json_is_string(sha) || !hr_hf_is_commit(json_string_value(sha))) {
        rc = hr_err(err, HR_EFORMAT, "revision listing: no 40-hex-digit \"sha\"");
        goto done;
    }
    strcpy(info->sha, json_string_value(sha));
    if (!json_is_array(sib)) {
        rc = hr_err(err, HR_EFORMAT, "revision listing: \"siblings\" is not an array");
        goto done;
    }
    size_t n = json_array_size(sib);
    if (n > 200000) {
        rc = hr_err(err, HR_EFORMAT, "revision listing: %zu files", n);
        goto done;
    }
    if (n && !(info->files = calloc(n, sizeof *info->files))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *f = json_object_get(json_array_get(sib, i), "rfilename");
        if (!json_is_string(f) || strlen(json_string_value(f)) != json_string_length(f)) {
            rc = hr_err(err, HR_EFORMAT, "revision listing: siblings[%zu] has no string "
                        "\"rfilename\"", i);
            goto done;
        }
        if ((rc = hr_hub_path_check(json_string_value(f), err))) {
            hr_err_wrap(err, "revision listing");
            goto done;
        }
        if (!(info->files[info->n_files] = strdup(json_string_value(f)))) {
            rc = hr_err(err, HR_ENOMEM, "out of memory");
            goto done;
        }
        info->n_files++;
    }
done:
    json_decref(root);
    if (rc)
        hr_hub_info_deinit(info);
    return rc;
}
