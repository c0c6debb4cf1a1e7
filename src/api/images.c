/* A request's images in its prompt (api/images.h). */
#include "api/images.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

int hr__images_expand(const hr_llm *m, const char *text, int n_images, char **out, hr_error *err) {
    *out = NULL;
    const hr_model_vision *mm = m->model->mm;
    if (!mm || !m->tok)
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
    const hr_model_vision *mm = m->model->mm;
    size_t px = (size_t)3 * mm->proc.height * mm->proc.width;
    free(im->req);
    free(im->pixels);
    im->req = calloc((size_t)im->n, sizeof *im->req);
    im->pixels = malloc((size_t)im->n * px * sizeof(float));
    if (!im->req || !im->pixels)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int k = 0;
    for (size_t t = 0; t < n;) {
        if (ids[t] != mm->image_token) {
            t++;
            continue;
        }
        size_t s = t;
        while (t < n && ids[t] == mm->image_token)
            t++;
        if (t - s != (size_t)mm->mm_tokens || k == im->n)
            return hr_err(err, HR_EINVAL, "the prompt's image tokens do not match its images "
                          "(image token text in a message?)");
        im->req[k++].start = (int)s;
    }
    if (k != im->n)
        return hr_err(err, HR_EINVAL, "the prompt's image tokens do not match its images");
    for (int i = 0; i < im->n; i++) {
        float *dst = im->pixels + (size_t)i * px;
        int rc = hr_image_preprocess(&im->images[i], &mm->proc, dst, err);
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
    for (int i = 0; i < im->n; i++)
        hr_image_deinit(&im->images[i]);
    free(im->images);
    *im = (hr_images){0};
}
