/* Image preprocessing (media/imgproc.h). The resampling follows Pillow's
 * libImaging/Resample.c, which torch's uint8 antialiased interpolate
 * (aten/src/ATen/native/cpu/UpSampleKernel.cpp, UpSampleKernelAVXAntialias.h)
 * ports: coefficients per output pixel from the filter (support scaled by
 * the shrink factor), normalized, rounded to fixed point (Pillow: 22 bits;
 * torch: int16 at the most bits the largest coefficient allows); a
 * horizontal pass into an 8-bit image, then a vertical one. */
#include "media/imgproc.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PIL_PRECISION_BITS (32 - 8 - 2)

/* ---- settings ------------------------------------------------------------------------ */

hr_image_proc hr_image_proc_gemma3(void) {
    return (hr_image_proc){.height = 896, .width = 896, .resample = HR_RESAMPLE_BILINEAR,
                           .backend = HR_IMAGE_TORCHVISION, .do_rescale = true, .do_normalize = true,
                           .rescale = 1.0 / 255.0, .mean = {0.5f, 0.5f, 0.5f},
                           .std = {0.5f, 0.5f, 0.5f}};
}

static int get_triple(const json_t *v, float out[3], const char *name, hr_error *err) {
    if (!v || json_is_null(v))
        return 0;
    if (json_is_number(v)) {
        out[0] = out[1] = out[2] = (float)json_number_value(v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) != 3)
        return hr_err(err, HR_EFORMAT, "preprocessor_config.json: %s must be 3 numbers", name);
    for (int i = 0; i < 3; i++) {
        const json_t *x = json_array_get(v, (size_t)i);
        if (!json_is_number(x))
            return hr_err(err, HR_EFORMAT, "preprocessor_config.json: %s must be 3 numbers", name);
        out[i] = (float)json_number_value(x);
    }
    return 0;
}

static bool get_bool(const json_t *cfg, const char *key, bool dflt) {
    const json_t *v = json_object_get(cfg, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

int hr_image_proc_from_json(hr_image_proc *p, const json_t *cfg, hr_image_proc dflt,
                            hr_error *err) {
    *p = dflt;
    if (!json_is_object(cfg))
        return 0;
    if (get_bool(cfg, "do_pan_and_scan", false))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: do_pan_and_scan (Gemma-3's "
                      "pan and scan crops)");
    const json_t *size = json_object_get(cfg, "size");
    if (json_is_object(size)) {
        const json_t *h = json_object_get(size, "height"), *w = json_object_get(size, "width");
        if (json_is_integer(h) && json_is_integer(w)) {
            p->height = (int)json_integer_value(h);
            p->width = (int)json_integer_value(w);
        }
    }
    if (p->height < 1 || p->width < 1 || p->height > 8192 || p->width > 8192)
        return hr_err(err, HR_EFORMAT, "preprocessor_config.json: size %dx%d out of range",
                      p->width, p->height);
    const json_t *rs = json_object_get(cfg, "resample");
    if (json_is_integer(rs)) {
        json_int_t r = json_integer_value(rs);
        if (r != HR_RESAMPLE_BILINEAR && r != HR_RESAMPLE_BICUBIC)
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet: resample %lld (bilinear 2 "
                          "and bicubic 3 are)", (long long)r);
        p->resample = (hr_resample)r;
    }
    p->do_rescale = get_bool(cfg, "do_rescale", p->do_rescale);
    p->do_normalize = get_bool(cfg, "do_normalize", p->do_normalize);
    const json_t *rf = json_object_get(cfg, "rescale_factor");
    if (json_is_number(rf))
        p->rescale = json_number_value(rf);
    int rc = get_triple(json_object_get(cfg, "image_mean"), p->mean, "image_mean", err);
    if (!rc)
        rc = get_triple(json_object_get(cfg, "image_std"), p->std, "image_std", err);
    for (int i = 0; !rc && i < 3; i++)
        if (!(p->std[i] != 0))
            rc = hr_err(err, HR_EFORMAT, "preprocessor_config.json: image_std has a zero");
    return rc;
}

/* ---- PIL's resampling ---------------------------------------------------------------- */

static double filter_bilinear(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

static double filter_bicubic(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc: for each output
 * index, the first input index (bounds[2i]), the count (bounds[2i+1]) and
 * ksize fixed-point weights of *prec bits: Pillow's 22, or torch's
 * (_compute_indices_int16_weights_aa): the most bits, at most 22, under
 * which twice the largest weight still rounds below 2^15. NULL when out of
 * memory. */
static int32_t *coeffs(int in_size, int out_size, hr_resample f, hr_image_backend be,
                       int *ksize_out, int **bounds_out, int *prec) {
    double (*filter)(double) = f == HR_RESAMPLE_BICUBIC ? filter_bicubic : filter_bilinear;
    double fsupport = f == HR_RESAMPLE_BICUBIC ? 2.0 : 1.0;
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = fsupport * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *pre = malloc(sizeof(double) * (size_t)out_size * (size_t)ksize);
    int32_t *kk = malloc(sizeof(int32_t) * (size_t)out_size * (size_t)ksize);
    int *bounds = malloc(sizeof(int) * 2 * (size_t)out_size);
    if (!pre || !kk || !bounds) {
        free(pre);
        free(kk);
        free(bounds);
        return NULL;
    }
    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        double *k = pre + (size_t)xx * ksize;
        int x = 0;
        for (; x < xmax; x++) {
            double w = filter((x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0)
                k[x] /= ww;
        for (; x < ksize; x++)
            k[x] = 0;
        bounds[xx * 2] = xmin;
        bounds[xx * 2 + 1] = xmax;
    }
    size_t nk = (size_t)out_size * (size_t)ksize;
    int bits = PIL_PRECISION_BITS;
    if (be == HR_IMAGE_TORCHVISION) {
        double wmax = pre[0];
        for (size_t i = 1; i < nk; i++)
            wmax = pre[i] > wmax ? pre[i] : wmax;
        for (bits = 0; bits < 22; bits++)
            if ((int)(0.5 + wmax * (1 << (bits + 1))) >= 1 << 15)
                break;
    }
    for (size_t i = 0; i < nk; i++) {
        int32_t v = pre[i] < 0 ? (int32_t)(-0.5 + pre[i] * (1 << bits))
                               : (int32_t)(0.5 + pre[i] * (1 << bits));
        kk[i] = be == HR_IMAGE_TORCHVISION ? (int16_t)v : v; /* torch stores int16 */
    }
    *prec = bits;
    free(pre);
    *ksize_out = ksize;
    *bounds_out = bounds;
    return kk;
}

static inline uint8_t clip8(int64_t ss, int prec) {
    int64_t v = ss >> prec; /* Pillow and torch: an arithmetic shift, then a clamp */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

int hr_image_resize_rgb(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh,
                        hr_resample f, hr_image_backend be, hr_error *err) {
    int kx = 0, ky = 0, *bx = NULL, *by = NULL, px = 0, py = 0;
    int32_t *wx = NULL, *wy = NULL;
    uint8_t *tmp = NULL;
    int rc = 0;
    bool need_h = dw != sw, need_v = dh != sh;
    if (!need_h && !need_v) {
        memcpy(dst, src, (size_t)sw * sh * 3);
        return 0;
    }
    wx = coeffs(sw, dw, f, be, &kx, &bx, &px);
    wy = coeffs(sh, dh, f, be, &ky, &by, &py);
    if (!wx || !wy) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    /* rows [y0, y1) of the source are the ones the vertical pass reads */
    int y0 = by[0], y1 = by[dh * 2 - 2] + by[dh * 2 - 1];
    const uint8_t *vin = src;
    int vin_y0 = 0;
    if (need_h) {
        uint8_t *out = need_v ? (tmp = malloc((size_t)dw * (size_t)(y1 - y0) * 3)) : dst;
        if (!out) {
            rc = hr_err(err, HR_ENOMEM, "out of memory");
            goto done;
        }
        int ylo = need_v ? y0 : 0, yhi = need_v ? y1 : sh;
        for (int y = ylo; y < yhi; y++) {
            const uint8_t *row = src + (size_t)y * sw * 3;
            uint8_t *o = out + (size_t)(y - ylo) * dw * 3;
            for (int xx = 0; xx < dw; xx++) {
                int xmin = bx[xx * 2], xmax = bx[xx * 2 + 1];
                const int32_t *k = wx + (size_t)xx * kx;
                int64_t s0 = (int64_t)1 << px >> 1, s1 = s0, s2 = s0;
                for (int x = 0; x < xmax; x++) {
                    const uint8_t *p = row + (size_t)(x + xmin) * 3;
                    s0 += (int64_t)p[0] * k[x];
                    s1 += (int64_t)p[1] * k[x];
                    s2 += (int64_t)p[2] * k[x];
                }
                o[xx * 3] = clip8(s0, px);
                o[xx * 3 + 1] = clip8(s1, px);
                o[xx * 3 + 2] = clip8(s2, px);
            }
        }
        vin = out;
        vin_y0 = ylo;
    }
    if (need_v) {
        int w = dw; /* the horizontal pass' width, or the source's (dw == sw) */
        for (int yy = 0; yy < dh; yy++) {
            int ymin = by[yy * 2] - vin_y0, ymax = by[yy * 2 + 1];
            const int32_t *k = wy + (size_t)yy * ky;
            uint8_t *o = dst + (size_t)yy * dw * 3;
            for (int xx = 0; xx < w; xx++) {
                int64_t s0 = (int64_t)1 << py >> 1, s1 = s0, s2 = s0;
                for (int y = 0; y < ymax; y++) {
                    const uint8_t *p = vin + ((size_t)(y + ymin) * w + xx) * 3;
                    s0 += (int64_t)p[0] * k[y];
                    s1 += (int64_t)p[1] * k[y];
                    s2 += (int64_t)p[2] * k[y];
                }
                o[xx * 3] = clip8(s0, py);
                o[xx * 3 + 1] = clip8(s1, py);
                o[xx * 3 + 2] = clip8(s2, py);
            }
        }
    }
done:
    free(tmp);
    free(wx);
    free(wy);
    free(bx);
    free(by);
    return rc;
}

/* ---- Qwen2-VL's sizes ------------------------------------------------------------------- */

int hr_image_smart_resize(int h, int w, int factor, long min_px, long max_px, int *oh, int *ow,
                          hr_error *err) {
    if (h < 1 || w < 1 || factor < 1)
        return hr_err(err, HR_EINVAL, "a %dx%d image", w, h);
    if ((double)(h > w ? h : w) / (h < w ? h : w) > 200)
        return hr_err(err, HR_EINVAL, "a %dx%d image: aspect ratio above 200", w, h);
    /* rint: round half to even, as Python's round() */
    double hb = rint((double)h / factor) * factor, wb = rint((double)w / factor) * factor;
    if (hb * wb > (double)max_px) {
        double beta = sqrt((double)h * w / (double)max_px);
        hb = fmax(factor, floor(h / beta / factor) * factor);
        wb = fmax(factor, floor(w / beta / factor) * factor);
    } else if (hb * wb < (double)min_px) {
        double beta = sqrt((double)min_px / ((double)h * w));
        hb = ceil(h * beta / factor) * factor;
        wb = ceil(w * beta / factor) * factor;
    }
    *oh = (int)hb;
    *ow = (int)wb;
    return 0;
}

/* ---- the rest of the pipeline -------------------------------------------------------- */

int hr_image_preprocess(const hr_image *img, const hr_image_proc *p, float *out, hr_error *err) {
    size_t n = (size_t)img->w * img->h;
    uint8_t *rgb = malloc(n * 3), *sized = malloc((size_t)p->width * p->height * 3);
    int rc = 0;
    if (!rgb || !sized) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    /* transformers 5.17's convert_to_rgb is PIL's convert("RGB"): alpha dropped */
    for (size_t i = 0; i < n; i++)
        memcpy(rgb + 3 * i, img->rgba + 4 * i, 3);
    if ((rc = hr_image_resize_rgb(rgb, img->w, img->h, sized, p->width, p->height, p->resample,
                                  p->backend, err)))
        goto done;
    size_t plane = (size_t)p->width * p->height;
    /* torchvision: rescale fused into normalize, (x - mean / r) / (std / r),
     * mean and std float32 tensors times 1 / r; a rescale alone: x * r, all
     * float32. PIL: x * r in float64 rounded to float32, then float32
     * (x - mean) / std. */
    float tv_mean[3], tv_std[3], tv_r = (float)p->rescale;
    for (int c = 0; c < 3; c++) {
        bool fuse = p->do_rescale && p->do_normalize;
        tv_mean[c] = fuse ? p->mean[c] * (float)(1.0 / p->rescale) : p->mean[c];
        tv_std[c] = fuse ? p->std[c] * (float)(1.0 / p->rescale) : p->std[c];
    }
    for (size_t i = 0; i < plane; i++)
        for (int c = 0; c < 3; c++) {
            float x = (float)sized[3 * i + c], v;
            if (p->backend == HR_IMAGE_TORCHVISION) {
                v = p->do_normalize ? (x - tv_mean[c]) / tv_std[c] : p->do_rescale ? x * tv_r : x;
            } else {
                v = p->do_rescale ? (float)((double)sized[3 * i + c] * p->rescale) : x;
                if (p->do_normalize)
                    v = (v - p->mean[c]) / p->std[c];
            }
            out[(size_t)c * plane + i] = v;
        }
done:
    free(rgb);
    free(sized);
    return rc;
}
