/* TurboQuant's MSE quantizer of one row (Zandieh et al. 2025, "TurboQuant:
 * Online Vector Quantization with Near-optimal Distortion Rate", arXiv
 * 2504.19874, Algorithm 1), the building block of a TurboQuant KV cache:
 *
 *   rotate:   y = H D x / sqrt(hd): D a random diagonal of signs (one per
 *             KV head and layer: hr_turbo_signs), H the Walsh-Hadamard
 *             matrix (hd a power of two, 64 .. 256), so y is x in a random
 *             orthonormal basis (the paper's random rotation Pi, as a
 *             randomized fast Walsh-Hadamard transform);
 *   quantize: n = |x|, z_i = sqrt(hd) y_i / n, each z_i to the nearest of
 *             the 2^bits Lloyd-Max centroids of z's density
 *             (turbo_codebooks.h, made by tools/turboquant/codebooks.py);
 *   record:   [f32 n][codes: hd * bits / 8 bytes, an LSB-first bit stream].
 *
 * Read back in the rotated basis (attention's: the query is rotated once,
 * <q, x> = <H D q / sqrt(hd), y>) or rotated back. The expected squared
 * error of z is hr_turbo_mse[dim][bits - 1] per coordinate (the paper's
 * D_mse of a unit vector, within its bound sqrt(3) pi / 2 * 4^-bits).
 *
 * Not yet: the QJL residual bit for keys (TurboQuant_prod), the fractional
 * rates by outlier channels, attention over these records and the pool
 * format (`--kv-quant turbo`): docs/kv-quant.md. */
#ifndef HR_KERNELS_TURBO_H
#define HR_KERNELS_TURBO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether hd (64, 128, 256) and bits (1-4) have a codebook */
bool hr_turbo_ok(int hd, int bits);
static inline size_t hr_turbo_row_bytes(int hd, int bits) {
    return 4 + (size_t)hd * (size_t)bits / 8;
}
/* hd signs (+1.0f / -1.0f) of the rotation `seed` names (splitmix64 bits) */
void hr_turbo_signs(float *signs, int hd, uint64_t seed);
/* y = H D x / sqrt(hd) (y may be x) */
void hr_turbo_rotate(float *y, const float *x, const float *signs, int hd);
/* x = D H y / sqrt(hd), the inverse (x may be y) */
void hr_turbo_unrotate(float *x, const float *y, const float *signs, int hd);
/* The record of x at dst (hr_turbo_row_bytes) */
void hr_turbo_store(void *dst, const float *x, int hd, int bits, const float *signs);
/* The record's row in the rotated basis: y_i = n c(code_i) / sqrt(hd) */
void hr_turbo_load_rotated(float *y, const void *src, int hd, int bits);
/* The record's row: the rotated row rotated back */
void hr_turbo_load(float *x, const void *src, int hd, int bits, const float *signs);
/* The codebook's MSE per coordinate of z (hr_turbo_ok's shapes) */
double hr_turbo_codebook_mse(int hd, int bits);

#endif
