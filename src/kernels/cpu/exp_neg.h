/* The constants of the vector kernels' e^x for x <= 0 (attn_avx512.c's
 * exp_neg, 16 lanes; gemm_avx2.c's exp_neg8, 8 lanes), so that both
 * compute the same: x = n ln2 + r with n = round(x log2 e) and |r| <=
 * ln2/2 (ln2 in two parts, the first exact in a float, so n ln2 has no
 * rounding error), e^r by its degree-7 Taylor polynomial (truncation below
 * 5e-9 relative) in Horner form from 1/7! down to 1, times 2^n. Below ln
 * FLT_MIN the result, denormal in expf, is 0. */
#ifndef HR_KERNELS_CPU_EXP_NEG_H
#define HR_KERNELS_CPU_EXP_NEG_H

#define HR_EXP_LOG2E 1.44269504088896341f
#define HR_EXP_LN2_HI 0.693145751953125f
#define HR_EXP_LN2_LO 1.428606765330187045e-06f
#define HR_EXP_MIN (-87.33654f) /* ln FLT_MIN */
#define HR_EXP_TERMS 8

/* Horner coefficients, highest power first */
static const float hr_exp_taylor[HR_EXP_TERMS] = {
    1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f,
};

#endif
