/* hearth ls: the models in the Hugging Face cache (and the demo model), each
 * revision's refs, files and size, and whether hearth loads it, and why not. */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "io/gguf.h"
#include "io/hfcache.h"
#include "io/hfscan.h"
#include "model/config.h"
#include "model/gguf_model.h"
#include "model/weights.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage[] = "usage: hearth ls [--json]";

/* ---- loadable? ----------------------------------------------------------------------------- */

/* What hearth's loader checks before it reads weights: config.json resolves
 * to hyperparameters (architecture, RoPE, ...) and the weight files' headers
 * are valid (safetensors), or the GGUF file's metadata does. detail gets
 * "llama, safetensors" or the loader's error. */
static bool check_dir(const char *dir, char *detail, size_t n) {
    char p[HR_HF_PATH_MAX], gguf[HR_HF_PATH_MAX] = "";
    hr_error err = {0};
    json_t *cfg = NULL;
    hr_hparams *hp = calloc(1, sizeof *hp);
    bool ok = false, is_gguf = false;
    if (!hp) {
        snprintf(detail, n, "out of memory");
        return false;
    }
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISREG(st.st_mode)) {
        snprintf(gguf, sizeof gguf, "%s", dir);
    } else if (hr_path_join(p, sizeof p, dir, "config.json") || !hr_file_exists(p)) {
        int k = 0;
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            size_t l = strlen(e->d_name);
            if (l > 5 && !strcmp(e->d_name + l - 5, ".gguf") && k++ == 0)
                hr_path_join(gguf, sizeof gguf, dir, e->d_name);
        }
        if (d)
            closedir(d);
        if (k != 1) {
            snprintf(detail, n, k ? "%d .gguf files: name one with --model PATH" :
                                    "no config.json or .gguf file", k);
            goto done;
        }
    }
    if (gguf[0]) {
        hr_gguf *g = NULL;
        bool perm;
        is_gguf = true;
        if (hr_gguf_open(&g, gguf, &err) || hr_gguf_config(g, &cfg, &perm, &err)) {
            hr_gguf_close(g);
            goto fail;
        }
        hr_gguf_close(g);
    } else {
        char *buf = NULL;
        json_error_t je;
        if (hr_file_read(p, &buf, NULL, &err))
            goto fail;
        cfg = json_loads(buf, 0, &je);
        free(buf);
        if (!cfg) {
            snprintf(detail, n, "config.json: bad JSON: %s", je.text);
            goto done;
        }
    }
    if (hr_hparams_from_json(hp, cfg, NULL, &err))
        goto fail;
    hr_hparams_deinit(hp);
    if (!is_gguf) {
        hr_weights *w = NULL;
        if (hr_weights_open(&w, dir, &err))
            goto fail;
        hr_weights_close(w);
    }
    const char *mt = json_string_value(json_object_get(cfg, "model_type"));
    bool tok = is_gguf || (!hr_path_join(p, sizeof p, dir, "tokenizer.json") && hr_file_exists(p));
    snprintf(detail, n, "%s, %s%s", mt ? mt : "?", is_gguf ? "GGUF" : "safetensors",
             tok ? "" : " (no tokenizer.json: token ids only)");
    ok = true;
    goto done;
fail:
    snprintf(detail, n, "%s", err.msg[0] ? err.msg : hr_strerror(err.code));
done:
    json_decref(cfg);
    free(hp);
    return ok;
}

/* ---- output ------------------------------------------------------------------------------ */

static const char *human(uint64_t b, char *buf, size_t n) {
    const char *u[] = {"B", "kB", "MB", "GB", "TB"};
    double x = (double)b;
    int i = 0;
    while (x >= 1000 && i < 4)
        x /= 1000, i++;
    snprintf(buf, n, i ? "%.1f %s" : "%.0f %s", x, u[i]);
    return buf;
}

static uint64_t dir_bytes(const char *dir, int *files) {
    uint64_t b = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[HR_HF_PATH_MAX];
    struct stat st;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && !hr_path_join(p, sizeof p, dir, e->d_name) &&
            stat(p, &st) == 0 && S_ISREG(st.st_mode))
            b += (uint64_t)st.st_size, ++*files;
    if (d)
        closedir(d);
    return b;
}

static void row(json_t *arr, const char *name, const char *rev, const char *commit,
                json_t *refs, int files, uint64_t bytes, const char *path) {
    char detail[512], sz[32], refstr[256] = "";
    bool ok = check_dir(path, detail, sizeof detail);
    for (size_t i = 0; i < json_array_size(refs); i++)
        snprintf(refstr + strlen(refstr), sizeof refstr - strlen(refstr), "%s%s", i ? "," : "",
                 json_string_value(json_array_get(refs, i)));
    if (arr) {
        json_array_append_new(arr, json_pack("{s:s,s:s?,s:O,s:i,s:I,s:s,s:b,s:s}", "name", name,
                                             "commit", commit, "refs", refs, "files", files,
                                             "bytes", (json_int_t)bytes, "path", path,
                                             "loadable", ok, "detail", detail));
    } else {
        printf("%-36s %-12s %-12s %5d %10s  %s: %s\n", name, rev, refstr[0] ? refstr : "-",
               files, human(bytes, sz, sizeof sz), ok ? "yes" : "no", detail);
    }
    json_decref(refs);
}

int hr_cmd_ls(int argc, char **argv) {
    int as_json = 0;
    const hr_opt opts[] = {{"json", HR_OPT_FLAG, &as_json, "print one JSON object"}};
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, 1, usage, &err);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    char cache[HR_HF_PATH_MAX], sz[32];
    hr_hf_scan *s = NULL;
    if (hr_hf_cache_dir(cache, sizeof cache, &err) || hr_hf_scan_open(&s, cache, &err))
        return hr_cli_fail(&err);
    json_t *arr = as_json ? json_array() : NULL;
    if (!as_json)
        printf("%-36s %-12s %-12s %5s %10s  %s\n", "MODEL", "REVISION", "REFS", "FILES", "SIZE",
               "LOADABLE");
    int demo_files = 0;
    uint64_t demo_bytes = dir_bytes(HEARTH_DEFAULT_MODEL, &demo_files);
    row(arr, "hearth-demo", "(built in)", NULL, json_array(), demo_files, demo_bytes,
        HEARTH_DEFAULT_MODEL);
    uint64_t total = 0, unref = 0, partial = 0;
    int n_unref = 0, n_partial = 0, n_dangling = 0;
    for (int i = 0; i < s->n_repos; i++) {
        const hr_hf_repo *r = &s->repos[i];
        total += r->bytes;
        for (int k = 0; k < r->n_revs; k++) {
            const hr_hf_rev *v = &r->revs[k];
            json_t *refs = json_array();
            for (int j = 0; j < v->n_refs; j++)
                json_array_append_new(refs, json_string(v->refs[j]));
            char rev[13];
            snprintf(rev, sizeof rev, "%.12s", v->commit);
            char name[HR_HF_PATH_MAX];
            snprintf(name, sizeof name, "%s", r->id);
            row(arr, name, rev, v->commit, refs, v->n_files, v->bytes, v->dir);
        }
        hr_hf_gc_item *items = NULL;
        int n = 0;
        if (hr_hf_gc_plan(s, r->id, &items, &n, &err)) {
            hr_hf_scan_free(s);
            json_decref(arr);
            return hr_cli_fail(&err);
        }
        for (int k = 0; k < n; k++) {
            if (items[k].kind == HR_HF_GC_BLOB)
                unref += items[k].bytes, n_unref++;
            else if (items[k].kind == HR_HF_GC_PARTIAL)
                partial += items[k].bytes, n_partial++;
            else if (items[k].kind == HR_HF_GC_REF)
                n_dangling++;
        }
        hr_hf_gc_free(items, n);
    }
    if (as_json) {
        json_t *o = json_pack("{s:s,s:o,s:I,s:I,s:I,s:i}", "cache", cache, "models", arr,
                              "bytes", (json_int_t)total, "collectable_bytes", (json_int_t)unref,
                              "partial_bytes", (json_int_t)partial, "dangling_refs",
                              n_dangling);
        char *txt = json_dumps(o, JSON_INDENT(2));
        printf("%s\n", txt ? txt : "{}");
        free(txt);
        json_decref(o);
    } else {
        printf("cache %s: %d models, %s\n", cache, s->n_repos, human(total, sz, sizeof sz));
        if (n_unref || n_partial || n_dangling)
            printf("hearth gc would free %s: %d blobs of old revisions or none, %d partial "
                   "downloads, %d refs to missing snapshots\n",
                   human(unref + partial, sz, sizeof sz), n_unref, n_partial, n_dangling);
    }
    hr_hf_scan_free(s);
    return 0;
}
