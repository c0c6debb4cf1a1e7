/* The CPU's LoRA deltas (kernels/backend.h hr_lora_args): after a base
 * product, each adapter's rows get their low-rank delta, in two passes:
 * down, z = scale * x . a^T for every (output, grouped row) item; then up,
 * y += z . bt over any range of an output's columns (each adapter's bt is
 * read once for all its rows). ops.c's hr_matmul_lora runs them inside the
 * base product's job (the down items first, then each claimed column
 * range's up right after its base product, while the tile is hot). A row's
 * result does not depend on which other rows, adapters or threads share
 * the step, nor on how the columns are split: every element is the same
 * sequence of float operations (batch-invariant). */
#ifndef HR_KERNELS_CPU_LORA_H
#define HR_KERNELS_CPU_LORA_H

#include "kernels/backend.h"

/* z: scratch of HR_LORA_MAX_OUT * T * HR_LORA_MAX_RANK floats for the
 * step's T rows. */

/* The down pass's items: (output o, grouped row i) is item o * rows + i. */
long hr_lora_items(const hr_lora_args *a);
/* z for one item: z[o][i][k] = scale * x[rows[i]] . a[k], k < r */
void hr_lora_down(const hr_lora_args *a, float *z, int T, long item);
/* Columns [j0, j1) of output o for every grouped row: y += z . bt (DoRA:
 * y = dora * (y - bias + z . bt) + bias), once the down pass is done. */
void hr_lora_up(const hr_lora_args *a, const float *z, int T, int o, int j0, int j1);

/* Both passes on the calling thread over outputs whose base product is
 * already in y (the reference the fused job is held to). */
void hr_lora_ref(float *z, int T, const hr_lora_args *a);

#endif
