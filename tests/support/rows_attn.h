/* The check the records-read-in-place attention kernels share (q8_0/q4_0:
 * test_kvggml, TurboQuant: test_turbo_kv): the scalar scores and outputs
 * within 1e-6 of a double-precision reference over the dequantized rows,
 * and every SIMD body's bits equal to the scalar's, each input and output
 * handed through a fenced buffer (fence.h). A format is its pair of
 * kernels behind these adapters. */
#ifndef HR_TESTS_ROWS_ATTN_H
#define HR_TESTS_ROWS_ATTN_H

#include "kernels/cpu/cpu.h"

#include <stddef.h>
#include <stdint.h>

/* The stride of the scores and weights' rows. */
#define HR_ROWS_LD 40

typedef struct hr_rows_attn {
    const void *fmt; /* the format, for the adapters */
    /* K NULL: the scalar reference */
    void (*dots)(const hr_cpu_kernels *K, const void *fmt, float *sc, const float *q, int nr,
                 const uint8_t *rec, size_t rb, int nk, float scale);
    void (*axpys)(const hr_cpu_kernels *K, const void *fmt, float *o, const float *p, int nr,
                  const uint8_t *rec, size_t rb, int nk);
} hr_rows_attn;

/* nr rows of q (hd floats each) over nk records of rb bytes (deq: them
 * dequantized, hd floats each), weights p (rows of HR_ROWS_LD): checked
 * as above (cmocka's assertions). The number of SIMD bodies checked. */
int hr_rows_attn_check(const hr_rows_attn *A, const float *q, const float *p,
                       const uint8_t *rec, size_t rb, const float *deq, int nr, int nk, int hd);

#endif
