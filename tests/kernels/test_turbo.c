/* TurboQuant's MSE quantizer of a row (kernels/cpu/turbo.h):
 *  - the randomized Walsh-Hadamard rotation is orthonormal (norms kept,
 *    undone by its inverse, every entry of a rotated basis vector
 *    +-1/sqrt(hd));
 *  - the committed Lloyd-Max codebooks (tools/turboquant/codebooks.py) are
 *    ascending and symmetric, and their distortion lies between the
 *    paper's lower bound 4^-b and its upper bound sqrt(3) pi / 2 4^-b;
 *  - the round trip's distortion |x - x^|^2 / |x|^2 over random Gaussian
 *    rows and random rotations is the codebook's MSE per coordinate within
 *    5% (the paper's D_mse); over rows with outlier channels and an offset
 *    (one randomized Hadamard transform is not a uniformly random rotation,
 *    so z is not exactly the codebook's density) it stays below the
 *    paper's bound sqrt(3) pi / 2 4^-b;
 *  - the row read in the rotated basis is the row rotated (attention's
 *    domain: <q, x^> = <rotate(q), y^> within 1e-5);
 *  - every ISA's rotation, inverse and codes (cpu.h's turbo_rotate,
 *    turbo_unrotate, turbo_encode) give the scalar bodies' bits, over
 *    every length and width, values on the cells' thresholds, zeros,
 *    infinities and NaNs (a NaN for a NaN: not its sign). */
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/turbo.h"
#include "sample/rng.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const int DIMS[] = {64, 128, 256};

static float gauss(hr_rng *r) {
    double u = hr_rng_uniform(r), v = hr_rng_uniform(r);
    return (float)(sqrt(-2 * log(u > 0 ? u : 1e-300)) * cos(2 * M_PI * v));
}

static void test_rotation(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 1);
    float s[256], x[256], y[256], z[256];
    for (int di = 0; di < 3; di++) {
        int hd = DIMS[di];
        hr_turbo_signs(s, hd, 77 + (uint64_t)di);
        int neg = 0;
        for (int i = 0; i < hd; i++)
            neg += s[i] < 0;
        assert_true(neg > hd / 4 && neg < 3 * hd / 4);
        for (int c = 0; c < 20; c++) {
            double n0 = 0, n1 = 0;
            for (int i = 0; i < hd; i++) {
                x[i] = gauss(&rng) * (i % 17 == 2 ? 8.0f : 1.0f);
                n0 += (double)x[i] * x[i];
            }
            hr_turbo_rotate(y, x, s, hd);
            for (int i = 0; i < hd; i++)
                n1 += (double)y[i] * y[i];
            assert_true(fabs(n1 - n0) <= 1e-5 * n0);
            hr_turbo_unrotate(z, y, s, hd);
            for (int i = 0; i < hd; i++)
                assert_true(fabsf(z[i] - x[i]) <= 1e-5f * (1 + fabsf(x[i])));
        }
        memset(x, 0, sizeof x);
        x[hd / 3] = 1;
        hr_turbo_rotate(y, x, s, hd);
        for (int i = 0; i < hd; i++)
            assert_true(fabsf(fabsf(y[i]) - 1 / sqrtf((float)hd)) < 1e-7f);
    }
}

static void test_codebooks(void **state) {
    (void)state;
    for (int di = 0; di < 3; di++)
        for (int b = 1; b <= 4; b++) {
            assert_true(hr_turbo_ok(DIMS[di], b));
            double d = hr_turbo_codebook_mse(DIMS[di], b), lo = pow(4, -b),
                   hi = sqrt(3) * M_PI / 2 * pow(4, -b);
            if (!(d > lo && d < hi))
                fail_msg("hd %d %d-bit: MSE %g outside (%g, %g)", DIMS[di], b, d, lo, hi);
        }
    assert_false(hr_turbo_ok(96, 2));
    assert_false(hr_turbo_ok(128, 5));
}

/* ROWS random rows (outl: with outlier channels and an offset) of head dim
 * hd at `bits`, each under its own rotation: the mean distortion */
static double round_trip(hr_rng *rng, int hd, int bits, bool outl, uint64_t seed) {
    enum { ROWS = 600 };
    float s[256], x[256], xr[256], q[256], qr[256], y[256];
    unsigned char rec[4 + 128];
    double sum = 0;
    for (int r = 0; r < ROWS; r++) {
        hr_turbo_signs(s, hd, seed + 1000 * (uint64_t)r);
        double n2 = 0, e2 = 0;
        for (int i = 0; i < hd; i++) {
            x[i] = outl ? gauss(rng) * (i % 13 == 5 ? 10.0f : 1.0f) + 0.5f : gauss(rng);
            n2 += (double)x[i] * x[i];
        }
        hr_turbo_store(rec, x, hd, bits, s);
        hr_turbo_load(xr, rec, hd, bits, s);
        for (int i = 0; i < hd; i++)
            e2 += ((double)x[i] - xr[i]) * ((double)x[i] - xr[i]);
        sum += e2 / n2;
        if (r < 5) { /* attention's domain: the query rotated once */
            double d0 = 0, d1 = 0, mag = 0;
            for (int i = 0; i < hd; i++)
                q[i] = gauss(rng);
            hr_turbo_rotate(qr, q, s, hd);
            hr_turbo_load_rotated(y, rec, hd, bits);
            for (int i = 0; i < hd; i++) {
                d0 += (double)q[i] * xr[i];
                d1 += (double)qr[i] * y[i];
                mag += fabs((double)q[i] * xr[i]);
            }
            assert_true(fabs(d0 - d1) <= 1e-5 * mag);
        }
    }
    return sum / ROWS;
}

static void test_round_trip(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 2);
    for (int di = 0; di < 3; di++)
        for (int b = 1; b <= 4; b++)
            for (int outl = 0; outl < 2; outl++) {
                int hd = DIMS[di];
                double got = round_trip(&rng, hd, b, outl, (uint64_t)(8 * di + 2 * b + outl));
                double want = hr_turbo_codebook_mse(hd, b);
                printf("hd %d %d-bit, %s rows: |x - x^|^2 / |x|^2 = %.5f, codebook %.5f\n", hd,
                       b, outl ? "outlier" : "Gaussian", got, want);
                if (outl ? got > sqrt(3) * M_PI / 2 * pow(4, -b) : fabs(got - want) > 0.05 * want)
                    fail_msg("hd %d %d-bit: distortion %g, codebook's %g", hd, b, got, want);
            }
}

/* a[i] and b[i] the same bits, or both NaN (which NaN an operation with
 * two NaN operands returns is the compiler's choice: it may swap a sum's
 * operands) */
static void assert_same(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (isnan(a[i]) ? !isnan(b[i]) : memcmp(a + i, b + i, 4) != 0)
            fail_msg("element %d: %a against %a", i, (double)a[i], (double)b[i]);
}

static void test_rows_isas(void **state) {
    (void)state;
    hr_rng rng;
    hr_rng_seed(&rng, 5);
    static const int NS[] = {16, 32, 64, 128, 256}; /* powers of 2 */
    float x[256], s[256], y[256], z[256], yw[256], zw[256];
    uint8_t q[128], qw[128];
    int cases = 0;
    for (int ni = 0; ni < 5; ni++)
        for (int c = 0; c < 8; c++) {
            int n = NS[ni];
            hr_turbo_signs(s, n, 31 + (uint64_t)c);
            for (int i = 0; i < n; i++)
                x[i] = gauss(&rng) * (i % 11 == 3 ? 9.0f : 1.0f);
            if (c == 7) { /* what the codes must survive */
                x[1] = INFINITY;
                x[2] = -INFINITY;
                x[3] = NAN;
                x[4] = 0.0f;
            }
            hr__turbo_rotate_scalar(y, x, s, n);
            hr__turbo_unrotate_scalar(z, y, s, n);
            /* the codes of x itself (scale 1) where the width's table
             * holds this length, thresholds hit exactly on some */
            int cd = n == 64 || n == 128 || n == 256 ? n : 0;
            for (int isa = 1; isa < HR_ISA_COUNT; isa++) {
                const hr_cpu_kernels *K = hr_cpu_isa((hr_isa)isa);
                if (!K)
                    continue;
                K->turbo_rotate(yw, x, s, n);
                assert_same(yw, y, n);
                K->turbo_unrotate(zw, y, s, n);
                assert_same(zw, z, n);
                memcpy(zw, y, (size_t)n * 4); /* in place, as the KV rows' inverse runs */
                K->turbo_unrotate(zw, zw, s, n);
                assert_same(zw, z, n);
                for (int b = 1; cd && b <= 4; b++) {
                    const float *cb = hr_turbo_codebook(cd, b);
                    float in[256];
                    memcpy(in, x, (size_t)n * 4);
                    in[5] = 0.5f * (cb[0] + cb[1]); /* on a threshold: the lower cell */
                    in[6] = cb[(1 << b) - 1] * 2;
                    float sc = c == 6 ? 0.0f : 1.0f;
                    memset(q, 0xa5, sizeof q);
                    memset(qw, 0xa5, sizeof qw);
                    double want = hr__turbo_encode_scalar(q, in, sc, cb, n, b);
                    double got = K->turbo_encode(qw, in, sc, cb, n, b);
                    assert_memory_equal(q, qw, sizeof q);
                    assert_true(isnan(want) ? isnan(got) : !memcmp(&want, &got, sizeof got));
                }
                cases++;
            }
        }
    printf("TurboQuant rotation, inverse and codes: %d ISA cases == the scalar bodies\n", cases);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_rows_isas),
        cmocka_unit_test(test_codebooks),
        cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
