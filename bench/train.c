/* bench_train: one training step (train/backprop.h: forward, chunked
 * cross-entropy, backward into every LoRA factor) on a model, timed.
 *   bench_train MODEL [threads] [seqs] [len] [num_layers] [rank] [reps]
 * Random tokens; every token after the first is a target. Prints the
 * median of reps steps as target tokens/s, the forward alone, and the
 * activation memory and peak RSS (docs/training.md, "Speed"). */
#include "core/timer.h"
#include "model/model.h"
#include "sample/rng.h"
#include "train/backprop.h"
#include "train/lora_params.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_train MODEL [threads 2] [seqs 4] [len 128] "
                        "[num_layers -1] [rank 8] [reps 3]\n");
        return 2;
    }
    int th = argc > 2 ? atoi(argv[2]) : 2, ns = argc > 3 ? atoi(argv[3]) : 4;
    int len = argc > 4 ? atoi(argv[4]) : 128, nl = argc > 5 ? atoi(argv[5]) : -1;
    int rank = argc > 6 ? atoi(argv[6]) : 8, reps = argc > 7 ? atoi(argv[7]) : 3;
    hr_error err = {0};
    hr_model *m;
    hr_model_opts o = {.quant_act = "f32"};
    if (hr_model_open_with(&m, argv[1], &o, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    hr_lora_cfg cfg = {.rank = rank, .scale = 20, .num_layers = nl};
    for (int s = 0; s < HR_LORA_SLOTS; s++)
        cfg.keys[s] = 1;
    hr_lora_set *ls;
    hr_bp *b;
    if (hr_lora_set_new(&ls, m, &cfg, 1, &err) ||
        hr_bp_new(&b, ls, ns * len, len, th, false, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int32_t *tok = malloc((size_t)ns * len * sizeof *tok);
    int *start = malloc(((size_t)ns + 1) * sizeof *start);
    hr_rng rng;
    hr_rng_seed(&rng, 9);
    for (int i = 0; i < ns * len; i++)
        tok[i] = (int32_t)(hr_rng_next(&rng) % (uint64_t)m->hp.n_vocab);
    for (int s = 0; s <= ns; s++)
        start[s] = s * len;
    hr_bp_batch bt = {.n_seqs = ns, .tok = tok, .start = start};
    double tf[16], tb[16], loss;
    int n = 0;
    reps = reps < 1 ? 1 : reps > 16 ? 16 : reps;
    for (int r = 0; r < reps; r++) {
        double t0 = hr_now();
        hr_bp_step(b, &bt, false, &loss, &n, &err);
        double t1 = hr_now();
        hr_bp_step(b, &bt, true, &loss, &n, &err);
        tf[r] = t1 - t0;
        tb[r] = hr_now() - t1;
    }
    qsort(tf, (size_t)reps, sizeof *tf, cmpd);
    qsort(tb, (size_t)reps, sizeof *tb, cmpd);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%s: %d threads, %d x %d tokens, num_layers %d, rank %d: step %.3f s (%.1f target "
           "tokens/s), forward alone %.3f s; activations %.1f MiB, peak RSS %.1f MiB\n",
           argv[1], th, ns, len, nl, rank, tb[reps / 2], n / tb[reps / 2], tf[reps / 2],
           hr_bp_bytes(b) / 1048576.0, ru.ru_maxrss / 1024.0);
    hr_bp_free(b);
    hr_lora_set_free(ls);
    hr_model_free(m);
    free(tok);
    free(start);
    return 0;
}
