/* Attention read from TurboQuant KV records in place, in the rotated basis:
 * the scalar reference (turbo.h states the order of every operation; cpu.h's
 * turbo_dots and turbo_axpys give its bits on every ISA). */
#include "core/tensor.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"

#include <math.h>
#include <string.h>

static inline float norm_of(const uint8_t *row, int s) { /* the f16 scale */
    uint16_t h;
    memcpy(&h, row + 2 * s, 2);
    return hr_f16_to_f32(h);
}

void hr__turbo_dots_scalar(float *sc, size_t ldsc, const float *q, int nr, const void *rec,
                           size_t rb, int nk, const hr_turbo_kv *L, float scale) {
    for (int r = 0; r < nr; r++) {
        const float *qr = q + (size_t)r * L->hd;
        for (int j = 0; j < nk; j++) {
            const uint8_t *row = (const uint8_t *)rec + (size_t)j * rb;
            float T[8] = {0};
            for (int s = 0; s < L->nseg; s++) {
                const uint8_t *c = row + L->code_off[s];
                const float *qs = qr + (size_t)s * L->dim;
                float A[8] = {0};
                for (int e = 0; e < L->dim; e++)
                    A[e % 8] = fmaf(qs[e], L->cb[s][hr_turbo_code(c, e, L->bits[s])], A[e % 8]);
                float w = norm_of(row, s) * L->rinv;
                for (int l = 0; l < 8; l++)
                    T[l] = fmaf(w, A[l], T[l]);
            }
            sc[(size_t)r * ldsc + j] = hr__kvq_hsum8(T) * scale;
        }
    }
}

void hr__turbo_axpys_scalar(float *o, const float *p, size_t ldp, int nr, const void *rec,
                            size_t rb, int nv, const hr_turbo_kv *L) {
    for (int r = 0; r < nr; r++) {
        float *orow = o + (size_t)r * L->hd;
        for (int j = 0; j < nv; j++) {
            const uint8_t *row = (const uint8_t *)rec + (size_t)j * rb;
            float pj = p[(size_t)r * ldp + j];
            for (int s = 0; s < L->nseg; s++) {
                const uint8_t *c = row + L->code_off[s];
                float w = pj * (norm_of(row, s) * L->rinv);
                float *os = orow + (size_t)s * L->dim;
                for (int e = 0; e < L->dim; e++)
                    os[e] = fmaf(w, L->cb[s][hr_turbo_code(c, e, L->bits[s])], os[e]);
            }
        }
    }
}
