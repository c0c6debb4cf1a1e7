/* MXFP4 (HR_DTYPE_MXFP4, llama.cpp's block_mxfp4) and the hub's gpt-oss
 * layout, against the values tools/mxfp4_ref/gen.py decodes with numpy from
 * each layout's own definition (tests/fixtures/mxfp4/ref.json): the
 * dequantization bit for bit (denormal and large scales included), the hub
 * rows rewritten as blocks, and a product through hr_matmul. */
#include "core/tensor.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *g_ref;

static uint8_t *bytes(const char *key, size_t *n) {
    json_t *a = json_object_get(g_ref, key);
    *n = json_array_size(a);
    uint8_t *p = malloc(*n);
    for (size_t i = 0; i < *n; i++)
        p[i] = (uint8_t)json_integer_value(json_array_get(a, i));
    return p;
}

static float *floats(const char *key, size_t *n) {
    json_t *a = json_object_get(g_ref, key);
    *n = json_array_size(a);
    float *p = malloc(*n * sizeof *p);
    for (size_t i = 0; i < *n; i++)
        p[i] = (float)json_number_value(json_array_get(a, i));
    return p;
}

static hr_tensor mxfp4(const uint8_t *data, int rows, int cols) {
    return (hr_tensor){.name = "w", .dtype = HR_DTYPE_MXFP4, .ndim = 2, .shape = {rows, cols},
                       .data = data, .nbytes = (size_t)rows * (cols / 32) * 17};
}

static void expect_rows(const hr_tensor *w, const float *want, const char *what) {
    int rows = (int)w->shape[0], cols = (int)w->shape[1];
    float *got = malloc((size_t)cols * sizeof *got);
    for (int r = 0; r < rows; r++) {
        hr_dequant_range(w, r, 0, cols, got);
        for (int c = 0; c < cols; c++)
            if (got[c] != want[(size_t)r * cols + c]) /* -0 == +0 */
                fail_msg("%s: row %d col %d is %g, numpy %g", what, r, c, got[c],
                         want[(size_t)r * cols + c]);
        /* a range that starts mid-block */
        hr_dequant_range(w, r, 5, cols - 5, got);
        for (int c = 5; c < cols; c++)
            assert_true(got[c - 5] == want[(size_t)r * cols + c]);
    }
    free(got);
}

static void test_ggml_blocks(void **state) {
    (void)state;
    size_t nb, nv;
    uint8_t *b = bytes("ggml_blocks", &nb);
    float *v = floats("ggml_values", &nv);
    int rows = (int)json_integer_value(json_object_get(g_ref, "rows")),
        cols = (int)json_integer_value(json_object_get(g_ref, "cols"));
    assert_int_equal(nb, (size_t)rows * cols / 32 * 17);
    int be, bb;
    hr_dtype_block(HR_DTYPE_MXFP4, &be, &bb);
    assert_int_equal(be, 32);
    assert_int_equal(bb, 17);
    assert_string_equal(hr_dtype_name(HR_DTYPE_MXFP4), "MXFP4");
    hr_tensor w = mxfp4(b, rows, cols);
    expect_rows(&w, v, "ggml");
    free(b);
    free(v);
}

static void test_hub_layout(void **state) {
    (void)state;
    size_t nb, ns, nv, nx, ny;
    uint8_t *blocks = bytes("hub_blocks", &nb), *scales = bytes("hub_scales", &ns);
    float *v = floats("hub_values", &nv), *x = floats("x", &nx), *want = floats("hub_y", &ny);
    int rows = (int)json_integer_value(json_object_get(g_ref, "rows")),
        cols = (int)json_integer_value(json_object_get(g_ref, "cols")), groups = cols / 32;
    uint8_t *blk = malloc((size_t)rows * groups * 17);
    for (int r = 0; r < rows; r++)
        hr_mxfp4_from_hub(blk + (size_t)r * groups * 17, blocks + (size_t)r * groups * 16,
                          scales + (size_t)r * groups, groups);
    hr_tensor w = mxfp4(blk, rows, cols);
    expect_rows(&w, v, "hub");
    /* a product: y = w . x within float rounding of numpy's float64 */
    assert_true(hr_matmul_supports(HR_DTYPE_MXFP4));
    float y[16];
    hr_matmul(NULL, y, rows, x, cols, 1, &w, NULL);
    for (int r = 0; r < rows; r++) {
        double scale = 0;
        for (int c = 0; c < cols; c++)
            scale += fabs((double)v[(size_t)r * cols + c] * x[c]);
        if (fabs(y[r] - want[r]) > 1e-6 * scale + 1e-37)
            fail_msg("row %d: %g, numpy %g", r, y[r], want[r]);
    }
    free(blk);
    free(blocks);
    free(scales);
    free(v);
    free(x);
    free(want);
}

int main(void) {
    const char *root = getenv("HEARTH_ROOT");
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/fixtures/mxfp4/ref.json", root ? root : ".");
    json_error_t je;
    g_ref = json_load_file(path, 0, &je);
    if (!g_ref) {
        fprintf(stderr, "%s: %s\n", path, je.text);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ggml_blocks),
        cmocka_unit_test(test_hub_layout),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(g_ref);
    return rc;
}
