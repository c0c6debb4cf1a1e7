/* Qwen2-Audio's audio side: src/model/audio.c (the encoder and projector),
 * src/media/{wav,mel}.c feeding it, and src/engine placing its rows.
 *
 * Local (always):
 * - the token count of a clip, ((frames - 1) // 2 + 1 - 2) // 2 + 1 with
 *   Python's floor division, for every frame count of the 30 s window;
 * - the config's refusals;
 * - the encoder and projector against torch ops run as transformers runs
 *   the module (tools/refgen/audio_encoder.py: tests/fixtures/audio/
 *   encoder; all 3000 frames through the convs, padding masked as keys):
 *   hearth computes only the clip's frames, rows within 1e-4.
 * Against transformers 5.17 (tests/fixtures/audio/qwen2_audio, made by
 * tools/refgen/audio_qwen2.py on the GPU machine; without it this part
 * says so and the test exits 77 after the local checks pass):
 * - the clips' WAVs through hr_wav_decode and hr_mel_compute equal to
 *   WhisperFeatureExtractor's numpy path within 2e-6 and to its torch path
 *   (what the processor returned) within 5e-5, the mask's count equal;
 * - the encoder's rows and the projector's from the processor's features
 *   within 1e-4;
 * - the prompt with both clips through the engine, two requests batched
 *   together: the greedy tokens equal, logprobs within 1e-4; again from the
 *   prompt cache (blocks holding audio tokens keyed by the clip hash). */
#include "core/error.h"
#include "core/file.h"
#include "core/pool.h"
#include "engine/engine.h"
#include "media/mel.h"
#include "media/wav.h"
#include "model/audio.h"
#include "model/model.h"
#include "model/weights.h"

#include <jansson.h>
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

static float *read_f32(const char *path, size_t *n) {
    char *d = NULL;
    size_t len = 0;
    hr_error err = {0};
    if (hr_file_read(path, &d, &len, &err))
        fail_msg("%s", err.msg);
    *n = len / 4;
    return (float *)d;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++)
        w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

static long floordiv(long a, long b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

static void test_tokens(void **state) {
    (void)state;
    for (int f = 0; f <= 3000; f++) {
        long want = floordiv(floordiv(f - 1, 2) + 1 - 2, 2) + 1;
        assert_int_equal(hr_audio_enc_tokens(f), want < 0 ? 0 : want);
    }
    assert_int_equal(hr_audio_enc_tokens(3000), 750);
    assert_int_equal(hr_audio_enc_tokens(50), 12);
    assert_int_equal(hr_audio_enc_tokens(3), 1);
    assert_int_equal(hr_audio_enc_tokens(2), 0);
}

static void test_config(void **state) {
    (void)state;
    hr_audio_enc_cfg c;
    hr_error err = {0};
    json_t *j = json_pack("{s:s}", "model_type", "qwen2_audio");
    assert_int_equal(hr_audio_enc_cfg_from_json(&c, j, 64, &err), HR_ENOTFOUND);
    json_decref(j);
    j = json_pack("{s:{s:s}}", "audio_config", "activation_function", "relu");
    assert_int_equal(hr_audio_enc_cfg_from_json(&c, j, 64, &err), HR_EUNSUPPORTED);
    json_decref(j);
    j = json_pack("{s:{s:i,s:i}}", "audio_config", "d_model", 30, "encoder_attention_heads", 4);
    assert_int_equal(hr_audio_enc_cfg_from_json(&c, j, 64, &err), HR_EFORMAT);
    json_decref(j);
    j = json_pack("{s:{}}", "audio_config"); /* Qwen2AudioEncoderConfig's defaults: the 7B's */
    assert_int_equal(hr_audio_enc_cfg_from_json(&c, j, 4096, &err), 0);
    json_decref(j);
    assert_true(c.n_mels == 128 && c.d == 1280 && c.n_layers == 32 && c.n_heads == 20 &&
                c.d_ff == 5120 && c.max_pos == 1500);
}

/* the encoder of the model in dir (config.json, audio.safetensors) */
static hr_audio_enc *open_encoder(const char *dir, hr_weights **w) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cfg = json_load_file(path, 0, NULL);
    assert_non_null(cfg);
    hr_error err = {0};
    hr_audio_enc_cfg c;
    int d_text = (int)json_integer_value(
        json_object_get(json_object_get(cfg, "text_config"), "hidden_size"));
    if (hr_audio_enc_cfg_from_json(&c, cfg, d_text, &err) || hr_weights_open(w, dir, &err))
        fail_msg("%s", err.msg);
    json_decref(cfg);
    hr_audio_enc *a = NULL;
    if (hr_audio_enc_new(&a, &c, *w, &err))
        fail_msg("%s", err.msg);
    return a;
}

static void test_encoder_torch(void **state) {
    (void)state;
    char dir[1100], path[1200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/audio/encoder", root);
    snprintf(path, sizeof path, "%s/ref.json", dir);
    json_t *ref = json_load_file(path, 0, NULL);
    assert_non_null(ref);
    hr_weights *w = NULL;
    hr_audio_enc *a = open_encoder(dir, &w);
    const hr_audio_enc_cfg *c = hr_audio_enc_config(a);
    int frames = (int)json_integer_value(json_object_get(ref, "frames"));
    int tokens = (int)json_integer_value(json_object_get(ref, "tokens"));
    assert_int_equal(hr_audio_enc_tokens(frames), tokens);
    size_t n;
    snprintf(path, sizeof path, "%s/mel.f32", dir);
    float *mel = read_f32(path, &n);
    assert_int_equal(n, (size_t)c->n_mels * 2 * c->max_pos);
    snprintf(path, sizeof path, "%s/hidden.f32", dir);
    float *want_h = read_f32(path, &n);
    assert_int_equal(n, (size_t)tokens * c->d);
    snprintf(path, sizeof path, "%s/features.f32", dir);
    float *want_f = read_f32(path, &n);
    assert_int_equal(n, (size_t)tokens * c->d_text);
    float *h = malloc(sizeof(float) * (size_t)tokens * c->d);
    float *f = malloc(sizeof(float) * (size_t)tokens * c->d_text);
    hr_pool *pool = hr_pool_new(2);
    hr_error err = {0};
    if (hr_audio_enc_encode(a, pool, mel, frames, f, h, &err))
        fail_msg("%s", err.msg);
    double dh = max_diff(h, want_h, (size_t)tokens * c->d);
    double df = max_diff(f, want_f, (size_t)tokens * c->d_text);
    printf("encoder vs torch ops (%d frames, %d tokens): hidden max |diff| %.3g, features %.3g\n",
           frames, tokens, dh, df);
    assert_true(dh <= 1e-4 && df <= 1e-4);
    assert_int_equal(hr_audio_enc_encode(a, pool, mel, 2, f, h, &err), HR_EINVAL);
    hr_pool_free(pool);
    free(h);
    free(f);
    free(mel);
    free(want_h);
    free(want_f);
    hr_audio_enc_free(a);
    hr_weights_close(w);
    json_decref(ref);
}

/* ---- transformers' fixture (GPU machine) --------------------------------------------------- */

static json_t *hf_ref(char *dir, size_t dn) {
    snprintf(dir, dn, "%s/tests/fixtures/audio/qwen2_audio", root);
    char path[1200];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    return json_load_file(path, 0, NULL);
}

static float *fixture_f32(const char *dir, const json_t *o, size_t *n) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(o, "file")));
    return read_f32(path, n);
}

static void test_hf_mel_and_encoder(void **state) {
    (void)state;
    char dir[1100];
    json_t *ref = hf_ref(dir, sizeof dir);
    if (!ref)
        skip(); /* tools/refgen/audio_qwen2.py on the GPU machine */
    char mdir[1200];
    snprintf(mdir, sizeof mdir, "%s/model", dir);
    hr_model *m = NULL;
    hr_error err = {0};
    if (hr_model_open(&m, mdir, &err))
        fail_msg("%s", err.msg);
    assert_non_null(m->mm_audio);
    const hr_mel_cfg *mc = &m->mm_audio->mel;
    const hr_audio_enc_cfg *c = hr_audio_enc_config(m->mm_audio->tower);
    size_t F = hr_mel_frames(mc), i;
    json_t *clip;
    hr_pool *pool = hr_pool_new(2);
    double w_np = 0, w_pt = 0, w_h = 0, w_f = 0;
    json_array_foreach(json_object_get(ref, "clips"), i, clip) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(clip, "file")));
        char *bytes = NULL;
        size_t nb = 0;
        hr_audio au;
        if (hr_file_read(path, &bytes, &nb, &err) ||
            hr_wav_decode((const uint8_t *)bytes, nb, 30.0, &au, &err))
            fail_msg("%s", err.msg);
        assert_int_equal(au.n, json_integer_value(json_object_get(clip, "samples")));
        float *mel = malloc(sizeof(float) * (size_t)mc->n_mels * F);
        int valid = 0;
        if (hr_mel_compute(mc, au.pcm, au.n, mel, &valid, &err))
            fail_msg("%s", err.msg);
        assert_int_equal(valid, json_integer_value(json_object_get(clip, "frames")));
        size_t stored = (size_t)json_integer_value(json_object_get(clip, "stored")), n;
        float *full_pt = malloc(sizeof(float) * (size_t)mc->n_mels * F);
        for (int k = 0; k < 2; k++) {
            float *want = fixture_f32(dir, json_object_get(clip, k ? "mel_pt" : "mel_np"), &n);
            float pad = (float)json_real_value(json_object_get(clip, k ? "pad_value_pt" : "pad_value_np"));
            assert_int_equal(n, (size_t)mc->n_mels * stored);
            double worst = 0;
            for (int r = 0; r < mc->n_mels; r++)
                for (size_t t = 0; t < F; t++) {
                    float v = t < stored ? want[(size_t)r * stored + t] : pad;
                    if (k)
                        full_pt[(size_t)r * F + t] = v;
                    worst = fmax(worst, fabs((double)mel[(size_t)r * F + t] - v));
                }
            if (k)
                w_pt = fmax(w_pt, worst);
            else
                w_np = fmax(w_np, worst);
            free(want);
        }
        /* the encoder from the processor's own features */
        int tokens = (int)json_integer_value(json_object_get(clip, "tokens"));
        float *h = malloc(sizeof(float) * (size_t)tokens * c->d);
        float *f = malloc(sizeof(float) * (size_t)tokens * c->d_text);
        if (hr_audio_enc_encode(m->mm_audio->tower, pool, full_pt, valid, f, h, &err))
            fail_msg("%s", err.msg);
        float *wh = fixture_f32(dir, json_object_get(clip, "audio_hidden"), &n);
        assert_int_equal(n, (size_t)tokens * c->d);
        float *wf = fixture_f32(dir, json_object_get(clip, "audio_features"), &n);
        assert_int_equal(n, (size_t)tokens * c->d_text);
        w_h = fmax(w_h, max_diff(h, wh, (size_t)tokens * c->d));
        w_f = fmax(w_f, max_diff(f, wf, (size_t)tokens * c->d_text));
        free(wh);
        free(wf);
        free(h);
        free(f);
        free(full_pt);
        free(mel);
        free(bytes);
        hr_audio_deinit(&au);
    }
    printf("transformers: mel max |diff| %.3g (numpy path), %.3g (torch path); encoder rows "
           "%.3g, projector rows %.3g\n", w_np, w_pt, w_h, w_f);
    assert_true(w_np <= 2e-6 && w_pt <= 5e-5 && w_h <= 1e-4 && w_f <= 1e-4);
    hr_pool_free(pool);
    hr_model_free(m);
    json_decref(ref);
}

static void test_hf_greedy(void **state) {
    (void)state;
    char dir[1100], path[1400];
    json_t *ref = hf_ref(dir, sizeof dir);
    if (!ref)
        skip();
    if (!json_is_array(json_object_get(ref, "greedy"))) {
        printf("skip: %s/ref.json has no greedy tokens\n", dir);
        json_decref(ref);
        skip();
    }
    snprintf(path, sizeof path, "%s/model", dir);
    hr_model *m = NULL;
    hr_error err = {0};
    if (hr_model_open(&m, path, &err))
        fail_msg("%s", err.msg);
    const hr_mel_cfg *mc = &m->mm_audio->mel;
    size_t F = hr_mel_frames(mc);
    const json_t *pj = json_object_get(ref, "prompt"), *greedy = json_object_get(ref, "greedy");
    int n = (int)json_array_size(pj), n_gen = (int)json_array_size(greedy);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n);
    for (int t = 0; t < n; t++)
        prompt[t] = (int32_t)json_integer_value(json_array_get(pj, (size_t)t));
    /* the processor's features (torch path) where each clip's tokens start */
    hr_req_image clips[2];
    float *mel[2];
    int k = 0;
    for (int t = 0; t < n && k < 2; t++) {
        if (prompt[t] != m->mm_audio->audio_token || (t && prompt[t - 1] == prompt[t]))
            continue;
        const json_t *c = json_array_get(json_object_get(ref, "clips"), (size_t)k);
        size_t stored = (size_t)json_integer_value(json_object_get(c, "stored")), got;
        float *part = fixture_f32(dir, json_object_get(c, "mel_pt"), &got);
        float pad = (float)json_real_value(json_object_get(c, "pad_value_pt"));
        mel[k] = malloc(sizeof(float) * (size_t)mc->n_mels * F);
        for (int r = 0; r < mc->n_mels; r++)
            for (size_t s = 0; s < F; s++)
                mel[k][(size_t)r * F + s] = s < stored ? part[(size_t)r * stored + s] : pad;
        free(part);
        clips[k] = (hr_req_image){.pixels = mel[k], .start = t,
                                  .gh = (int)json_integer_value(json_object_get(c, "frames"))};
        memset(clips[k].hash, 0x50 + k, 16);
        k++;
    }
    assert_int_equal(k, 2);
    hr_engine *e;
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 512, .prefill_chunk = 16};
    assert_int_equal(hr_engine_new(&e, m, &o, &err), 0);
    hr_req_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = n_gen, .images = clips,
                       .n_images = 2};
    hr_sampler_params_default(&p.sampler);
    for (int round = 0; round < 2; round++) {
        hr_request *r[2];
        for (int i = 0; i < 2; i++)
            if (hr_request_new(&r[i], e, &p, &err) || hr_engine_submit(e, r[i], &err))
                fail_msg("%s", err.msg);
        double worst = 0;
        for (int i = 0; i < 2; i++) {
            for (int s = 0; s < n_gen; s++) {
                hr_step st;
                if (hr_request_wait(r[i], s, &st, 20000) != 1)
                    fail_msg("round %d request %d step %d: no token", round, i, s);
                const json_t *g = json_array_get(greedy, (size_t)s);
                int want = (int)json_integer_value(json_object_get(g, "token"));
                if (st.token != want)
                    fail_msg("round %d request %d step %d: %d, transformers %d", round, i, s,
                             st.token, want);
                worst = fmax(worst, fabs(st.logprob - json_real_value(json_object_get(g, "logprob"))));
            }
            if (round)
                assert_true(hr_request_cached_tokens(r[i]) >= 16);
            hr_request_release(r[i]);
        }
        printf("transformers greedy, %s: %d tokens equal, logprobs max |diff| %g\n",
               round ? "from the prompt cache" : "batched", n_gen, worst);
        assert_true(worst <= 1e-4);
    }
    hr_engine_free(e);
    free(mel[0]);
    free(mel[1]);
    free(prompt);
    hr_model_free(m);
    json_decref(ref);
}

int main(void) {
    const char *r = getenv("HEARTH_ROOT");
    snprintf(root, sizeof root, "%s", r ? r : ".");
    char path[1200];
    snprintf(path, sizeof path, "%s/tests/fixtures/audio/qwen2_audio/ref.json", root);
    bool have = hr_file_exists(path);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_encoder_torch),
        cmocka_unit_test(test_hf_mel_and_encoder),
        cmocka_unit_test(test_hf_greedy),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (!rc && !have) {
        printf("skip: the transformers parity part needs tests/fixtures/audio/qwen2_audio "
               "(tools/refgen/audio_qwen2.py, run with transformers 5.17 on the GPU machine: "
               "pending, tools/refgen/README.md); the local checks passed\n");
        return 77;
    }
    return rc;
}
