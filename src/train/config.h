/* `hearth train`'s options (docs/training.md): mlx_lm.lora's names and
 * defaults, from a config file (-c: mlx-lm's YAML, the subset its configs
 * use, or JSON) overridden by the command line. */
#ifndef HR_TRAIN_CONFIG_H
#define HR_TRAIN_CONFIG_H

#include "hearth.h"
#include "model/adapter.h"
#include "train/schedule.h"

#include <jansson.h>
#include <stdbool.h>

typedef struct hr_train_cfg {
    const char *model, *data, *out, *resume; /* --model, --data, --out, --resume-adapter-file */
    long iters, batch_size, num_layers, rank, max_seq_length, val_batches;
    long steps_per_report, steps_per_eval, save_every, seed, threads;
    double learning_rate, scale, weight_decay;
    int loss;         /* hr_loss_kind: --loss / loss / train_mode (sft) */
    double beta;      /* DPO's beta, ORPO's lambda: --beta / beta (0.1) */
    long grad_accum;  /* --grad-accumulation-steps / grad_accumulation_steps (1) */
    bool has_sched;   /* lr_schedule given: sched replaces learning_rate */
    hr_sched sched;
    bool mask_prompt, grad_checkpoint, adamw;
    bool keys[HR_LORA_SLOTS]; /* lora_parameters.keys (all when not given) */
    json_t *file;             /* the config file's fields (owned; strings above may
                               * point into it) */
} hr_train_cfg;

/* mlx_lm.lora's defaults (iters 1000, batch 4, lr 1e-5, num_layers 16,
 * rank 8, scale 20, max_seq_length 2048, val_batches 25, steps_per_report
 * 10, steps_per_eval 200, save_every 100, seed 0, optimizer adam). */
void hr_train_cfg_default(hr_train_cfg *c);
void hr_train_cfg_deinit(hr_train_cfg *c);

/* A config file's text over c: JSON when it starts with '{', else YAML
 * key: value lines with one nested block (lora_parameters: rank, scale,
 * dropout, keys as [a, b] or "- a" lines) and # comments. Unknown keys
 * of mlx-lm's that change nothing here (wandb, test, ...) are ignored;
 * ones that would change the result and are not supported (an
 * lr_schedule other than train/schedule.h's, fine_tune_type other than
 * lora, an optimizer other than adam / adamw) are errors "NAME: ...". */
int hr_train_cfg_parse(hr_train_cfg *c, const char *name, const char *text, size_t len,
                       hr_error *err);

/* The run's options as adapter_config.json's fields (mlx-lm writes its
 * arguments there). NULL when out of memory. */
json_t *hr_train_cfg_json(const hr_train_cfg *c);

#endif
