#include "kernels/cpu/membw.h"
#include "core/timer.h"
#include "kernels/cpu/ops.h"

#include <stdlib.h>
#include <string.h>

/* The buffer is read as a bf16 weight matrix by the decode matvec itself,
 * so the ceiling is measured with the access pattern decode uses. */
#define COLS 4096

double hr_membw(hr_pool *pool, size_t bytes, int reps) {
    size_t row = COLS * sizeof(uint16_t), rows = bytes / row;
    if (rows == 0)
        return 0;
    uint16_t *buf = aligned_alloc(64, rows * row);
    float *x = calloc(COLS, sizeof *x), *y = malloc(rows * sizeof *y);
    double best = 1e30;
    if (buf && x && y) {
        memset(buf, 0, rows * row);
        hr_tensor w = {.name = "membw", .dtype = HR_DTYPE_BF16, .ndim = 2,
                       .shape = {(int64_t)rows, COLS}, .data = buf, .nbytes = rows * row};
        for (int r = 0; r < reps; r++) {
            double t0 = hr_now();
            hr_matmul(pool, y, (int)rows, x, COLS, 1, &w, NULL);
            double dt = hr_now() - t0;
            best = dt < best ? dt : best;
        }
    }
    free(buf);
    free(x);
    free(y);
    return best < 1e30 ? (double)(rows * row) / best : 0;
}
