/* A request's images in its prompt (api/images.h). */
#include "api/images.h"
#include "core/error.h"
#include "model/audio.h"
#include "model/vision_qwen.h"

#include <stdlib.h>
#include <string.h>

/* ---- Qwen2.5-VL: <|image_pad|> x each image's merged patches -------------------------- */

/* image i's size as the processor resizes it, and its token count */
static int qwen_size(const hr_model_vision_qwen *mq, const hr_image *img, int *h, int *w,
                     int *tokens, hr_error *err) {
    const hr_vision_qwen_cfg *c = hr_vision_qwen_config(mq->tower);
    int f = c->patch * c->merge;
    int rc = hr_image_smart_resize(img->h, img->w, f, mq->min_pixels, mq->max_pixels, h, w, err);
    *tokens = rc ? 0 : (*h / f) * (*w / f);
    return rc;
}

static int qwen_expand(const hr_llm *m, const char *text, const hr_images *im, char **out,
                       hr_error *err) {
    const hr_model_vision_qwen *mq = m->model->mm_qwen;
    size_t il = 0, tl = strlen(text);
    const char *img = hr_tokenizer_token_to_piece(m->tok, mq->image_token, &il);
    if (!img || !il)
        return hr_err(err, HR_EINVAL, "the model's tokenizer lacks its image token");
    int found = 0;
    for (const char *p = text; (p = memmem(p, tl - (size_t)(p - text), img, il)) != NULL; p += il)
        found++;
    if (found != im->n)
        return hr_err(err, HR_EINVAL, "the chat template placed %d image%s, the messages hold %d",
                      found, found == 1 ? "" : "s", im->n);
    size_t total = tl + 1;
    int tokens[HR_IMAGES_MAX], h, w;
    for (int i = 0; i < im->n; i++) {
        int rc = qwen_size(mq, &im->images[i], &h, &w, &tokens[i], err);
        if (rc) {
            hr_err_wrap(err, "images[%d]", i);
            return rc;
        }
        total += (size_t)tokens[i] * il;
    }
    char *o = malloc(total), *wp = o;
    if (!o)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int k = 0;
    for (const char *p = text;;) {
        const char *q = memmem(p, tl - (size_t)(p - text), img, il);
        size_t n = q ? (size_t)(q - p) : strlen(p);
        memcpy(wp, p, n);
        wp += n;
        if (!q)
            break;
        for (int t = 0; t < tokens[k]; t++, wp += il)
            memcpy(wp, img, il);
        k++;
        p = q + il;
    }
    *wp = 0;
    *out = o;
    return 0;
}

/* im's request rows and npix floats of pixels (the old ones freed), and
 * each image's start: the prompt's runs of image_token, run k of tokens[k]
 * tokens (tokens NULL: of `each`) */
static int place_images(hr_images *im, size_t npix, const int32_t *ids, size_t n,
                        int32_t image_token, const int *tokens, int each, hr_error *err) {
    free(im->req);
    free(im->pixels);
    im->req = calloc((size_t)im->n, sizeof *im->req);
    im->pixels = malloc(npix * sizeof(float));
    if (!im->req || !im->pixels)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int k = 0;
    for (size_t t = 0; t < n;) {
        if (ids[t] != image_token) {
            t++;
            continue;
        }
        size_t s = t;
        while (t < n && ids[t] == image_token)
            t++;
        if (k == im->n || t - s != (size_t)(tokens ? tokens[k] : each))
            return hr_err(err, HR_EINVAL, "the prompt's image tokens do not match its images "
                          "(image token text in a message?)");
        im->req[k++].start = (int)s;
    }
    if (k != im->n)
        return hr_err(err, HR_EINVAL, "the prompt's image tokens do not match its images");
    return 0;
}

/* each image's pixels as patch rows, its grid, its tokens' start */
static int qwen_attach(const hr_llm *m, const int32_t *ids, size_t n, hr_images *im,
                       hr_error *err) {
    const hr_model_vision_qwen *mq = m->model->mm_qwen;
    const hr_vision_qwen_cfg *c = hr_vision_qwen_config(mq->tower);
    int hs[HR_IMAGES_MAX], ws[HR_IMAGES_MAX], tokens[HR_IMAGES_MAX];
    size_t off[HR_IMAGES_MAX + 1] = {0};
    size_t pp = (size_t)c->channels * c->tpatch * c->patch * c->patch;
    for (int i = 0; i < im->n; i++) {
        int rc = qwen_size(mq, &im->images[i], &hs[i], &ws[i], &tokens[i], err);
        if (rc)
            return rc;
        off[i + 1] = off[i] + (size_t)(hs[i] / c->patch) * (ws[i] / c->patch) * pp;
    }
    int rc = place_images(im, off[im->n], ids, n, mq->image_token, tokens, 0, err);
    if (rc)
        return rc;
    for (int i = 0; i < im->n; i++) {
        hr_image_proc pr = mq->proc;
        pr.height = hs[i];
        pr.width = ws[i];
        float *px = malloc(sizeof(float) * 3 * (size_t)hs[i] * ws[i]);
        rc = px ? hr_image_preprocess(&im->images[i], &pr, px, err)
                : hr_err(err, HR_ENOMEM, "out of memory");
        if (!rc)
            hr_vision_qwen_patchify(c, px, hs[i], ws[i], im->pixels + off[i]);
        free(px);
        if (rc)
            return rc;
        im->req[i].pixels = im->pixels + off[i];
        im->req[i].gh = hs[i] / c->patch;
        im->req[i].gw = ws[i] / c->patch;
        memcpy(im->req[i].hash, im->images[i].hash, 16);
    }
    return 0;
}

/* ---- Qwen2-Audio: <|AUDIO|> x each clip's encoder rows ------------------------------------ */

#define AUDIO_BOS "<|audio_bos|>"
#define AUDIO_EOS "<|audio_eos|>"

int hr__audio_load(const hr_llm *m, const void *data, size_t n, hr_audio *a, hr_error *err) {
    memset(a, 0, sizeof *a);
    const hr_model_audio *ma = m->model->mm_audio;
    if (!ma)
        return hr_err(err, HR_EUNSUPPORTED, "the model does not accept audio; its input is "
                      "text only");
    if (!data || !n)
        return hr_err(err, HR_EINVAL, "no bytes");
    int rc = hr_wav_decode(data, n, (double)ma->mel.chunk, a, err);
    if (!rc && a->rate != ma->mel.rate) {
        rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: audio sampled at %d Hz (the "
                    "model takes %d Hz; resample it first)", a->rate, ma->mel.rate);
        hr_audio_deinit(a);
    }
    return rc;
}

/* clip i's valid mel frames (the attention mask's count) and audio tokens */
static int clip_tokens(const hr_model_audio *ma, const hr_audio *a, int *frames) {
    *frames = (int)((a->n + (size_t)ma->mel.hop - 1) / (size_t)ma->mel.hop);
    return hr_audio_enc_tokens(*frames);
}

static int audio_expand(const hr_llm *m, const char *text, const hr_images *im, char **out,
                        hr_error *err) {
    const hr_model_audio *ma = m->model->mm_audio;
    size_t al = 0, tl = strlen(text), bl = strlen(AUDIO_BOS), el = strlen(AUDIO_EOS);
    const char *tok = hr_tokenizer_token_to_piece(m->tok, ma->audio_token, &al);
    if (!tok || !al)
        return hr_err(err, HR_EINVAL, "the model's tokenizer lacks its audio token");
    int found = 0;
    for (const char *p = text; (p = memmem(p, tl - (size_t)(p - text), tok, al)) != NULL; p += al)
        found++;
    if (found != im->n)
        return hr_err(err, HR_EINVAL, "the chat template placed %d audio clip%s, the messages "
                      "hold %d", found, found == 1 ? "" : "s", im->n);
    int tokens[HR_IMAGES_MAX], frames;
    size_t total = tl + 1;
    for (int i = 0; i < im->n; i++) {
        if ((tokens[i] = clip_tokens(ma, &im->audio[i], &frames)) < 1)
            return hr_err(err, HR_EINVAL, "audio[%d]: %zu samples are too short for one audio "
                          "token (at least %d are needed)", i, im->audio[i].n, 2 * ma->mel.hop + 1);
        total += (size_t)tokens[i] * al + bl + el;
    }
    char *o = malloc(total), *w = o;
    if (!o)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int k = 0;
    for (const char *p = text;;) {
        const char *q = memmem(p, tl - (size_t)(p - text), tok, al);
        size_t n = q ? (size_t)(q - p) : strlen(p);
        memcpy(w, p, n);
        w += n;
        if (!q)
            break;
        /* Qwen2AudioProcessor: bos and eos around the run unless either is already there */
        bool has_bos = (size_t)(q - text) >= bl && !memcmp(q - bl, AUDIO_BOS, bl);
        bool has_eos = (size_t)(text + tl - (q + al)) >= el && !memcmp(q + al, AUDIO_EOS, el);
        bool wrap = !has_bos && !has_eos;
        if (wrap) {
            memcpy(w, AUDIO_BOS, bl);
            w += bl;
        }
        for (int t = 0; t < tokens[k]; t++, w += al)
            memcpy(w, tok, al);
        if (wrap) {
            memcpy(w, AUDIO_EOS, el);
            w += el;
        }
        k++;
        p = q + al;
    }
    *w = 0;
    *out = o;
    return 0;
}

/* each clip's mel window, its valid frames, its tokens' start */
static int audio_attach(const hr_llm *m, const int32_t *ids, size_t n, hr_images *im,
                        hr_error *err) {
    const hr_model_audio *ma = m->model->mm_audio;
    size_t win = (size_t)ma->mel.n_mels * hr_mel_frames(&ma->mel);
    int tokens[HR_IMAGES_MAX], frames[HR_IMAGES_MAX];
    for (int i = 0; i < im->n; i++)
        tokens[i] = clip_tokens(ma, &im->audio[i], &frames[i]);
    int rc = place_images(im, (size_t)im->n * win, ids, n, ma->audio_token, tokens, 0, err);
    for (int i = 0; !rc && i < im->n; i++) {
        int valid = 0;
        float *dst = im->pixels + (size_t)i * win;
        rc = hr_mel_compute(&ma->mel, im->audio[i].pcm, im->audio[i].n, dst, &valid, err);
        im->req[i].pixels = dst;
        im->req[i].gh = valid;
        memcpy(im->req[i].hash, im->audio[i].hash, 16);
    }
    return rc;
}

/* ---- Gemma-3 (and the entry points) ----------------------------------------------------- */

int hr__images_expand(const hr_llm *m, const char *text, const hr_images *im, char **out,
                      hr_error *err) {
    *out = NULL;
    const hr_model_vision *mm = m->model->mm;
    int n_images = im->n;
    if (m->model->mm_qwen && m->tok && im->images)
        return qwen_expand(m, text, im, out, err);
    if (m->model->mm_audio && m->tok && im->audio)
        return audio_expand(m, text, im, out, err);
    if (!mm || !m->tok || !im->images)
        return hr_err(err, HR_EUNSUPPORTED, "the model does not accept images");
    size_t bl = 0, il = 0, el = 0;
    const char *boi = hr_tokenizer_token_to_piece(m->tok, mm->boi, &bl);
    const char *img = hr_tokenizer_token_to_piece(m->tok, mm->image_token, &il);
    const char *eoi = hr_tokenizer_token_to_piece(m->tok, mm->eoi, &el);
    if (!boi || !img || !eoi || !bl)
        return hr_err(err, HR_EINVAL, "the model's tokenizer lacks its image tokens");
    int found = 0;
    size_t tl = strlen(text);
    /* the pieces are not NUL-terminated: memmem */
    for (const char *p = text; (p = memmem(p, tl - (size_t)(p - text), boi, bl)) != NULL; p += bl)
        found++;
    if (found != n_images)
        return hr_err(err, HR_EINVAL, "the chat template placed %d image%s, the messages hold %d",
                      found, found == 1 ? "" : "s", n_images);
    size_t span = 4 + bl + (size_t)mm->mm_tokens * il + el;
    char *o = malloc(tl + (size_t)found * span + 1), *w = o;
    if (!o)
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (const char *p = text;;) {
        const char *q = memmem(p, tl - (size_t)(p - text), boi, bl);
        size_t n = q ? (size_t)(q - p) : strlen(p);
        memcpy(w, p, n);
        w += n;
        if (!q)
            break;
        memcpy(w, "\n\n", 2);
        memcpy(w + 2, boi, bl);
        w += 2 + bl;
        for (int k = 0; k < mm->mm_tokens; k++, w += il)
            memcpy(w, img, il);
        memcpy(w, eoi, el);
        memcpy(w + el, "\n\n", 2);
        w += el + 2;
        p = q + bl;
    }
    *w = 0;
    *out = o;
    return 0;
}

int hr__images_attach(const hr_llm *m, const int32_t *ids, size_t n, hr_images *im, hr_error *err) {
    if (m->model->mm_qwen && im->images)
        return qwen_attach(m, ids, n, im, err);
    if (m->model->mm_audio && im->audio)
        return audio_attach(m, ids, n, im, err);
    const hr_model_vision *mm = m->model->mm;
    if (!mm || !im->images)
        return hr_err(err, HR_EUNSUPPORTED, "the model does not accept images");
    size_t px = (size_t)3 * mm->proc.height * mm->proc.width;
    int rc = place_images(im, (size_t)im->n * px, ids, n, mm->image_token, NULL, mm->mm_tokens,
                          err);
    if (rc)
        return rc;
    for (int i = 0; i < im->n; i++) {
        float *dst = im->pixels + (size_t)i * px;
        rc = hr_image_preprocess(&im->images[i], &mm->proc, dst, err);
        if (rc)
            return rc;
        im->req[i].pixels = dst;
        memcpy(im->req[i].hash, im->images[i].hash, 16);
    }
    return 0;
}

void hr__images_free(hr_images *im) {
    if (!im)
        return;
    free(im->pixels);
    free(im->req);
    for (int i = 0; i < im->n; i++) {
        if (im->images)
            hr_image_deinit(&im->images[i]);
        if (im->audio)
            hr_audio_deinit(&im->audio[i]);
    }
    free(im->images);
    free(im->audio);
    *im = (hr_images){0};
}
