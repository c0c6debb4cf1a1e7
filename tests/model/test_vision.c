/* Images through the model layer.
 *
 * Always: the forward's image inputs (model/batch.h) on the gemma3_text
 * fixture: rows given as embd are used as they are (the token's own scaled
 * embedding given as a row reproduces the logits bit for bit; another row
 * changes them), and attn_end lets a span's tokens see each other both ways
 * (a later token of the span changes an earlier one's logits, which causal
 * attention never does), while attn_end = pos + 1 is causal exactly.
 *
 * With tests/fixtures/vision/gemma3 (tools/refgen/vision.py, transformers
 * on the GPU machine): the image processor's pixel_values (from the PNGs,
 * decoded here), the SigLIP tower's hidden states and the projector's
 * features within 1e-4, and the prompt's logits with two images placed
 * (boi, image tokens, eoi; bidirectional within an image) within 1e-4,
 * then the greedy tokens (equal) and their logprobs (within 1e-4). The
 * pixel_values are bit for bit those of transformers 5.17's
 * Gemma3ImageProcessor (the torchvision backend). Without the fixture the
 * parity part says so and the test exits 77 (skipped) after the local
 * checks.
 *
 * Qwen2.5-VL: local checks (smart_resize against transformers' Python, the
 * M-RoPE positions, the patch order, M-RoPE refused for a model without
 * it), then with tests/fixtures/vision/qwen2_5_vl (tools/refgen/
 * vision_qwen25vl.py): the processor's pixel_values, the ViT's output and
 * the merged features; the prompt's positions, logits and greedy steps
 * when the fixture has them (skipped, saying why, while they are pending). */
#include "core/error.h"
#include "core/file.h"
#include "media/image.h"
#include "media/imgproc.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/model.h"
#include "model/vision.h"
#include "model/vision_qwen.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char root[1024];
static bool have_fixture;

/* ---- a one-sequence forward over a whole prompt ---------------------------------- */

typedef struct seq {
    const hr_model *m;
    hr_fwd *f;
    hr_kv kv;
    int32_t blocks[64];
    int n_blocks, len;
} seq;

static void seq_open(seq *s, const hr_model *m, int n_ctx) {
    memset(s, 0, sizeof *s);
    s->m = m;
    hr_error e = {0};
    hr_kv_fmt fmt = {.dtype = HR_DTYPE_F32};
    assert_int_equal(hr_kv_init_fmt(&s->kv, m->be, &m->hp, &fmt, (n_ctx + HR_KV_BLOCK - 1) / HR_KV_BLOCK, &e), 0);
    assert_int_equal(hr_fwd_new(&s->f, m, n_ctx, 1, n_ctx, 2, &e), 0);
}

static void seq_close(seq *s) {
    hr_fwd_free(s->f);
    hr_kv_deinit(&s->kv);
}

/* n tokens appended; logits of every one to logits ([n][n_vocab]) */
static int seq_eval3(seq *s, const int32_t *tok, int n, const float *embd,
                     const int32_t *embd_row, const int32_t *attn_end, const int32_t *rope_pos,
                     float *logits, hr_error *e) {
    while (s->n_blocks * HR_KV_BLOCK < s->len + n)
        s->blocks[s->n_blocks++] = hr_kv_alloc(&s->kv);
    int32_t pos[512], sq[512] = {0};
    uint8_t want[512];
    for (int i = 0; i < n; i++) {
        pos[i] = s->len + i;
        want[i] = 1;
    }
    hr_seq_blocks sb = {s->blocks, s->n_blocks, s->len + n, 0};
    hr_batch b = {.n_tokens = n, .token = tok, .pos = pos, .seq = sq, .logits = want,
                  .n_seqs = 1, .seqs = &sb, .embd = embd, .embd_row = embd_row,
                  .attn_end = attn_end, .rope_pos = rope_pos};
    int rc = hr_forward(s->f, &s->kv, &b, logits, e);
    if (!rc)
        s->len += n;
    return rc;
}

static int seq_eval(seq *s, const int32_t *tok, int n, const float *embd, const int32_t *embd_row,
                    const int32_t *attn_end, float *logits, hr_error *e) {
    return seq_eval3(s, tok, n, embd, embd_row, attn_end, NULL, logits, e);
}

static float max_abs_diff(const float *a, const float *b, size_t n, float *scale) {
    float d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmaxf(d, fabsf(a[i] - b[i]));
        s = fmaxf(s, fabsf(b[i]));
    }
    if (scale)
        *scale = s;
    return d;
}

/* ---- the forward's image inputs, locally ----------------------------------------- */

static void test_embd_rows(void **state) {
    (void)state;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/gemma3_text", root);
    hr_model *m = NULL;
    hr_error e = {0};
    assert_int_equal(hr_model_open(&m, dir, &e), 0);
    int V = m->hp.n_vocab, d = m->hp.d_model, n = 9;
    const int32_t tok[9] = {2, 40, 41, 42, 43, 44, 45, 46, 47};
    float *ref = malloc(sizeof(float) * (size_t)n * V), *got = malloc(sizeof(float) * (size_t)n * V);
    seq s;
    seq_open(&s, m, 64);
    assert_int_equal(seq_eval(&s, tok, n, NULL, NULL, NULL, ref, &e), 0);
    seq_close(&s);
    /* tokens 3..5 given as rows: their own embeddings, scaled as gemma scales */
    float *rows = malloc(sizeof(float) * 3 * (size_t)d);
    float scale = sqrtf((float)d);
    const hr_tensor *emb = m->embed;
    assert_int_equal(emb->dtype, HR_DTYPE_F32);
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < d; i++)
            rows[r * d + i] = ((const float *)emb->data)[(size_t)tok[3 + r] * d + i] * scale;
    int32_t row[9] = {-1, -1, -1, 0, 1, 2, -1, -1, -1};
    seq_open(&s, m, 64);
    assert_int_equal(seq_eval(&s, tok, n, rows, row, NULL, got, &e), 0);
    seq_close(&s);
    assert_memory_equal(got, ref, sizeof(float) * (size_t)n * V);
    /* another row: positions from 4 on change, those before do not */
    rows[d + 5] += 1.0f;
    seq_open(&s, m, 64);
    assert_int_equal(seq_eval(&s, tok, n, rows, row, NULL, got, &e), 0);
    seq_close(&s);
    assert_memory_equal(got, ref, sizeof(float) * 4 * (size_t)V);
    assert_true(max_abs_diff(got + 4 * (size_t)V, ref + 4 * (size_t)V, (size_t)V, NULL) > 1e-4f);
    free(rows);
    free(ref);
    free(got);
    hr_model_free(m);
}

static void test_attn_end(void **state) {
    (void)state;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/gemma3_text", root);
    hr_model *m = NULL;
    hr_error e = {0};
    assert_int_equal(hr_model_open(&m, dir, &e), 0);
    int V = m->hp.n_vocab, n = 8;
    int32_t tok[8] = {2, 40, 41, 42, 43, 44, 45, 46};
    int32_t causal[8], span[8];
    for (int i = 0; i < n; i++)
        causal[i] = span[i] = i + 1;
    for (int i = 2; i < 6; i++) /* positions 2..5 see each other */
        span[i] = 6;
    float *a = malloc(sizeof(float) * (size_t)n * V), *b = malloc(sizeof(float) * (size_t)n * V);
    float *c = malloc(sizeof(float) * (size_t)n * V);
    seq s;
    seq_open(&s, m, 64);
    assert_int_equal(seq_eval(&s, tok, n, NULL, NULL, NULL, a, &e), 0);
    seq_close(&s);
    seq_open(&s, m, 64);
    assert_int_equal(seq_eval(&s, tok, n, NULL, NULL, causal, b, &e), 0);
    seq_close(&s);
    /* attn_end = pos + 1 is causal: the same logits (the other kernel path: 1e-6) */
    assert_true(max_abs_diff(b, a, (size_t)n * V, NULL) < 1e-5f);
    seq_open(&s, m, 64);
    assert_int_equal(seq_eval(&s, tok, n, NULL, NULL, span, b, &e), 0);
    seq_close(&s);
    assert_true(max_abs_diff(b, a, 2 * (size_t)V, NULL) < 1e-5f);   /* before the span */
    assert_true(max_abs_diff(b + 2 * (size_t)V, a + 2 * (size_t)V, (size_t)V, NULL) > 1e-4f);
    tok[5] = 50; /* a later token of the span changes position 2 */
    seq_open(&s, m, 64);
    assert_int_equal(seq_eval(&s, tok, n, NULL, NULL, span, c, &e), 0);
    seq_close(&s);
    assert_true(max_abs_diff(c + 2 * (size_t)V, b + 2 * (size_t)V, (size_t)V, NULL) > 1e-4f);
    assert_true(max_abs_diff(c, b, 2 * (size_t)V, NULL) < 1e-5f);
    /* a bad attn_end is an error, not a read past the cache */
    span[7] = 7;
    seq_open(&s, m, 64);
    assert_int_equal(seq_eval(&s, tok, n, NULL, NULL, span, c, &e), HR_EINVAL);
    assert_non_null(strstr(e.msg, "attn_end"));
    seq_close(&s);
    free(a);
    free(b);
    free(c);
    hr_model_free(m);
}

/* ---- parity with transformers (the fixture) ----------------------------------------- */

static float *read_f32(const char *dir, const json_t *ent, size_t *n) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(ent, "file")));
    char *buf = NULL;
    size_t len = 0;
    assert_int_equal(hr_file_read(path, &buf, &len, NULL), 0);
    *n = len / 4;
    return (float *)buf;
}

static void test_parity(void **state) {
    (void)state;
    if (!have_fixture)
        skip();
    char dir[1200], mdir[1300], path[1400];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/vision/gemma3", root);
    snprintf(mdir, sizeof mdir, "%s/model", dir);
    snprintf(path, sizeof path, "%s/ref.json", dir);
    json_t *ref = json_load_file(path, 0, NULL);
    assert_non_null(ref);
    hr_model *m = NULL;
    hr_error e = {0};
    if (hr_model_open(&m, mdir, &e))
        fail_msg("%s", e.msg);
    assert_non_null(m->mm);
    const hr_vision_cfg *vc = hr_vision_config(m->mm->tower);
    int S = vc->image_size, np = (S / vc->patch_size) * (S / vc->patch_size);
    hr_pool *pool = hr_pool_new(2);
    size_t i;
    json_t *im;
    float *feats[8] = {0};
    json_array_foreach(json_object_get(ref, "images"), i, im) {
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(im, "file")));
        char *bytes = NULL;
        size_t nb = 0;
        assert_int_equal(hr_file_read(path, &bytes, &nb, NULL), 0);
        hr_image img;
        assert_int_equal(hr_image_decode((uint8_t *)bytes, nb, &img, &e), 0);
        free(bytes);
        float *px = malloc(sizeof(float) * 3 * (size_t)S * S);
        assert_int_equal(hr_image_preprocess(&img, &m->mm->proc, px, &e), 0);
        size_t n = 0;
        float *want = read_f32(dir, json_object_get(im, "pixel_values"), &n);
        assert_int_equal(n, 3 * (size_t)S * S);
        float d = max_abs_diff(px, want, n, NULL);
        printf("image %zu: pixel_values max |diff| %g\n", i, d);
        assert_true(d == 0); /* the processor's resize and float steps, bit for bit */
        float *hid = malloc(sizeof(float) * (size_t)np * vc->d);
        feats[i] = malloc(sizeof(float) * (size_t)vc->mm_tokens * vc->d_text);
        assert_int_equal(hr_vision_encode(m->mm->tower, pool, want, feats[i], hid, &e), 0);
        float *wh = read_f32(dir, json_object_get(im, "vision_hidden"), &n), sc;
        assert_int_equal(n, (size_t)np * vc->d);
        d = max_abs_diff(hid, wh, n, &sc);
        printf("image %zu: vision hidden max |diff| %g (max |x| %g)\n", i, d, sc);
        assert_true(d <= 1e-4f * fmaxf(1.0f, sc));
        float *wf = read_f32(dir, json_object_get(im, "image_features"), &n);
        assert_int_equal(n, (size_t)vc->mm_tokens * vc->d_text);
        d = max_abs_diff(feats[i], wf, n, &sc);
        printf("image %zu: image features max |diff| %g (max |x| %g)\n", i, d, sc);
        assert_true(d <= 1e-4f * fmaxf(1.0f, sc));
        free(wh);
        free(wf);
        free(hid);
        free(want);
        free(px);
        hr_image_deinit(&img);
    }
    /* the prompt: images' rows at their tokens, each image bidirectional */
    const json_t *pj = json_object_get(ref, "prompt");
    int n = (int)json_array_size(pj), V = m->hp.n_vocab, k = 0, row = 0;
    int32_t *tok = malloc(sizeof(int32_t) * 64), *er = malloc(sizeof(int32_t) * 64);
    int32_t *end = malloc(sizeof(int32_t) * 64);
    float *rows = malloc(sizeof(float) * 2 * (size_t)vc->mm_tokens * vc->d_text);
    for (int t = 0; t < n; t++)
        tok[t] = (int32_t)json_integer_value(json_array_get(pj, (size_t)t));
    for (int t = 0; t < n; t++) {
        end[t] = t + 1;
        er[t] = -1;
        if (tok[t] == m->mm->image_token) {
            int s0 = t;
            while (t < n && tok[t] == m->mm->image_token)
                t++;
            for (int u = s0; u < t; u++) {
                end[u] = t;
                er[u] = row++;
            }
            memcpy(rows + (size_t)k * vc->mm_tokens * vc->d_text, feats[k],
                   sizeof(float) * (size_t)vc->mm_tokens * vc->d_text);
            k++;
            t--;
        }
    }
    assert_int_equal(k, 2);
    float *logits = malloc(sizeof(float) * (size_t)n * V), sc;
    size_t nl = 0;
    float *want = read_f32(dir, json_object_get(ref, "prompt_logits"), &nl);
    assert_int_equal(nl, (size_t)n * V);
    seq s;
    seq_open(&s, m, 128);
    if (seq_eval(&s, tok, n, rows, er, end, logits, &e))
        fail_msg("%s", e.msg);
    float d = max_abs_diff(logits, want, nl, &sc);
    printf("prompt logits (%d tokens, 2 images) max |diff| %g (max |x| %g)\n", n, d, sc);
    assert_true(d <= 1e-4f * fmaxf(1.0f, sc));
    /* greedy steps */
    const float *last = logits + (size_t)(n - 1) * V;
    json_t *st;
    double lp_diff = 0;
    json_array_foreach(json_object_get(ref, "greedy"), i, st) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (last[v] > last[best])
                best = v;
        int wantt = (int)json_integer_value(json_object_get(st, "token"));
        if (best != wantt)
            fail_msg("greedy step %zu: %d, transformers %d (margin %g)", i, best, wantt,
                     json_real_value(json_object_get(st, "margin")));
        double mx = last[best], sum = 0;
        for (int v = 0; v < V; v++)
            sum += exp((double)last[v] - mx);
        double lp = -log(sum), dl = fabs(lp - json_real_value(json_object_get(st, "logprob")));
        lp_diff = fmax(lp_diff, dl);
        assert_true(dl <= 1e-4);
        int32_t t1 = best;
        assert_int_equal(seq_eval(&s, &t1, 1, NULL, NULL, NULL, logits, &e), 0);
        last = logits;
    }
    printf("greedy: %zu tokens equal, logprobs max |diff| %g\n",
           json_array_size(json_object_get(ref, "greedy")), lp_diff);
    seq_close(&s);
    for (int j = 0; j < 8; j++)
        free(feats[j]);
    free(tok);
    free(er);
    free(end);
    free(rows);
    free(logits);
    free(want);
    hr_pool_free(pool);
    hr_model_free(m);
    json_decref(ref);
}

/* ---- Qwen2.5-VL -------------------------------------------------------------------------- */

static void test_qwen_local(void **state) {
    (void)state;
    /* smart_resize against transformers' Python (round half to even) */
    const int cases[][7] = {{40, 50, 8, 256, 4096, 40, 48},     {61, 97, 8, 256, 4096, 48, 80},
                            {12, 20, 8, 256, 4096, 16, 16},     {480, 640, 28, 3136, 1003520, 476, 644},
                            {1080, 1920, 28, 3136, 1003520, 728, 1316},
                            {20, 4000, 28, 3136, 1003520, 28, 4004},
                            {3, 3, 28, 3136, 1003520, 56, 56},  {42, 70, 28, 3136, 1003520, 56, 56}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int *c = cases[i];
        int oh = 0, ow = 0;
        assert_int_equal(hr_image_smart_resize(c[0], c[1], c[2], c[3], c[4], &oh, &ow, NULL), 0);
        if (oh != c[5] || ow != c[6])
            fail_msg("smart_resize(%d, %d): %dx%d, transformers %dx%d", c[0], c[1], oh, ow, c[5],
                     c[6]);
    }
    hr_error e = {0};
    int oh, ow;
    assert_int_equal(hr_image_smart_resize(1, 300, 28, 3136, 1003520, &oh, &ow, &e), HR_EINVAL);
    /* positions: text, a 2 x 3 image, text: the text after it continues at base + 3 */
    int32_t pos[12][3];
    int st[1] = {2}, lh[1] = {2}, lw[1] = {3};
    assert_int_equal(hr_vision_qwen_rope_pos(10, st, lh, lw, 1, &pos[0][0]), 7);
    const int32_t want[10][3] = {{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {2, 2, 3}, {2, 2, 4},
                                 {2, 3, 2}, {2, 3, 3}, {2, 3, 4}, {5, 5, 5}, {6, 6, 6}};
    assert_memory_equal(pos, want, sizeof want);
    /* patches: merge blocks row by row, each row channel, frame, y, x */
    hr_vision_qwen_cfg c = {.channels = 3, .patch = 2, .merge = 2, .tpatch = 2};
    float px[3 * 4 * 8], rows[8 * 24];
    for (int i = 0; i < 3 * 4 * 8; i++)
        px[i] = (float)i; /* (3, 4, 8): value = (ch * 4 + y) * 8 + x */
    hr_vision_qwen_patchify(&c, px, 4, 8, rows);
    /* row 5: block 1 (patches (0,2)..(1,3)), its patch 1: (py 0, px 3) */
    const float *r5 = rows + 5 * 24;
    assert_true(r5[0] == 6.0f && r5[1] == 7.0f && r5[2] == 14.0f && r5[3] == 15.0f);
    assert_true(r5[4] == 6.0f);                 /* frame 2 repeats frame 1 */
    assert_true(r5[8] == (float)(32 + 6));      /* channel 1 */
    /* M-RoPE positions for a model without M-RoPE: an error */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/gemma3_text", root);
    hr_model *m = NULL;
    assert_int_equal(hr_model_open(&m, dir, &e), 0);
    seq s;
    seq_open(&s, m, 64);
    int32_t tok[2] = {2, 40}, p3[6] = {0};
    float *lg = malloc(sizeof(float) * 2 * (size_t)m->hp.n_vocab);
    assert_int_equal(seq_eval3(&s, tok, 2, NULL, NULL, NULL, p3, lg, &e), HR_EINVAL);
    assert_non_null(strstr(e.msg, "M-RoPE"));
    seq_close(&s);
    free(lg);
    hr_model_free(m);
}

/* The fixture's images (always), then with text its prompt: M-RoPE
 * positions, logits and greedy steps. */
static void qwen_parity(bool text) {
    char dir[1200], mdir[1300], path[1400];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/vision/qwen2_5_vl", root);
    snprintf(path, sizeof path, "%s/ref.json", dir);
    json_t *ref = json_load_file(path, 0, NULL);
    if (!ref)
        skip(); /* tools/refgen/vision_qwen25vl.py on the GPU machine */
    if (text && !json_object_get(ref, "prompt_logits")) {
        printf("skip: the Qwen2.5-VL prompt references are %s\n",
               json_string_value(json_object_get(ref, "text_references")));
        json_decref(ref);
        skip();
    }
    snprintf(mdir, sizeof mdir, "%s/model", dir);
    hr_model *m = NULL;
    hr_error e = {0};
    if (hr_model_open(&m, mdir, &e))
        fail_msg("%s", e.msg);
    assert_non_null(m->mm_qwen);
    assert_null(m->mm);
    const hr_model_vision_qwen *mq = m->mm_qwen;
    const hr_vision_qwen_cfg *vc = hr_vision_qwen_config(mq->tower);
    int P = vc->patch, M = vc->merge, pp = vc->channels * vc->tpatch * P * P, D = m->hp.d_model;
    hr_pool *pool = hr_pool_new(2);
    size_t i;
    json_t *im;
    float *feats[8] = {0};
    int lh[8], lw[8];
    json_array_foreach(json_object_get(ref, "images"), i, im) {
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(im, "file")));
        char *bytes = NULL;
        size_t nb = 0;
        assert_int_equal(hr_file_read(path, &bytes, &nb, NULL), 0);
        hr_image img;
        assert_int_equal(hr_image_decode((uint8_t *)bytes, nb, &img, &e), 0);
        free(bytes);
        int H, W;
        assert_int_equal(hr_image_smart_resize(img.h, img.w, P * M, mq->min_pixels,
                                               mq->max_pixels, &H, &W, &e), 0);
        const json_t *rs = json_object_get(im, "resized");
        assert_int_equal(H, json_integer_value(json_array_get(rs, 0)));
        assert_int_equal(W, json_integer_value(json_array_get(rs, 1)));
        hr_image_proc pr = mq->proc;
        pr.height = H;
        pr.width = W;
        int gh = H / P, gw = W / P, n = gh * gw;
        float *px = malloc(sizeof(float) * 3 * (size_t)H * W);
        float *rows = malloc(sizeof(float) * (size_t)n * pp);
        assert_int_equal(hr_image_preprocess(&img, &pr, px, &e), 0);
        hr_vision_qwen_patchify(vc, px, H, W, rows);
        size_t nw = 0;
        float *want = read_f32(dir, json_object_get(im, "pixel_values"), &nw);
        assert_int_equal(nw, (size_t)n * pp);
        float d = max_abs_diff(rows, want, nw, NULL);
        printf("qwen image %zu (%dx%d -> %dx%d): pixel_values max |diff| %g\n", i, img.w, img.h,
               W, H, d);
        assert_true(d <= 1e-6f);
        float *hid = malloc(sizeof(float) * (size_t)n * vc->d), sc;
        feats[i] = malloc(sizeof(float) * (size_t)(n / (M * M)) * D);
        lh[i] = gh / M;
        lw[i] = gw / M;
        assert_int_equal(hr_vision_qwen_encode(mq->tower, pool, want, gh, gw, feats[i], hid, &e), 0);
        float *wh = read_f32(dir, json_object_get(im, "vision_hidden"), &nw);
        assert_int_equal(nw, (size_t)n * vc->d);
        d = max_abs_diff(hid, wh, nw, &sc);
        printf("qwen image %zu: vision hidden max |diff| %g (max |x| %g)\n", i, d, sc);
        assert_true(d <= 1e-4f * fmaxf(1.0f, sc));
        float *wf = read_f32(dir, json_object_get(im, "image_features"), &nw);
        assert_int_equal(nw, (size_t)(n / (M * M)) * D);
        d = max_abs_diff(feats[i], wf, nw, &sc);
        printf("qwen image %zu: image features max |diff| %g (max |x| %g)\n", i, d, sc);
        assert_true(d <= 1e-4f * fmaxf(1.0f, sc));
        free(wh);
        free(wf);
        free(hid);
        free(want);
        free(rows);
        free(px);
        hr_image_deinit(&img);
    }
    if (!text) {
        for (int j = 0; j < 8; j++)
            free(feats[j]);
        hr_pool_free(pool);
        hr_model_free(m);
        json_decref(ref);
        return;
    }
    /* the prompt: the images' rows at their tokens, causal, M-RoPE positions */
    const json_t *pj = json_object_get(ref, "prompt");
    int n = (int)json_array_size(pj), V = m->hp.n_vocab, k = 0, row = 0;
    assert_true(n <= 256);
    int32_t tok[256], er[256], pos3[256 * 3], st[2], glh[2], glw[2];
    float *rows = malloc(sizeof(float) * 256 * (size_t)D);
    for (int t = 0; t < n; t++) {
        tok[t] = (int32_t)json_integer_value(json_array_get(pj, (size_t)t));
        er[t] = -1;
    }
    for (int t = 0; t < n; t++) {
        if (tok[t] == mq->image_token && (t == 0 || tok[t - 1] != mq->image_token)) {
            int which = (int)json_integer_value(json_array_get(json_object_get(ref, "prompt_images"),
                                                               (size_t)k));
            st[k] = t;
            glh[k] = lh[which];
            glw[k] = lw[which];
            int cnt = lh[which] * lw[which];
            memcpy(rows + (size_t)row * D, feats[which], sizeof(float) * (size_t)cnt * D);
            for (int u = 0; u < cnt; u++)
                er[t + u] = row + u;
            row += cnt;
            k++;
        }
    }
    assert_int_equal(k, 2);
    int next = hr_vision_qwen_rope_pos(n, st, glh, glw, 2, pos3);
    const json_t *wp = json_object_get(ref, "position_ids");
    if (wp) {
        for (int t = 0; t < n; t++)
            for (int a = 0; a < 3; a++) {
                int w = (int)json_integer_value(json_array_get(json_array_get(wp, (size_t)a),
                                                               (size_t)t));
                if (pos3[3 * t + a] != w)
                    fail_msg("token %d axis %d: position %d, transformers %d", t, a,
                             pos3[3 * t + a], w);
            }
        printf("qwen M-RoPE positions of %d tokens equal transformers'\n", n);
    }
    float *logits = malloc(sizeof(float) * (size_t)n * V), sc;
    size_t nl = 0;
    float *want = read_f32(dir, json_object_get(ref, "prompt_logits"), &nl);
    assert_int_equal(nl, (size_t)n * V);
    seq s;
    seq_open(&s, m, 256);
    if (seq_eval3(&s, tok, n, rows, er, NULL, pos3, logits, &e))
        fail_msg("%s", e.msg);
    float d = max_abs_diff(logits, want, nl, &sc);
    printf("qwen prompt logits (%d tokens, 2 images) max |diff| %g (max |x| %g)\n", n, d, sc);
    assert_true(d <= 1e-4f * fmaxf(1.0f, sc));
    const float *last = logits + (size_t)(n - 1) * V;
    json_t *stp;
    double lp_diff = 0;
    json_array_foreach(json_object_get(ref, "greedy"), i, stp) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (last[v] > last[best])
                best = v;
        int wantt = (int)json_integer_value(json_object_get(stp, "token"));
        if (best != wantt)
            fail_msg("qwen greedy step %zu: %d, transformers %d (margin %g)", i, best, wantt,
                     json_real_value(json_object_get(stp, "margin")));
        double mx = last[best], sum = 0;
        for (int v = 0; v < V; v++)
            sum += exp((double)last[v] - mx);
        double dl = fabs(-log(sum) - json_real_value(json_object_get(stp, "logprob")));
        lp_diff = fmax(lp_diff, dl);
        assert_true(dl <= 1e-4);
        int32_t t1 = best, p1[3] = {next, next, next}; /* the rope delta carries on */
        next++;
        assert_int_equal(seq_eval3(&s, &t1, 1, NULL, NULL, NULL, p1, logits, &e), 0);
        last = logits;
    }
    printf("qwen greedy: %zu tokens equal, logprobs max |diff| %g\n",
           json_array_size(json_object_get(ref, "greedy")), lp_diff);
    seq_close(&s);
    for (int j = 0; j < 8; j++)
        free(feats[j]);
    free(rows);
    free(logits);
    free(want);
    hr_pool_free(pool);
    hr_model_free(m);
    json_decref(ref);
}

static void test_qwen_images(void **state) {
    (void)state;
    qwen_parity(false);
}

static void test_qwen_prompt(void **state) {
    (void)state;
    qwen_parity(true);
}

int main(void) {
    const char *r = getenv("HEARTH_ROOT");
    snprintf(root, sizeof root, "%s", r ? r : ".");
    char path[1200];
    snprintf(path, sizeof path, "%s/tests/fixtures/vision/gemma3/ref.json", root);
    have_fixture = hr_file_exists(path);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embd_rows),
        cmocka_unit_test(test_attn_end),
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_qwen_local),
        cmocka_unit_test(test_qwen_images),
        cmocka_unit_test(test_qwen_prompt),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (!rc && !have_fixture) {
        printf("skip: test_parity needs tests/fixtures/vision/gemma3 (tools/refgen/vision.py, run "
               "with transformers on the GPU machine: DEVICE_REQUEST); the local checks passed\n");
        return 77;
    }
    return rc;
}
