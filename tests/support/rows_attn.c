#include "support/rows_attn.h"
#include "support/fence.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LD HR_ROWS_LD

int hr_rows_attn_check(const hr_rows_attn *A, const float *q, const float *p,
                       const uint8_t *rec, size_t rb, const float *deq, int nr, int nk, int hd) {
    size_t nsc = (size_t)(nr - 1) * LD + nk, no = (size_t)nr * hd;
    float *ref = calloc(nsc, 4), *oref = calloc(no, 4), *sc = calloc(nsc, 4),
          *o = calloc(no, 4);
    assert_true(ref && oref && sc && o);
    A->dots(NULL, A->fmt, ref, q, nr, rec, rb, nk, 0.125f);
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nk; j++) {
            double d = 0, mag = 0;
            for (int i = 0; i < hd; i++) {
                d += (double)q[r * hd + i] * deq[j * hd + i];
                mag += fabs((double)q[r * hd + i] * deq[j * hd + i]);
            }
            assert_true(fabs(d * 0.125 - ref[r * LD + j]) <= 1e-6 * mag);
        }
    A->axpys(NULL, A->fmt, oref, p, nr, rec, rb, nk);
    for (int r = 0; r < nr; r++)
        for (int i = 0; i < hd; i++) {
            double d = 0, mag = 0;
            for (int j = 0; j < nk; j++) {
                d += (double)p[r * LD + j] * deq[j * hd + i];
                mag += fabs(p[r * LD + j] * deq[j * hd + i]);
            }
            assert_true(fabs(d - oref[r * hd + i]) <= 1e-6 * mag + 1e-30);
        }
    /* each input and output ends at an unmapped page */
    hr_fence fe = {0};
    const uint8_t *rec_f = hr_fence_copy(&fe, rec, (size_t)nk * rb);
    const float *q_f = hr_fence_copy(&fe, q, no * 4);
    const float *p_f = hr_fence_copy(&fe, p, nsc * 4);
    float *sc_f = hr_fence_copy(&fe, sc, nsc * 4);
    float *o_f = hr_fence_copy(&fe, o, no * 4);
    assert_true(rec_f && q_f && p_f && sc_f && o_f);
    int cases = 0;
    for (int isa = 1; isa < HR_ISA_COUNT; isa++) {
        const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
        if (!K)
            continue;
        memset(sc_f, 0, nsc * 4);
        A->dots(K, A->fmt, sc_f, q_f, nr, rec_f, rb, nk, 0.125f);
        for (int r = 0; r < nr; r++)
            assert_memory_equal(sc_f + r * LD, ref + r * LD, (size_t)nk * 4);
        memset(o_f, 0, no * 4);
        A->axpys(K, A->fmt, o_f, p_f, nr, rec_f, rb, nk);
        assert_memory_equal(o_f, oref, no * 4);
        cases++;
    }
    hr_fence_free(&fe);
    free(ref);
    free(oref);
    free(sc);
    free(o);
    return cases;
}
