/* Images through the engine, on a Gemma-3 model made here: the gemma3_text
 * fixture's text model and a random SigLIP tower (1 layer, 16x16 images,
 * 4x4 patches pooled to 4 image tokens), config.json in the
 * Gemma3ForConditionalGeneration shape.
 *
 * - the engine's output with an image equals the model layer's (features
 *   from hr_vision_encode at the image tokens, the image bidirectional,
 *   greedy decoding by hand), with a prefill step that holds the prompt
 *   and with one that would split the image (8 tokens a step);
 * - the prompt cache: the same prompt and image again reuses the prefix
 *   (whole blocks holding image tokens) with the same output, and the
 *   features come from the engine's cache; the same prompt with another
 *   image reuses only what is before the image;
 * - errors: image tokens without an image, an image on a text model;
 * - the oracles (tests/fixtures/vision/gemma3 and qwen2_5_vl, transformers
 *   5.17; skipped while absent): the prompt with two images through the
 *   engine, two requests batched together, the greedy tokens equal to
 *   transformers' and their logprobs within 1e-4; the same again from the
 *   prompt cache (blocks holding image tokens keyed by the image hash)
 *   with the same tokens and logprobs.
 * With --device NAME (tests/device_arg.h) the text models run on that
 * backend (test_engine_vision_cuda: the GPU; the vision towers stay on the
 * host), against the same oracles and bounds, and the two fixtures' models
 * (Qwen2.5-VL's too, whose transformers prompt references are pending:
 * its M-RoPE) against the CPU: the same greedy tokens, logprobs within
 * 1e-4. */
#include "core/error.h"
#include "core/file.h"
#include "engine/engine.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/model.h"
#include "model/vision.h"

#include "../device_arg.h"

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
#include <unistd.h>

#define IMG_TOK 502
#define MM 4
#define S 16
#define D 64 /* the text model's width */
#define N_GEN 6

static char g_dir[256];
static hr_model *g_mm, *g_text;
static const char *g_device; /* --device NAME: the backend under test */

/* ---- the model -------------------------------------------------------------------- */

typedef struct tw {
    const char *name;
    int64_t shape[4];
    int ndim;
    float mean, std;
} tw;

static uint64_t g_rng = 88172645463325252ull;
static float rnd(void) { /* uniform (-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void write_safetensors(const char *path, const tw *t, int n) {
    char *hdr = malloc(1 << 16);
    size_t hl = 0, off = 0;
    hl += (size_t)sprintf(hdr + hl, "{");
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        hl += (size_t)sprintf(hdr + hl, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", i ? "," : "",
                              t[i].name);
        for (int k = 0; k < t[i].ndim; k++) {
            hl += (size_t)sprintf(hdr + hl, "%s%lld", k ? "," : "", (long long)t[i].shape[k]);
            numel *= t[i].shape[k];
        }
        hl += (size_t)sprintf(hdr + hl, "],\"data_offsets\":[%zu,%zu]}", off, off + 4 * (size_t)numel);
        off += 4 * (size_t)numel;
    }
    hl += (size_t)sprintf(hdr + hl, "}");
    while (hl % 8)
        hdr[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t le = hl;
    fwrite(&le, 8, 1, f);
    fwrite(hdr, 1, hl, f);
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int k = 0; k < t[i].ndim; k++)
            numel *= t[i].shape[k];
        for (int64_t j = 0; j < numel; j++) {
            float v = t[i].mean + t[i].std * rnd();
            fwrite(&v, 4, 1, f);
        }
    }
    fclose(f);
    free(hdr);
}

static int setup(void **state) {
    (void)state;
    const char *root = getenv("HEARTH_ROOT");
    snprintf(g_dir, sizeof g_dir, "/tmp/hearth-vision-XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    char src[1024], dst[512];
    snprintf(src, sizeof src, "%s/tests/fixtures/models/gemma3_text/model.safetensors", root);
    snprintf(dst, sizeof dst, "%s/model.safetensors", g_dir);
    assert_int_equal(symlink(src, dst), 0);
    snprintf(src, sizeof src, "%s/tests/fixtures/models/gemma3_text/config.json", root);
    json_t *tc = json_load_file(src, 0, NULL);
    assert_non_null(tc);
    json_t *cfg = json_pack("{s:s,s:o,s:{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:s},s:i,s:i,s:i,s:i}",
                            "model_type", "gemma3", "text_config", tc, "vision_config",
                            "model_type", "siglip_vision_model", "hidden_size", 8,
                            "intermediate_size", 16, "num_hidden_layers", 1,
                            "num_attention_heads", 2, "image_size", S, "patch_size", 4,
                            "layer_norm_eps", 1e-6, "hidden_act", "gelu_pytorch_tanh",
                            "mm_tokens_per_image", MM, "boi_token_index", 500,
                            "eoi_token_index", 501, "image_token_index", IMG_TOK);
    snprintf(dst, sizeof dst, "%s/config.json", g_dir);
    assert_int_equal(json_dump_file(cfg, dst, 0), 0);
    json_decref(cfg);
    const char *P = "vision_tower.vision_model.";
    char names[20][128];
    tw t[20];
    int n = 0;
#define W(nm, m, s, ...)                                                                  \
    do {                                                                                  \
        snprintf(names[n], sizeof names[n], "%s%s", P, nm);                               \
        int64_t sh[] = {__VA_ARGS__};                                                     \
        t[n] = (tw){.name = names[n], .ndim = (int)(sizeof sh / sizeof sh[0]), .mean = m, \
                    .std = s};                                                            \
        memcpy(t[n].shape, sh, sizeof sh);                                                \
        n++;                                                                              \
    } while (0)
    W("embeddings.patch_embedding.weight", 0, 0.2f, 8, 3, 4, 4);
    W("embeddings.patch_embedding.bias", 0, 0.1f, 8);
    W("embeddings.position_embedding.weight", 0, 0.3f, 16, 8);
    W("encoder.layers.0.layer_norm1.weight", 1, 0.2f, 8);
    W("encoder.layers.0.layer_norm1.bias", 0, 0.1f, 8);
    W("encoder.layers.0.layer_norm2.weight", 1, 0.2f, 8);
    W("encoder.layers.0.layer_norm2.bias", 0, 0.1f, 8);
    W("encoder.layers.0.self_attn.q_proj.weight", 0, 0.5f, 8, 8);
    W("encoder.layers.0.self_attn.q_proj.bias", 0, 0.1f, 8);
    W("encoder.layers.0.self_attn.k_proj.weight", 0, 0.5f, 8, 8);
    W("encoder.layers.0.self_attn.k_proj.bias", 0, 0.1f, 8);
    W("encoder.layers.0.self_attn.v_proj.weight", 0, 0.5f, 8, 8);
    W("encoder.layers.0.self_attn.v_proj.bias", 0, 0.1f, 8);
    W("encoder.layers.0.self_attn.out_proj.weight", 0, 0.5f, 8, 8);
    W("encoder.layers.0.self_attn.out_proj.bias", 0, 0.1f, 8);
    W("encoder.layers.0.mlp.fc1.weight", 0, 0.5f, 16, 8);
    W("encoder.layers.0.mlp.fc1.bias", 0, 0.1f, 16);
    W("encoder.layers.0.mlp.fc2.weight", 0, 0.3f, 8, 16);
    W("encoder.layers.0.mlp.fc2.bias", 0, 0.1f, 8);
    W("post_layernorm.weight", 1, 0.2f, 8);
#undef W
    tw all[24];
    memcpy(all, t, sizeof(tw) * (size_t)n);
    all[n++] = (tw){.name = "vision_tower.vision_model.post_layernorm.bias", .shape = {8},
                    .ndim = 1, .std = 0.1f};
    all[n++] = (tw){.name = "multi_modal_projector.mm_soft_emb_norm.weight", .shape = {8},
                    .ndim = 1, .std = 0.2f};
    all[n++] = (tw){.name = "multi_modal_projector.mm_input_projection_weight",
                    .shape = {8, D}, .ndim = 2, .std = 0.4f};
    snprintf(dst, sizeof dst, "%s/vision.safetensors", g_dir);
    write_safetensors(dst, all, n);
    hr_error e = {0};
    if (hr_model_open_on(&g_mm, g_dir, g_device, &e))
        fail_msg("%s", e.msg);
    snprintf(src, sizeof src, "%s/tests/fixtures/models/gemma3_text", root);
    assert_int_equal(hr_model_open_on(&g_text, src, g_device, &e), 0);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    hr_model_free(g_mm);
    hr_model_free(g_text);
    char p[512];
    const char *files[] = {"model.safetensors", "vision.safetensors", "config.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, files[i]);
        unlink(p);
    }
    rmdir(g_dir);
    return 0;
}

/* ---- helpers --------------------------------------------------------------------------- */

static void pixels(float *px, int salt) {
    for (int i = 0; i < 3 * S * S; i++)
        px[i] = (float)((i * 37 + salt * 11) % 101) / 50.0f - 1.0f;
}

/* prompt: n tokens, the image's MM tokens at start */
static int make_prompt(int32_t *p, int n, int start) {
    for (int i = 0; i < n; i++)
        p[i] = i == 0 ? 2 : 20 + (i * 7) % 400;
    for (int i = 0; i < MM; i++)
        p[start + i] = IMG_TOK;
    return n;
}

/* the model layer by hand: greedy tokens */
static void by_hand(const int32_t *prompt, int n, int start, const float *px, int32_t *out) {
    hr_error e = {0};
    const hr_vision_cfg *vc = hr_vision_config(g_mm->mm->tower);
    hr_pool *pool = hr_pool_new(2);
    float *feat = malloc(sizeof(float) * MM * D);
    assert_int_equal(hr_vision_encode(g_mm->mm->tower, pool, px, feat, NULL, &e), 0);
    assert_int_equal(vc->d_text, D);
    hr_kv kv;
    hr_kv_fmt fmt = {.dtype = HR_DTYPE_F32};
    assert_int_equal(hr_kv_init_fmt(&kv, g_mm->be, &g_mm->hp, &fmt, 8, &e), 0);
    hr_fwd *f;
    assert_int_equal(hr_fwd_new(&f, g_mm, 128, 1, 256, 2, &e), 0);
    int32_t blocks[8], tok[128], pos[128], seq[128] = {0}, row[128], end[128];
    uint8_t want[128] = {0};
    for (int b = 0; b < 8; b++)
        blocks[b] = hr_kv_alloc(&kv);
    for (int t = 0; t < n; t++) {
        tok[t] = prompt[t];
        pos[t] = t;
        bool img = t >= start && t < start + MM;
        row[t] = img ? t - start : -1;
        end[t] = img ? start + MM : t + 1;
    }
    want[n - 1] = 1;
    int V = g_mm->hp.n_vocab, len = n;
    float *logits = malloc(sizeof(float) * (size_t)V);
    hr_seq_blocks sb = {blocks, 8, n, 0};
    hr_batch b = {.n_tokens = n, .token = tok, .pos = pos, .seq = seq, .logits = want,
                  .n_seqs = 1, .seqs = &sb, .embd = feat, .embd_row = row, .attn_end = end};
    assert_int_equal(hr_forward(f, &kv, &b, logits, &e), 0);
    for (int k = 0; k < N_GEN; k++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best])
                best = v;
        out[k] = best;
        int32_t t1 = best, p1 = len++;
        uint8_t w1 = 1;
        hr_seq_blocks s1 = {blocks, 8, len, 0};
        hr_batch b1 = {.n_tokens = 1, .token = &t1, .pos = &p1, .seq = seq, .logits = &w1,
                       .n_seqs = 1, .seqs = &s1};
        assert_int_equal(hr_forward(f, &kv, &b1, logits, &e), 0);
    }
    free(logits);
    free(feat);
    hr_fwd_free(f);
    hr_kv_deinit(&kv);
    hr_pool_free(pool);
}

static hr_request *submit(hr_engine *e, const int32_t *prompt, int n, int start,
                          const float *px, uint8_t hash_salt) {
    hr_req_image im = {.pixels = px, .start = start};
    memset(im.hash, hash_salt, 16);
    hr_req_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = N_GEN, .images = &im,
                       .n_images = 1};
    hr_sampler_params_default(&p.sampler);
    hr_request *r;
    hr_error err = {0};
    if (hr_request_new(&r, e, &p, &err) || hr_engine_submit(e, r, &err))
        fail_msg("%s", err.msg);
    return r;
}

static void collect(hr_request *r, int32_t *out, float *lp) {
    hr_step s;
    for (int k = 0; k < N_GEN; k++) {
        int rc = hr_request_wait(r, k, &s, 10000);
        if (rc != 1) {
            hr_error m = {0};
            hr_request_finish(r, &m);
            fail_msg("step %d: wait %d (%s)", k, rc, m.msg);
        }
        out[k] = s.token;
        if (lp)
            lp[k] = s.logprob;
    }
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_engine_equals_model(void **state) {
    (void)state;
    int32_t prompt[64], want[N_GEN], got[N_GEN];
    float px[3 * S * S];
    pixels(px, 1);
    int n = make_prompt(prompt, 20, 6);
    by_hand(prompt, n, 6, px, want);
    int chunks[] = {64, 8}; /* 8: a step would end inside the image (6..9) */
    for (int c = 0; c < 2; c++) {
        hr_engine *e;
        hr_error err = {0};
        hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 128,
                            .prefill_chunk = chunks[c], .cache_blocks = -1};
        assert_int_equal(hr_engine_new(&e, g_mm, &o, &err), 0);
        hr_request *r = submit(e, prompt, n, 6, px, 1);
        collect(r, got, NULL);
        hr_request_release(r);
        hr_engine_free(e);
        for (int k = 0; k < N_GEN; k++)
            if (got[k] != want[k])
                fail_msg("prefill chunk %d: token %d is %d, by hand %d", chunks[c], k, got[k],
                         want[k]);
    }
}

static void test_prompt_cache(void **state) {
    (void)state;
    int32_t prompt[64], a[N_GEN], b[N_GEN], c[N_GEN];
    float la[N_GEN], lb[N_GEN], lc[N_GEN];
    float px[3 * S * S], py[3 * S * S];
    pixels(px, 1);
    pixels(py, 2);
    int n = make_prompt(prompt, 45, 30); /* the image spans the block boundary at 32 */
    hr_engine *e;
    hr_error err = {0};
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 128, .prefill_chunk = 64};
    assert_int_equal(hr_engine_new(&e, g_mm, &o, &err), 0);
    hr_request *r = submit(e, prompt, n, 30, px, 1);
    collect(r, a, la);
    assert_int_equal(hr_request_cached_tokens(r), 0);
    hr_request_release(r);
    r = submit(e, prompt, n, 30, px, 1); /* again: the prefix with the image is reused */
    collect(r, b, lb);
    int cached = hr_request_cached_tokens(r);
    hr_request_release(r);
    assert_true(cached >= 32);
    assert_memory_equal(a, b, sizeof a);
    for (int k = 0; k < N_GEN; k++)
        assert_true(fabsf(la[k] - lb[k]) < 1e-5f);
    r = submit(e, prompt, n, 30, py, 2); /* another image: only what is before it */
    collect(r, c, lc);
    int cached2 = hr_request_cached_tokens(r);
    hr_request_release(r);
    assert_true(cached2 <= 30);
    assert_true(fabsf(lc[0] - la[0]) > 1e-6f || c[0] != a[0]);
    hr_engine_stats st;
    hr_engine_stats_get(e, &st);
    assert_int_equal(st.images_encoded, 2);
    assert_int_equal(st.images_cached, 1);
    hr_engine_free(e);
    /* without the cache the same output: the reuse was exact */
    int32_t d[N_GEN];
    o.cache_blocks = -1;
    assert_int_equal(hr_engine_new(&e, g_mm, &o, &err), 0);
    r = submit(e, prompt, n, 30, px, 1);
    collect(r, d, NULL);
    hr_request_release(r);
    hr_engine_free(e);
    assert_memory_equal(a, d, sizeof a);
}

static void test_errors(void **state) {
    (void)state;
    int32_t prompt[64];
    float px[3 * S * S];
    pixels(px, 1);
    int n = make_prompt(prompt, 20, 6);
    hr_engine *e;
    hr_error err = {0};
    hr_engine_opts o = {.n_threads = 1, .max_batch = 1, .n_ctx = 128};
    assert_int_equal(hr_engine_new(&e, g_mm, &o, &err), 0);
    hr_req_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = 2};
    hr_sampler_params_default(&p.sampler);
    hr_request *r = NULL;
    assert_int_equal(hr_request_new(&r, e, &p, &err), HR_EINVAL); /* tokens, no image */
    assert_non_null(strstr(err.msg, "without an image"));
    hr_req_image im = {.pixels = px, .start = 5}; /* not where the tokens are */
    p.images = &im;
    p.n_images = 1;
    assert_int_equal(hr_request_new(&r, e, &p, &err), HR_EINVAL);
    im.start = 18; /* past the prompt's end */
    assert_int_equal(hr_request_new(&r, e, &p, &err), HR_EINVAL);
    hr_engine_free(e);
    assert_int_equal(hr_engine_new(&e, g_text, &o, &err), 0);
    im.start = 6;
    assert_int_equal(hr_request_new(&r, e, &p, &err), HR_EINVAL);
    assert_non_null(strstr(err.msg, "does not take images"));
    hr_engine_free(e);
}

static float *read_all(const char *path, size_t *n) {
    char *buf = NULL;
    size_t len = 0;
    assert_int_equal(hr_file_read(path, &buf, &len, NULL), 0);
    *n = len / sizeof(float);
    return (float *)buf;
}

/* the fixture's prompt (n tokens, at most 256) and its two images'
 * pixel_values where their tokens start (px: the caller frees them) */
static int load_prompt(const char *dir, const json_t *ref, int32_t image_token, int32_t *prompt,
                       hr_req_image *ims, float **px) {
    char path[1200];
    const json_t *pj = json_object_get(ref, "prompt");
    int n = (int)json_array_size(pj);
    assert_true(n <= 256);
    for (int t = 0; t < n; t++)
        prompt[t] = (int32_t)json_integer_value(json_array_get(pj, (size_t)t));
    /* the images' pixel_values (bit for bit ours: test_vision) where their tokens start */
    int k = 0;
    for (int t = 0; t < n && k < 2; t++) {
        if (prompt[t] != image_token || (t && prompt[t - 1] == image_token))
            continue;
        const json_t *im = json_array_get(json_object_get(ref, "images"),
                                          (size_t)json_integer_value(json_array_get(
                                              json_object_get(ref, "prompt_images"), (size_t)k)));
        snprintf(path, sizeof path, "%s/%s", dir,
                 json_string_value(json_object_get(json_object_get(im, "pixel_values"), "file")));
        size_t np;
        px[k] = read_all(path, &np);
        ims[k] = (hr_req_image){.pixels = px[k], .start = t};
        const json_t *g = json_object_get(im, "grid_thw"); /* Qwen2.5-VL */
        if (g) {
            ims[k].gh = (int)json_integer_value(json_array_get(g, 1));
            ims[k].gw = (int)json_integer_value(json_array_get(g, 2));
        }
        memset(ims[k].hash, 0x40 + k, 16);
        k++;
    }
    assert_int_equal(k, 2);
    return n;
}

/* tests/fixtures/vision/<name> into dir (n bytes) and its ref.json;
 * skipped while absent (tools/refgen/vision*.py on the GPU machine) */
static json_t *fixture(const char *name, char *dir, size_t n) {
    const char *root = getenv("HEARTH_ROOT");
    char path[1200];
    snprintf(dir, n, "%s/tests/fixtures/vision/%s", root ? root : ".", name);
    snprintf(path, sizeof path, "%s/ref.json", dir);
    json_t *ref = json_load_file(path, 0, NULL);
    if (!ref)
        skip();
    return ref;
}

/* the fixture's model on `device` */
static hr_model *fixture_model(const char *dir, const char *device) {
    char path[1200];
    snprintf(path, sizeof path, "%s/model", dir);
    hr_model *m = NULL;
    hr_error err = {0};
    if (hr_model_open_on(&m, path, device, &err))
        fail_msg("%s", err.msg);
    return m;
}

/* An engine on m and the fixture's prompt with its two images, n_gen
 * greedy tokens a request */
typedef struct vrun {
    hr_engine *e;
    hr_req_params p;
    int32_t prompt[256];
    hr_req_image ims[2];
    float *px[2];
} vrun;

static void vrun_start(vrun *v, hr_model *m, const char *dir, const json_t *ref, int chunk,
                       int n_gen) {
    int32_t image_token = m->mm ? m->mm->image_token : m->mm_qwen->image_token;
    int n = load_prompt(dir, ref, image_token, v->prompt, v->ims, v->px);
    hr_error err = {0};
    hr_engine_opts o = {.n_threads = 2, .max_batch = 2, .n_ctx = 256, .prefill_chunk = chunk};
    assert_int_equal(hr_engine_new(&v->e, m, &o, &err), 0);
    v->p = (hr_req_params){.prompt = v->prompt, .n_prompt = n, .max_tokens = n_gen,
                           .images = v->ims, .n_images = 2};
    hr_sampler_params_default(&v->p.sampler);
}

static hr_request *vrun_submit(vrun *v) {
    hr_request *r;
    hr_error err = {0};
    if (hr_request_new(&r, v->e, &v->p, &err) || hr_engine_submit(v->e, r, &err))
        fail_msg("%s", err.msg);
    return r;
}

static void vrun_end(vrun *v) {
    hr_engine_free(v->e);
    free(v->px[0]);
    free(v->px[1]);
}

/* the fixture under tests/fixtures/vision/<name> through the engine */
static void oracle(const char *name, int min_cached, int chunk) {
    char dir[1024];
    json_t *ref = fixture(name, dir, sizeof dir);
    if (!json_object_get(ref, "greedy")) {
        printf("skip: the %s prompt references are %s\n", name,
               json_string_value(json_object_get(ref, "text_references")));
        json_decref(ref);
        skip();
    }
    hr_model *m = fixture_model(dir, g_device);
    const json_t *greedy = json_object_get(ref, "greedy");
    int n_gen = (int)json_array_size(greedy);
    assert_true(n_gen <= 16);
    vrun v;
    vrun_start(&v, m, dir, ref, chunk, n_gen);
    for (int round = 0; round < 2; round++) {
        hr_request *r[2] = {vrun_submit(&v), vrun_submit(&v)}; /* two at once: one batch */
        double worst = 0;
        for (int i = 0; i < 2; i++) {
            for (int s = 0; s < n_gen; s++) {
                hr_step st;
                if (hr_request_wait(r[i], s, &st, 20000) != 1)
                    fail_msg("%s round %d request %d step %d: no token", name, round, i, s);
                const json_t *g = json_array_get(greedy, (size_t)s);
                int want = (int)json_integer_value(json_object_get(g, "token"));
                if (st.token != want)
                    fail_msg("%s round %d request %d step %d: %d, transformers %d", name, round,
                             i, s, st.token, want);
                double d = fabs(st.logprob - json_real_value(json_object_get(g, "logprob")));
                worst = fmax(worst, d);
            }
            if (round)
                assert_true(hr_request_cached_tokens(r[i]) >= min_cached);
            hr_request_release(r[i]);
        }
        printf("oracle %s on %s, %s: %d tokens equal, logprobs max |diff| %g\n", name,
               m->be->name, round ? "from the prompt cache" : "batched", n_gen, worst);
        assert_true(worst <= 1e-4);
    }
    vrun_end(&v);
    hr_model_free(m);
    json_decref(ref);
}

static void test_oracle(void **state) {
    (void)state;
    oracle("gemma3", 32, 64); /* past the first image */
}

/* n_gen greedy tokens and their logprobs of the fixture's prompt with its
 * two images, one request through the engine on m */
static void greedy_run(hr_model *m, const char *dir, const json_t *ref, int chunk, int n_gen,
                       int32_t *tok, float *lp) {
    vrun v;
    vrun_start(&v, m, dir, ref, chunk, n_gen);
    hr_request *r = vrun_submit(&v);
    for (int s = 0; s < n_gen; s++) {
        hr_step st;
        if (hr_request_wait(r, s, &st, 20000) != 1)
            fail_msg("%s on %s step %d: no token", dir, m->be->name, s);
        tok[s] = st.token;
        lp[s] = st.logprob;
    }
    hr_request_release(r);
    vrun_end(&v);
}

/* --device only: the fixture's model (its weights, whether or not its
 * transformers prompt references are there) on the device against the
 * CPU: the same greedy tokens, logprobs within 1e-4 */
static void vs_cpu(const char *name, int chunk) {
    if (!strcmp(g_device, "cpu"))
        skip();
    char dir[1024];
    json_t *ref = fixture(name, dir, sizeof dir);
    hr_model *mc = fixture_model(dir, "cpu"), *md = fixture_model(dir, g_device);
    int32_t tc[8], td[8];
    float lc[8], ld[8];
    greedy_run(mc, dir, ref, chunk, 8, tc, lc);
    greedy_run(md, dir, ref, chunk, 8, td, ld);
    double worst = 0;
    for (int s = 0; s < 8; s++) {
        if (td[s] != tc[s])
            fail_msg("%s step %d: %d on %s, %d on the CPU", name, s, td[s], md->be->name, tc[s]);
        worst = fmax(worst, fabs((double)ld[s] - lc[s]));
    }
    printf("%s on %s vs the CPU: 8 tokens equal, logprobs max |diff| %g\n", name, md->be->name,
           worst);
    assert_true(worst <= 1e-4);
    hr_model_free(mc);
    hr_model_free(md);
    json_decref(ref);
}

static void test_vs_cpu(void **state) {
    (void)state;
    vs_cpu("gemma3", 64);
}

static void test_vs_cpu_qwen(void **state) {
    (void)state;
    vs_cpu("qwen2_5_vl", 16); /* M-RoPE; images split over prefill steps */
}

static void test_oracle_qwen(void **state) {
    (void)state;
    /* past both images: the M-RoPE delta carries on; prefill steps of 16
     * tokens split the images (causal: allowed) */
    oracle("qwen2_5_vl", 64, 16);
}

/* test_engine_vision [--device NAME] */
int main(int argc, char **argv) {
    if (!hr_test_device(argc, argv, &g_device))
        return 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_equals_model),
        cmocka_unit_test(test_prompt_cache),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_oracle),
        cmocka_unit_test(test_oracle_qwen),
        cmocka_unit_test(test_vs_cpu),
        cmocka_unit_test(test_vs_cpu_qwen),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
