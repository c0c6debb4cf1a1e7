/* Image preprocessing as the Hugging Face image processors do it (the
 * "slow", PIL-based ones, e.g. Gemma3ImageProcessor): alpha flattened on
 * white (convert_to_rgb), resized with PIL's resampling (Image.resize:
 * separable convolution, antialiased when shrinking, 8-bit fixed point
 * between the passes), rescaled and normalized in float32, channel first.
 * The processor's settings are data (preprocessor_config.json). */
#ifndef HR_MEDIA_IMGPROC_H
#define HR_MEDIA_IMGPROC_H

#include "hearth.h"
#include "media/image.h"

#include <jansson.h>
#include <stdbool.h>

/* PIL's resampling filters (their Image.Resampling values). */
typedef enum hr_resample {
    HR_RESAMPLE_BILINEAR = 2,
    HR_RESAMPLE_BICUBIC = 3,
} hr_resample;

typedef struct hr_image_proc {
    int height, width;   /* the resized size */
    hr_resample resample;
    bool do_convert_rgb; /* alpha composited on white, as transformers' convert_to_rgb */
    bool do_rescale, do_normalize;
    double rescale;      /* rescale_factor */
    float mean[3], std[3];
} hr_image_proc;

/* Gemma3ImageProcessor's defaults: 896x896, bilinear, 1/255, mean = std =
 * 0.5, convert_rgb; pan-and-scan off. */
hr_image_proc hr_image_proc_gemma3(void);
/* The settings of a preprocessor_config.json (its fields over dflt):
 * size {height, width}, resample, do_rescale, rescale_factor,
 * do_normalize, image_mean, image_std, do_convert_rgb. do_pan_and_scan
 * true is HR_EUNSUPPORTED ("not supported yet"). */
int hr_image_proc_from_json(hr_image_proc *p, const json_t *cfg, hr_image_proc dflt,
                            hr_error *err);

/* PIL's Image.resize of an RGB image (3 bytes a pixel, rows packed):
 * src (sw, sh) to dst (dw, dh). Bit for bit PIL's 8-bit result. */
int hr_image_resize_rgb(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh,
                        hr_resample f, hr_error *err);

/* PIL's Image.alpha_composite of rgba over opaque white, as RGB
 * (w * h * 3 bytes at rgb). */
void hr_image_flatten_white(const uint8_t *rgba, int w, int h, uint8_t *rgb);

/* pixel_values of one image: (3, height, width) floats at out. */
int hr_image_preprocess(const hr_image *img, const hr_image_proc *p, float *out, hr_error *err);

#endif
