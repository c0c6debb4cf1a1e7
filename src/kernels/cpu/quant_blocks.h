/* ggml block layouts (llama.cpp ggml/src/ggml-common.h), shared by the
 * scalar definitions and the SIMD kernels of this layer. f16 fields are raw
 * bits. */
#ifndef HR_KERNELS_QUANT_BLOCKS_H
#define HR_KERNELS_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>

typedef struct { uint16_t d; int8_t qs[32]; } hr_block_q8_0;                 /* 34 */
typedef struct { uint16_t d; uint8_t qs[16]; } hr_block_q4_0;                /* 18 */
typedef struct { uint16_t d, m; uint8_t qs[16]; } hr_block_q4_1;             /* 20 */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } hr_block_q4_k;  /* 144 */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} hr_block_q5_k; /* 176 */
typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} hr_block_q6_k; /* 210 */

/* MXFP4: the E2M1 codes' values doubled (ggml's kvalues_mxfp4), so that a
 * block's value is kvalue * 2^(e - 128) */
static const int8_t hr_mxfp4_kvalues[16] = {0, 1, 2, 3, 4, 6, 8, 12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

_Static_assert(sizeof(hr_block_q8_0) == 34, "q8_0");
_Static_assert(sizeof(hr_block_q4_0) == 18, "q4_0");
_Static_assert(sizeof(hr_block_q4_1) == 20, "q4_1");
_Static_assert(sizeof(hr_block_q4_k) == 144, "q4_k");
_Static_assert(sizeof(hr_block_q5_k) == 176, "q5_k");
_Static_assert(sizeof(hr_block_q6_k) == 210, "q6_k");

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. */
static inline void hr_scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* hr_scale_min_k4 for all sub-blocks at once, 4 fields per 32-bit word:
 * out[0..8) the scales, out[8..16) the mins. */
static inline void hr_scales_mins_k4(const uint8_t *q, uint8_t out[16]) {
    uint32_t w[3];
    memcpy(w, q, 12);
    uint32_t f[4] = {w[0] & 0x3f3f3f3fu, (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u),
                     w[1] & 0x3f3f3f3fu,
                     ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u)};
    memcpy(out, f, 16);
}

#endif
