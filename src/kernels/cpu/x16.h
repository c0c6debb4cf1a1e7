/* GGUF weights repacked for the VNNI kernels ("x16" layout): rows in panels
 * of 16, and within a panel, for each unit of columns (one block: 32
 * columns; one super-block for the K-quants: 256), the 16 rows' scales side
 * by side, then the quants in 64-byte chunks whose 4-byte lane r holds 4
 * consecutive elements of row r. One vpdpbusd of a chunk with 4 activation
 * bytes broadcast advances all 16 outputs of the panel, and every scale
 * multiply is a 16-lane vector op, where the row-major GGUF layout needs a
 * horizontal sum per output. The packing is exact (every weight, scale and
 * min keeps its stored bits), so the values are the file's; llama.cpp
 * repacks Q4_0/Q4_K the same way at load ("8x8" layouts).
 *
 * Unit layouts per 16-row panel (r: row in the panel; c: chunk; t: byte in
 * the lane; "pair s" are the 32-column blocks 2s and 2s+1 of a super-block):
 *   Q8_0  u16 d[16];  u8 u[8][16][4]          u[c][r][t] = q[4c+t] ^ 0x80
 *   Q4_0  u16 d[16];  u8 nib[4][16][4]        nib[c][r][t] = qs[4c+t]
 *                     (low nibble: column 4c+t, high: column 16+4c+t)
 *         Q8_0 and Q4_0 units (8.5 and 4.5 cache lines) go in pairs: an
 *         even unit (its index in the row) stores d after its quants, an
 *         odd one before, so that every 64-byte chunk starts a line
 *         (hr_x16_q_at, hr_x16_d_at; a packed matrix's k is a multiple of
 *         64, so each of its panels holds whole pairs)
 *   Q4_1  u16 d[16], m[16];  u8 nib[4][16][4]  as Q4_0
 *   Q4_K  u16 d[16], dmin[16];  u8 sc[8][16], mn[2][16][4] (mn[h][r][t]:
 *         block 4h+t's min, so that one vpdpbusd dots 4 mins with 4 block
 *         sums, qdot.h);  u8 nib[4][8][16][4]  nib[s][c][r][t]: low nibble
 *         block 2s column 4c+t, high nibble block 2s+1 column 4c+t
 *   Q5_K  Q4_K, then u8 hb[4][8][16]: bit t the fifth bit of block 2s column
 *         4c+t, bit 4+t that of block 2s+1
 *   Q6_K  u16 d[16];  i8 sc[16][16];  u8 nib[4][8][16][4] as Q4_K (low 4 bits);
 *         u8 hb[4][4][16][4]: hb[s][h][r][t] the top 2 bits of the byte
 *         nib[s][c][r][t] for the chunks c = 2h, 2h+1: bits 0-1 (block 2s)
 *         and 2-3 (block 2s+1) for chunk 2h, bits 4-7 likewise for 2h+1, so
 *         that a shift and a mask put them beside either nibble
 *   MLX affine, 4 or 8 bits, a unit per group (32, 64 or 128 columns):
 *         u16 s[16], b[16] (f16, exact copies of the scale and bias), then
 *         per 32-column block of the group: 4-bit as Q4_1's nib[4][16][4];
 *         8-bit u8 q[8][16][4], q[c][r][t] = q of column 4c+t
 * Panels follow each other; a unit takes as many bytes as 16 of the
 * format's blocks, except Q4_K/Q5_K (+64 bytes: the 6-bit scales and mins
 * as bytes) -- 2.8% / 2.3% more than the file; an affine unit as many as
 * the file's 16 rows of the group with 16-bit scales. */
#ifndef HR_KERNELS_X16_H
#define HR_KERNELS_X16_H

#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether w's format (dtype; bits and group for affine) has an x16 layout. */
bool hr_x16_supports(const hr_tensor *w);

/* Columns per unit (32, 64, 128 or 256) and bytes per 16-row unit of w's
 * format. */
int hr_x16_unit_cols(const hr_tensor *w);
size_t hr_x16_unit_bytes(const hr_tensor *w);

/* Offsets in unit `unit` (its index in the row) of a Q8_0 or Q4_0 panel,
 * whose quants take qbytes (512 or 256): of the quants and of d[16]. */
static inline size_t hr_x16_q_at(int64_t unit) { return unit & 1 ? 32 : 0; }
static inline size_t hr_x16_d_at(int64_t unit, size_t qbytes) { return unit & 1 ? 0 : qbytes; }

/* Bytes of w (rows a multiple of 16, the file's layout) repacked. */
size_t hr_x16_bytes(const hr_tensor *w);

/* Repack panels [p0, p1) of w into dst (hr_x16_bytes(w) bytes in all;
 * panel p at dst + p * (bytes per panel)). False (dst partly written) when
 * an affine scale or bias has no exact f16. */
bool hr_x16_pack(const hr_tensor *w, int64_t p0, int64_t p1, uint8_t *dst);

/* hr_qdot_block (qdot.h) for a tensor in the x16 layout. */
void hr_x16_block(const hr_tensor *w, int64_t row, int64_t blk, uint8_t u[32], float sw[2],
                  float mn[2]);

/* hr_qdot_kscales (qdot.h) for a K-quant tensor in the x16 layout. */
void hr_x16_kscales(const hr_tensor *w, int64_t row, int64_t sb, int sc[16], int mn[8],
                    float dd[2]);

#endif
