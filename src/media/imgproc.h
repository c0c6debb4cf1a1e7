/* Image preprocessing as the Hugging Face image processors of transformers
 * 5.17 do it, either backend: the torchvision one (what AutoImageProcessor
 * loads in 5.17, e.g. Gemma3ImageProcessor: tvF.resize of a uint8 tensor,
 * which is torch's port of PIL's resampling with int16 coefficients) or
 * the PIL one (Gemma3ImageProcessorPil: Image.resize, 22-bit
 * coefficients; preprocessor_config.json does not say which, 5.17 saves
 * both under one name). Alpha dropped (convert_to_rgb is PIL's convert("RGB")),
 * resized (separable convolution, antialiased when shrinking, 8-bit
 * between the passes), rescaled and normalized in float32 as the backend
 * orders it, channel first. The processor's settings are data
 * (preprocessor_config.json). */
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

/* Which of transformers' image processing backends to reproduce. */
typedef enum hr_image_backend {
    HR_IMAGE_TORCHVISION, /* torch's uint8 resize; rescale fused into normalize */
    HR_IMAGE_PIL,         /* Pillow's resize; rescale in float64, then normalize */
} hr_image_backend;

typedef struct hr_image_proc {
    int height, width;   /* the resized size */
    hr_resample resample;
    hr_image_backend backend;
    bool do_rescale, do_normalize;
    double rescale;      /* rescale_factor */
    float mean[3], std[3];
} hr_image_proc;

/* Gemma3ImageProcessor's defaults: 896x896, bilinear, 1/255, mean = std =
 * 0.5, the torchvision backend; pan-and-scan off. */
hr_image_proc hr_image_proc_gemma3(void);
/* The settings of a preprocessor_config.json (its fields over dflt):
 * size {height, width}, resample, do_rescale, rescale_factor,
 * do_normalize, image_mean, image_std (the backend stays dflt's; alpha is
 * always dropped, whatever do_convert_rgb says). do_pan_and_scan
 * true is HR_EUNSUPPORTED ("not supported yet"). */
int hr_image_proc_from_json(hr_image_proc *p, const json_t *cfg, hr_image_proc dflt,
                            hr_error *err);

/* An RGB image (3 bytes a pixel, rows packed) resized from src (sw, sh)
 * to dst (dw, dh), bit for bit as PIL's Image.resize (HR_IMAGE_PIL) or
 * torch's antialiased interpolate of a uint8 tensor (HR_IMAGE_TORCHVISION)
 * gives it. */
int hr_image_resize_rgb(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh,
                        hr_resample f, hr_image_backend be, hr_error *err);

/* Qwen2-VL's smart_resize (Qwen2VLImageProcessor, also Qwen2.5-VL's): the
 * size (*oh, *ow), multiples of factor, nearest to (h, w) (Python's round,
 * half to even) with between min_px and max_px pixels, the aspect ratio
 * kept as well as it can. HR_EINVAL for an aspect ratio above 200 (as
 * transformers raises). */
int hr_image_smart_resize(int h, int w, int factor, long min_px, long max_px, int *oh, int *ow,
                          hr_error *err);

/* pixel_values of one image: (3, height, width) floats at out. */
int hr_image_preprocess(const hr_image *img, const hr_image_proc *p, float *out, hr_error *err);

#endif
