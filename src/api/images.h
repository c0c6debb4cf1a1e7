/* A request's images in its chat prompt, as the model's processor places
 * them (Gemma-3: every boi the template wrote becomes "\n\n" boi,
 * image_token x mm_tokens, eoi "\n\n"; Qwen2.5-VL: every <|image_pad|>
 * becomes as many as the image has merged patches at its smart_resize
 * size), and their pixels for the engine; a Qwen2-Audio model's clips
 * the same way (docs/audio.md: <|AUDIO|> x each clip's encoder rows, its
 * mel features for the engine).
 * hr_gen_submit (images and audio in hr_gen_params) and the server (image
 * and input_audio parts of a request, decoded there) both go through
 * here. */
#ifndef HR_API_IMAGES_H
#define HR_API_IMAGES_H

#include "api/api.h"
#include "media/image.h"
#include "media/wav.h"

/* Images one request may carry. */
#define HR_IMAGES_MAX 8

/* A model takes images or audio, never both: n counts images, or clips
 * when audio is set. */
typedef struct hr_images {
    hr_image *images;   /* [n] decoded, in the order their parts appear */
    hr_audio *audio;    /* [n] decoded clips instead (an audio model's) */
    int n;
    float *pixels;      /* the model's image processor's output, image after image
                         * (Gemma-3: [3][S][S]; Qwen2.5-VL: patch rows;
                         * Qwen2-Audio: each clip's mel window) */
    hr_req_image *req;  /* [n] for the engine (hr_req_params.images) */
} hr_images;

/* A WAV file's bytes as a clip the model takes (*a: caller frees with
 * hr_audio_deinit): HR_EUNSUPPORTED when the model takes no audio, else
 * hr_wav_decode's errors with the model's window (30 s) as the limit, and
 * HR_EUNSUPPORTED for a sample rate other than the feature extractor's
 * (16000 Hz: hearth does not resample). */
int hr__audio_load(const hr_llm *m, const void *data, size_t n, hr_audio *a, hr_error *err);

/* The rendered prompt text with each of im's images placed (audio: every
 * <|AUDIO|> becomes as many as the clip's encoder rows, wrapped in
 * <|audio_bos|> <|audio_eos|> unless either is beside it, as
 * Qwen2AudioProcessor expands it); *out malloc'd. HR_EINVAL when the
 * template did not write one image marker (Gemma-3: boi; Qwen2.5-VL:
 * <|image_pad|>; Qwen2-Audio: <|AUDIO|>) per image, or a clip is too short
 * for one audio token. */
int hr__images_expand(const hr_llm *m, const char *text, const hr_images *im, char **out,
                      hr_error *err);
/* After tokenizing the expanded prompt: each image's span and pixels (a
 * clip's: its mel features, computed here) into im->req. HR_EINVAL when the spans are not one run of image tokens per
 * image, of its length (image token text in a message). */
int hr__images_attach(const hr_llm *m, const int32_t *ids, size_t n, hr_images *im, hr_error *err);
void hr__images_free(hr_images *im);

#endif
