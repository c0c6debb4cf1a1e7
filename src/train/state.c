#include "train/state.h"
#include "core/error.h"
#include "io/safetensors.h"

#include <stdio.h>
#include <string.h>

static const char SUFFIX[] = "adapters.safetensors";

int hr_train_state_path(char *out, size_t n, const char *adapter) {
    size_t l = strlen(adapter), ls = sizeof SUFFIX - 1;
    if (l < ls || strcmp(adapter + l - ls, SUFFIX))
        return 1;
    int w = snprintf(out, n, "%.*soptimizer_state.safetensors", (int)(l - ls), adapter);
    return w < 0 || (size_t)w >= n ? 1 : 0;
}

int hr_train_state_save(const char *path, const hr_lora_set *s, const hr_train_state *st,
                        hr_error *err) {
    int64_t sc[3] = {st->iter, st->updates, st->pos}, rng[4];
    for (int i = 0; i < 4; i++)
        memcpy(&rng[i], &st->rng.s[i], sizeof rng[i]);
    size_t fb = s->n * sizeof(float);
    hr_tensor t[] = {
        {.name = "m1", .dtype = HR_DTYPE_F32, .ndim = 1, .shape = {(int64_t)s->n},
         .data = s->m1, .nbytes = fb},
        {.name = "m2", .dtype = HR_DTYPE_F32, .ndim = 1, .shape = {(int64_t)s->n},
         .data = s->m2, .nbytes = fb},
        {.name = "g", .dtype = HR_DTYPE_F32, .ndim = 1, .shape = {(int64_t)s->n},
         .data = s->g, .nbytes = fb},
        {.name = "iter", .dtype = HR_DTYPE_I64, .ndim = 1, .shape = {1}, .data = &sc[0],
         .nbytes = 8},
        {.name = "updates", .dtype = HR_DTYPE_I64, .ndim = 1, .shape = {1}, .data = &sc[1],
         .nbytes = 8},
        {.name = "pos", .dtype = HR_DTYPE_I64, .ndim = 1, .shape = {1}, .data = &sc[2],
         .nbytes = 8},
        {.name = "rng", .dtype = HR_DTYPE_I64, .ndim = 1, .shape = {4}, .data = rng,
         .nbytes = 32},
        {.name = "perm", .dtype = HR_DTYPE_I32, .ndim = 1, .shape = {st->n_batches},
         .data = st->perm, .nbytes = (size_t)st->n_batches * sizeof(int32_t)},
    };
    return hr_st_write(path, t, sizeof t / sizeof *t, NULL, 0, err);
}

/* tensor `name` of dtype dt and `count` elements, or an error */
static int get(hr_st_file *f, const char *name, hr_dtype dt, size_t count, size_t esz,
               void *out, hr_error *err) {
    const hr_tensor *t = hr_st_find(f, name);
    if (!t || t->dtype != dt || t->ndim != 1 || t->nbytes != count * esz)
        return hr_err(err, HR_EINVAL, "%s: '%s' is missing or not this run's (a training "
                      "state of another adapter, data or batch size)", hr_st_path(f), name);
    memcpy(out, t->data, t->nbytes);
    return 0;
}

/* the state in f into m[3] (m1, m2, g: n floats each) and st */
static int read_state(hr_st_file *f, float *const m[3], size_t n, hr_train_state *st,
                      hr_error *err) {
    int64_t iter, updates, pos, rng[4];
    const char *path = hr_st_path(f);
    int rc;
    if ((rc = get(f, "m1", HR_DTYPE_F32, n, 4, m[0], err)) ||
        (rc = get(f, "m2", HR_DTYPE_F32, n, 4, m[1], err)) ||
        (rc = get(f, "g", HR_DTYPE_F32, n, 4, m[2], err)) ||
        (rc = get(f, "iter", HR_DTYPE_I64, 1, 8, &iter, err)) ||
        (rc = get(f, "updates", HR_DTYPE_I64, 1, 8, &updates, err)) ||
        (rc = get(f, "pos", HR_DTYPE_I64, 1, 8, &pos, err)) ||
        (rc = get(f, "rng", HR_DTYPE_I64, 4, 8, rng, err)) ||
        (rc = get(f, "perm", HR_DTYPE_I32, (size_t)st->n_batches, 4, st->perm, err)))
        return rc;
    if (iter < 0 || updates < 0 || updates > iter || pos < 0 || pos > st->n_batches)
        return hr_err(err, HR_EFORMAT, "%s: a malformed training state", path);
    for (int i = 0; i < st->n_batches; i++)
        if (st->perm[i] < 0 || st->perm[i] >= st->n_batches)
            return hr_err(err, HR_EFORMAT, "%s: a malformed training state", path);
    st->iter = (long)iter;
    st->updates = (long)updates;
    st->pos = (int)pos;
    for (int i = 0; i < 4; i++)
        memcpy(&st->rng.s[i], &rng[i], sizeof rng[i]);
    return 0;
}

int hr_train_state_load(const char *path, hr_lora_set *s, hr_train_state *st, hr_error *err) {
    hr_st_file *f;
    int rc = hr_st_open(&f, path, err);
    if (rc)
        return rc;
    float *const m[3] = {s->m1, s->m2, s->g};
    rc = read_state(f, m, s->n, st, err);
    hr_st_close(f);
    return rc;
}

int hr_train_state_parse(const void *data, size_t size, const char *name, float *const m[3],
                         size_t n, hr_train_state *st, hr_error *err) {
    hr_st_file *f;
    int rc = hr_st_parse(&f, data, size, name, err);
    if (rc)
        return rc;
    rc = read_state(f, m, n, st, err);
    hr_st_close(f);
    return rc;
}
