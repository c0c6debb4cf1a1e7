/* A request's images in the engine (engine_int.h), and a Qwen2-Audio
 * model's audio clips the same way (hr_req_image: a clip's mel features
 * and its frame count): their spans of the prompt, their features (the vision tower's, computed once per image
 * identity and kept in a small LRU cache), the prompt cache's keys for
 * image tokens, and prefill chunks that keep an image in one step. */
#include "engine/engine_int.h"
#include "core/error.h"
#include "model/audio.h"
#include "model/vision.h"
#include "model/vision_qwen.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct hr__feat_entry {
    uint8_t hash[16];
    float *feat; /* [rows][d_model], or NULL: a free entry */
    size_t rows;
    long used;
} hr__feat_entry;

/* ---- the request's side (hr_request_new, any thread) ---------------------------------- */

/* Image i's token count and pixel floats under the model's image side;
 * HR_EINVAL for a Qwen2.5-VL grid the merge does not divide */
static int image_shape(const hr_model *m, const hr_req_image *im, int i, int *len, size_t *npx,
                       hr_error *err) {
    if (m->mm_audio) { /* a clip: its mel window, gh its valid frames */
        size_t frames = hr_mel_frames(&m->mm_audio->mel);
        *len = im->gh >= 1 && (size_t)im->gh <= frames ? hr_audio_enc_tokens(im->gh) : 0;
        *npx = (size_t)m->mm_audio->mel.n_mels * frames;
        if (*len < 1)
            return hr_err(err, HR_EINVAL, "audio %d: %d mel frames give no audio tokens (3 to "
                          "%zu do)", i, im->gh, frames);
        return 0;
    }
    if (m->mm) {
        *len = m->mm->mm_tokens;
        *npx = (size_t)3 * m->mm->proc.height * m->mm->proc.width;
        return 0;
    }
    const hr_vision_qwen_cfg *c = hr_vision_qwen_config(m->mm_qwen->tower);
    int mg = c->merge;
    if (im->gh < mg || im->gw < mg || im->gh % mg || im->gw % mg || im->gh > 4096 ||
        im->gw > 4096)
        return hr_err(err, HR_EINVAL, "image %d: a %dx%d patch grid is not whole %dx%d merges",
                      i, im->gh, im->gw, mg, mg);
    *len = (im->gh / mg) * (im->gw / mg);
    *npx = (size_t)im->gh * im->gw * c->channels * c->tpatch * c->patch * c->patch;
    return 0;
}

int hr__request_images(hr_request *r, const hr_engine *e, const hr_req_params *p,
                       hr_error *err) {
    const hr_model *m = e->m;
    if (!m->mm && !m->mm_qwen && !m->mm_audio)
        return p->n_images ? hr_err(err, HR_EINVAL, "the model does not take images") : 0;
    if (p->n_images < 0 || (p->n_images && !p->images))
        return hr_err(err, HR_EINVAL, "images: bad count");
    if (p->n_images && (p->embed || p->score_from))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: images in embedding or "
                      "prompt-scoring requests");
    if (p->n_images && m->mm_audio && m->be->device_mem) /* images: docs/gpu.md */
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet on %s: audio input (not "
                      "checked there)", m->be->name);
    int32_t image_token = m->mm         ? m->mm->image_token
                          : m->mm_qwen ? m->mm_qwen->image_token
                                       : m->mm_audio->audio_token;
    int prev = 0, rc;
    int lens[HR_REQ_IMAGES_MAX];
    size_t npx[HR_REQ_IMAGES_MAX];
    if (p->n_images > HR_REQ_IMAGES_MAX)
        return hr_err(err, HR_EINVAL, "images: at most %d a request", HR_REQ_IMAGES_MAX);
    for (int i = 0; i < p->n_images; i++) {
        if ((rc = image_shape(m, &p->images[i], i, &lens[i], &npx[i], err)))
            return rc;
        int s = p->images[i].start, L = lens[i];
        if (s < prev || s + L > p->n_prompt || !p->images[i].pixels)
            return hr_err(err, HR_EINVAL, "image %d: its %d tokens from %d are not inside the "
                          "prompt after the image before", i, L, s);
        for (int k = s; k < s + L; k++)
            if (p->prompt[k] != image_token)
                return hr_err(err, HR_EINVAL, "image %d: position %d is not the image token %d",
                              i, k, image_token);
        prev = s + L;
    }
    for (int k = 0, i = 0; k < p->n_prompt; k++) { /* no stray image tokens */
        if (i < p->n_images && k == p->images[i].start) {
            k += lens[i] - 1;
            i++;
        } else if (p->prompt[k] == image_token) {
            return hr_err(err, HR_EINVAL, "prompt position %d holds the image token without an "
                          "image", k);
        }
    }
    if (!p->n_images)
        return 0;
    r->images = calloc((size_t)p->n_images, sizeof *r->images);
    r->key = malloc((size_t)p->n_prompt * sizeof *r->key);
    if (!r->images || !r->key)
        return hr_err(err, HR_ENOMEM, "out of memory");
    r->n_images = p->n_images;
    memcpy(r->key, p->prompt, (size_t)p->n_prompt * sizeof *r->key);
    int row = 0;
    for (int i = 0; i < p->n_images; i++) {
        hr__req_img *im = &r->images[i];
        im->start = p->images[i].start;
        im->len = lens[i];
        im->row0 = row;
        im->gh = p->images[i].gh;
        im->gw = p->images[i].gw;
        im->n_pixels = npx[i];
        row += lens[i];
        memcpy(im->hash, p->images[i].hash, 16);
        if (!(im->pixels = malloc(npx[i] * sizeof(float))))
            return hr_err(err, HR_ENOMEM, "out of memory");
        memcpy(im->pixels, p->images[i].pixels, npx[i] * sizeof(float));
        /* the cache's key of token j of the image: above every vocabulary
         * (bit 30 set), from the image's identity and j */
        for (int j = 0; j < im->len; j++) {
            uint32_t h = (uint32_t)XXH3_64bits_withSeed(im->hash, 16, (uint64_t)j);
            r->key[im->start + j] = (int32_t)(0x40000000u | (h & 0x3fffffffu));
        }
    }
    if (m->mm_qwen) { /* M-RoPE: the images' rows and columns */
        int st[HR_REQ_IMAGES_MAX], lh[HR_REQ_IMAGES_MAX], lw[HR_REQ_IMAGES_MAX];
        int mg = hr_vision_qwen_config(m->mm_qwen->tower)->merge;
        for (int i = 0; i < p->n_images; i++) {
            st[i] = r->images[i].start;
            lh[i] = r->images[i].gh / mg;
            lw[i] = r->images[i].gw / mg;
        }
        if (!(r->rope3 = malloc((size_t)p->n_prompt * 3 * sizeof *r->rope3)))
            return hr_err(err, HR_ENOMEM, "out of memory");
        r->rope_delta =
            hr_vision_qwen_rope_pos(p->n_prompt, st, lh, lw, p->n_images, r->rope3) - p->n_prompt;
    }
    return 0;
}

void hr__request_images_free(hr_request *r) {
    for (int i = 0; i < r->n_images && r->images; i++)
        free(r->images[i].pixels);
    free(r->images);
    free(r->key);
    free(r->feat);
    free(r->rope3);
    r->rope3 = NULL;
    r->rope_delta = 0;
    r->images = NULL;
    r->key = NULL;
    r->feat = NULL;
    r->n_images = 0;
}

/* ---- features (engine thread) -------------------------------------------------------- */

int hr__engine_encode_images(hr_engine *e, hr_request *r, hr_error *err) {
    if (!r->n_images || r->feat)
        return 0;
    const hr_model *m = e->m;
    size_t d = (size_t)m->hp.d_model;
    const hr__req_img *last = &r->images[r->n_images - 1];
    if (!e->feat_cache && !(e->feat_cache = calloc(HR_FEAT_CACHE, sizeof *e->feat_cache)))
        return hr_err(err, HR_ENOMEM, "out of memory");
    if (!(r->feat = malloc((size_t)(last->row0 + last->len) * d * sizeof(float))))
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int i = 0; i < r->n_images; i++) {
        hr__req_img *im = &r->images[i];
        size_t n = (size_t)im->len * d;
        float *dst = r->feat + (size_t)im->row0 * d;
        hr__feat_entry *hit = NULL, *lru = &e->feat_cache[0];
        for (int k = 0; k < HR_FEAT_CACHE; k++) {
            hr__feat_entry *c = &e->feat_cache[k];
            if (c->feat && c->rows == (size_t)im->len && !memcmp(c->hash, im->hash, 16))
                hit = c;
            if (!c->feat || (lru->feat && c->used < lru->used))
                lru = c;
        }
        if (hit) {
            memcpy(dst, hit->feat, n * sizeof(float));
            hit->used = ++e->feat_clock;
            atomic_fetch_add(&e->st_img_cached, 1);
        } else {
            hr_pool *pool = hr_fwd_pool(e->fwd);
            int rc = m->mm         ? hr_vision_encode(m->mm->tower, pool, im->pixels, dst, NULL, err)
                     : m->mm_audio ? hr_audio_enc_encode(m->mm_audio->tower, pool, im->pixels,
                                                         im->gh, dst, NULL, err)
                                   : hr_vision_qwen_encode(m->mm_qwen->tower, pool, im->pixels,
                                                           im->gh, im->gw, dst, NULL, err);
            if (rc)
                return rc;
            atomic_fetch_add(&e->st_img_encoded, 1);
            float *keep = lru->feat && lru->rows == (size_t)im->len ? lru->feat
                                                                     : malloc(n * sizeof(float));
            if (keep) { /* (out of memory: only not cached) */
                if (keep != lru->feat)
                    free(lru->feat);
                memcpy(keep, dst, n * sizeof(float));
                lru->feat = keep;
                lru->rows = (size_t)im->len;
                memcpy(lru->hash, im->hash, 16);
                lru->used = ++e->feat_clock;
            }
        }
        free(im->pixels);
        im->pixels = NULL;
    }
    return 0;
}

void hr__feat_cache_free(hr_engine *e) {
    for (int k = 0; e->feat_cache && k < HR_FEAT_CACHE; k++)
        free(e->feat_cache[k].feat);
    free(e->feat_cache);
    e->feat_cache = NULL;
}

/* ---- spans --------------------------------------------------------------------------- */

int hr__image_end(const hr_engine *e, const hr_request *r, int p, int *row) {
    for (int i = 0; i < r->n_images; i++) {
        const hr__req_img *im = &r->images[i];
        if (p >= im->start && p < im->start + im->len) {
            *row = im->row0 + (p - im->start);
            return e->m->mm ? im->start + im->len : p + 1; /* Qwen2.5-VL: causal */
        }
    }
    *row = -1;
    return p + 1;
}

int hr__image_chunk(const hr_engine *e, const hr_request *r, int c, int room) {
    if (!e->m->mm)
        return c; /* causal images may be split */
    int lo = r->len, hi = r->len + c;
    for (int i = 0; i < r->n_images; i++) {
        int s = r->images[i].start, t = s + r->images[i].len;
        if (hi <= s || lo >= t || hi >= t)
            continue; /* the chunk ends outside this image */
        if (s > lo)
            return s - lo; /* stop before it */
        return t - lo <= room ? t - lo : 0; /* take the rest of it whole, or wait */
    }
    return c;
}
