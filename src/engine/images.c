/* A request's images in the engine (engine_int.h): their spans of the
 * prompt, their features (the vision tower's, computed once per image
 * identity and kept in a small LRU cache), the prompt cache's keys for
 * image tokens, and prefill chunks that keep an image in one step. */
#include "engine/engine_int.h"
#include "core/error.h"
#include "model/vision.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct hr__feat_entry {
    uint8_t hash[16];
    float *feat; /* [mm_tokens][d_model], or NULL: a free entry */
    long used;
} hr__feat_entry;

/* ---- the request's side (hr_request_new, any thread) ---------------------------------- */

int hr__request_images(hr_request *r, const hr_engine *e, const hr_req_params *p,
                       hr_error *err) {
    const hr_model_vision *mm = e->m->mm;
    if (!mm)
        return p->n_images ? hr_err(err, HR_EINVAL, "the model does not take images") : 0;
    if (p->n_images < 0 || (p->n_images && !p->images))
        return hr_err(err, HR_EINVAL, "images: bad count");
    if (p->n_images && (p->embed || p->score_from))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: images in embedding or "
                      "prompt-scoring requests");
    if (p->n_images && e->m->be->device_mem)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet on %s: image input",
                      e->m->be->name);
    int L = mm->mm_tokens, prev = 0;
    for (int i = 0; i < p->n_images; i++) {
        int s = p->images[i].start;
        if (s < prev || s + L > p->n_prompt || !p->images[i].pixels)
            return hr_err(err, HR_EINVAL, "image %d: its %d tokens from %d are not inside the "
                          "prompt after the image before", i, L, s);
        for (int k = s; k < s + L; k++)
            if (p->prompt[k] != mm->image_token)
                return hr_err(err, HR_EINVAL, "image %d: position %d is not the image token %d",
                              i, k, mm->image_token);
        prev = s + L;
    }
    for (int k = 0, i = 0; k < p->n_prompt; k++) { /* no stray image tokens */
        if (i < p->n_images && k == p->images[i].start) {
            k += L - 1;
            i++;
        } else if (p->prompt[k] == mm->image_token) {
            return hr_err(err, HR_EINVAL, "prompt position %d holds the image token without an "
                          "image", k);
        }
    }
    if (!p->n_images)
        return 0;
    size_t npx = (size_t)3 * mm->proc.height * mm->proc.width;
    r->images = calloc((size_t)p->n_images, sizeof *r->images);
    r->key = malloc((size_t)p->n_prompt * sizeof *r->key);
    if (!r->images || !r->key)
        return hr_err(err, HR_ENOMEM, "out of memory");
    r->n_images = p->n_images;
    memcpy(r->key, p->prompt, (size_t)p->n_prompt * sizeof *r->key);
    for (int i = 0; i < p->n_images; i++) {
        hr__req_img *im = &r->images[i];
        im->start = p->images[i].start;
        im->len = L;
        memcpy(im->hash, p->images[i].hash, 16);
        if (!(im->pixels = malloc(npx * sizeof(float))))
            return hr_err(err, HR_ENOMEM, "out of memory");
        memcpy(im->pixels, p->images[i].pixels, npx * sizeof(float));
        /* the cache's key of token j of the image: above every vocabulary
         * (bit 30 set), from the image's identity and j */
        for (int j = 0; j < L; j++) {
            uint32_t h = (uint32_t)XXH3_64bits_withSeed(im->hash, 16, (uint64_t)j);
            r->key[im->start + j] = (int32_t)(0x40000000u | (h & 0x3fffffffu));
        }
    }
    return 0;
}

void hr__request_images_free(hr_request *r) {
    for (int i = 0; i < r->n_images && r->images; i++)
        free(r->images[i].pixels);
    free(r->images);
    free(r->key);
    free(r->feat);
    r->images = NULL;
    r->key = NULL;
    r->feat = NULL;
    r->n_images = 0;
}

/* ---- features (engine thread) -------------------------------------------------------- */

int hr__engine_encode_images(hr_engine *e, hr_request *r, hr_error *err) {
    if (!r->n_images || r->feat)
        return 0;
    const hr_model_vision *mm = e->m->mm;
    size_t rows = (size_t)mm->mm_tokens * e->m->hp.d_model;
    if (!e->feat_cache && !(e->feat_cache = calloc(HR_FEAT_CACHE, sizeof *e->feat_cache)))
        return hr_err(err, HR_ENOMEM, "out of memory");
    if (!(r->feat = malloc((size_t)r->n_images * rows * sizeof(float))))
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int i = 0; i < r->n_images; i++) {
        hr__req_img *im = &r->images[i];
        float *dst = r->feat + (size_t)i * rows;
        hr__feat_entry *hit = NULL, *lru = &e->feat_cache[0];
        for (int k = 0; k < HR_FEAT_CACHE; k++) {
            hr__feat_entry *c = &e->feat_cache[k];
            if (c->feat && !memcmp(c->hash, im->hash, 16))
                hit = c;
            if (!c->feat || (lru->feat && c->used < lru->used))
                lru = c;
        }
        if (hit) {
            memcpy(dst, hit->feat, rows * sizeof(float));
            hit->used = ++e->feat_clock;
            atomic_fetch_add(&e->st_img_cached, 1);
        } else {
            int rc = hr_vision_encode(mm->tower, hr_fwd_pool(e->fwd), im->pixels, dst, NULL, err);
            if (rc)
                return rc;
            atomic_fetch_add(&e->st_img_encoded, 1);
            float *keep = lru->feat ? lru->feat : malloc(rows * sizeof(float));
            if (keep) { /* (out of memory: only not cached) */
                memcpy(keep, dst, rows * sizeof(float));
                lru->feat = keep;
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

int hr__image_end(const hr_request *r, int p, int *row) {
    for (int i = 0; i < r->n_images; i++) {
        const hr__req_img *im = &r->images[i];
        if (p >= im->start && p < im->start + im->len) {
            *row = i * im->len + (p - im->start);
            return im->start + im->len;
        }
    }
    *row = -1;
    return p + 1;
}

int hr__image_chunk(const hr_request *r, int c, int room) {
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
