#include "train/schedule.h"
#include "core/error.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    hr_sched_kind kind;
    int min_args, max_args;
} KINDS[] = {
    {"cosine_decay", HR_SCHED_COSINE, 2, 3},
    {"linear_schedule", HR_SCHED_LINEAR, 3, 3},
    {"exponential_decay", HR_SCHED_EXPONENTIAL, 2, 2},
    {"step_decay", HR_SCHED_STEP, 3, 3},
};

void hr_sched_constant(hr_sched *s, double lr) {
    *s = (hr_sched){.kind = HR_SCHED_CONSTANT, .a = {lr}};
}

int hr_sched_parse(hr_sched *s, const json_t *o, const char *name, hr_error *err) {
    if (!json_is_object(o))
        return hr_err(err, HR_EINVAL, "%s: lr_schedule must be a mapping (name, arguments, "
                      "warmup)", name);
    const char *nm = json_string_value(json_object_get(o, "name"));
    const json_t *args = json_object_get(o, "arguments");
    const json_t *w = json_object_get(o, "warmup"), *wi = json_object_get(o, "warmup_init");
    if (!nm)
        return hr_err(err, HR_EINVAL, "%s: lr_schedule.name must be a string", name);
    int k = -1;
    for (int i = 0; i < (int)(sizeof KINDS / sizeof *KINDS); i++)
        if (!strcmp(nm, KINDS[i].name))
            k = i;
    if (k < 0)
        return hr_err(err, HR_EUNSUPPORTED, "%s: not supported yet: lr_schedule '%s' "
                      "(cosine_decay, linear_schedule, exponential_decay, step_decay)", name, nm);
    size_t na = json_array_size(args);
    if (!json_is_array(args) || na < (size_t)KINDS[k].min_args ||
        na > (size_t)KINDS[k].max_args)
        return hr_err(err, HR_EINVAL, "%s: lr_schedule.arguments: %s takes %d to %d numbers",
                      name, nm, KINDS[k].min_args, KINDS[k].max_args);
    *s = (hr_sched){.kind = KINDS[k].kind};
    for (size_t i = 0; i < na; i++) {
        const json_t *v = json_array_get(args, i);
        if (!json_is_number(v) || !isfinite(json_number_value(v)))
            return hr_err(err, HR_EINVAL, "%s: lr_schedule.arguments[%zu] must be a number",
                          name, i);
        s->a[i] = json_number_value(v);
    }
    /* the step counts: cosine's decay_steps, linear's steps, step's size */
    double steps = s->kind == HR_SCHED_COSINE ? s->a[1]
                   : s->kind == HR_SCHED_LINEAR ? s->a[2]
                   : s->kind == HR_SCHED_STEP   ? s->a[2]
                                                : 1;
    if (!(steps >= 1) || steps > 1e15)
        return hr_err(err, HR_EINVAL, "%s: lr_schedule %s: its step count must be >= 1", name,
                      nm);
    if (w && !json_is_null(w)) {
        if (!json_is_number(w) || json_number_value(w) < 0 || json_number_value(w) > 1e15)
            return hr_err(err, HR_EINVAL, "%s: lr_schedule.warmup must be a number >= 0", name);
        s->warmup = (long)json_number_value(w);
    }
    if (wi && !json_is_null(wi)) {
        if (!json_is_number(wi))
            return hr_err(err, HR_EINVAL, "%s: lr_schedule.warmup_init must be a number", name);
        s->warmup_init = json_number_value(wi);
    }
    return 0;
}

static const double PI = 3.14159265358979323846;

/* mlx computes in float32: the step, the arguments and the result */
static float base(const hr_sched *s, long step) {
    float t = (float)step, init = (float)s->a[0];
    switch (s->kind) {
    case HR_SCHED_CONSTANT:
        return init;
    case HR_SCHED_COSINE: {
        float n = (float)s->a[1], end = (float)s->a[2];
        float m = t < n ? t : n;
        float decay = 0.5f * (1.0f + cosf(((float)PI / n) * m));
        return end + decay * (init - end);
    }
    case HR_SCHED_LINEAR: {
        float end = (float)s->a[1], n = (float)s->a[2];
        float m = t < n ? t : n;
        return m * ((end - init) / n) + init;
    }
    case HR_SCHED_EXPONENTIAL:
        return init * powf((float)s->a[1], t);
    case HR_SCHED_STEP:
        return init * powf((float)s->a[1], (float)(step / (long)s->a[2]));
    }
    return init;
}

float hr_sched_lr(const hr_sched *s, long step) {
    if (s->warmup <= 0)
        return base(s, step);
    if (step < s->warmup + 1) { /* linear_schedule(warmup_init, init, warmup) */
        float w0 = (float)s->warmup_init, n = (float)s->warmup, init = (float)s->a[0];
        float m = (float)step < n ? (float)step : n;
        return m * ((init - w0) / n) + w0;
    }
    return base(s, step - (s->warmup + 1));
}

json_t *hr_sched_json(const hr_sched *s) {
    for (size_t i = 0; i < sizeof KINDS / sizeof *KINDS; i++)
        if (KINDS[i].kind == s->kind) {
            json_t *a = json_array();
            for (int j = 0; a && j < KINDS[i].max_args; j++)
                json_array_append_new(a, json_real(s->a[j]));
            return json_pack("{s:s, s:o*, s:I, s:f}", "name", KINDS[i].name, "arguments", a,
                             "warmup", (json_int_t)s->warmup, "warmup_init", s->warmup_init);
        }
    return NULL;
}
