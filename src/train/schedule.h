/* Learning-rate schedules of `hearth train` (docs/training.md): mlx-lm's
 * lr_schedule config (mlx_lm/tuner/utils.py build_schedule) over
 * mlx.optimizers' schedulers:
 *   {name: cosine_decay | linear_schedule | exponential_decay | step_decay,
 *    arguments: [...] (the scheduler's, the first the initial rate),
 *    warmup: W (0), warmup_init: w0 (0)}
 * With warmup, join_schedules([linear_schedule(w0, init, W), the
 * schedule], [W + 1]): steps 0..W warm up, step s > W is the schedule's
 * step s - W - 1. The step is the optimizer's count of updates before this
 * one (mlx's Optimizer.step: the first update reads step 0). */
#ifndef HR_TRAIN_SCHEDULE_H
#define HR_TRAIN_SCHEDULE_H

#include "hearth.h"

#include <jansson.h>

typedef enum hr_sched_kind {
    HR_SCHED_CONSTANT,
    HR_SCHED_COSINE,      /* (init, decay_steps, end = 0) */
    HR_SCHED_LINEAR,      /* (init, end, steps) */
    HR_SCHED_EXPONENTIAL, /* (init, decay_rate) */
    HR_SCHED_STEP,        /* (init, decay_rate, step_size) */
} hr_sched_kind;

typedef struct hr_sched {
    hr_sched_kind kind;
    double a[3];       /* the arguments */
    long warmup;       /* 0: none */
    double warmup_init;
} hr_sched;

/* A constant rate lr. */
void hr_sched_constant(hr_sched *s, double lr);

/* From the lr_schedule object o; name: the config file, for messages.
 * Errors: an unknown name ("not supported yet"), arguments of the wrong
 * count or type, steps < 1, warmup < 0. */
int hr_sched_parse(hr_sched *s, const json_t *o, const char *name, hr_error *err);

/* The rate of the update after `step` earlier ones, in float32 as mlx
 * computes it. */
float hr_sched_lr(const hr_sched *s, long step);

/* The schedule as lr_schedule's JSON (adapter_config.json); NULL for a
 * constant rate or out of memory. */
json_t *hr_sched_json(const hr_sched *s);

#endif
