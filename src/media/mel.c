/* Whisper's log-mel features (media/mel.h). */
#include "media/mel.h"
#include "core/error.h"

#include <complex.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

size_t hr_mel_samples(const hr_mel_cfg *c) { return (size_t)c->rate * (size_t)c->chunk; }
size_t hr_mel_frames(const hr_mel_cfg *c) { return hr_mel_samples(c) / (size_t)c->hop; }

static int geti(const json_t *o, const char *k, int dflt) {
    const json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

int hr_mel_cfg_from_json(hr_mel_cfg *c, const json_t *cfg, hr_error *err) {
    *c = (hr_mel_cfg){.n_mels = geti(cfg, "feature_size", 80), .n_fft = geti(cfg, "n_fft", 400),
                      .hop = geti(cfg, "hop_length", 160), .rate = geti(cfg, "sampling_rate", 16000),
                      .chunk = geti(cfg, "chunk_length", 30)};
    const char *type = json_string_value(json_object_get(cfg, "feature_extractor_type"));
    if (type && strcmp(type, "WhisperFeatureExtractor"))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: feature extractor '%s' "
                      "(WhisperFeatureExtractor is)", type);
    if (json_is_true(json_object_get(cfg, "do_normalize")))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: do_normalize in the audio "
                      "feature extractor");
    const json_t *dither = json_object_get(cfg, "dither");
    if (json_is_number(dither) && json_number_value(dither) != 0)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: dither in the audio feature "
                      "extractor");
    if (c->n_mels < 1 || c->n_mels > 512 || c->n_fft < 2 || c->n_fft > 8192 || c->hop < 1 ||
        c->hop > c->n_fft || c->rate < 1000 || c->rate > 192000 || c->chunk < 1 ||
        c->chunk > 600 || hr_mel_samples(c) <= (size_t)c->n_fft)
        return hr_err(err, HR_EFORMAT, "preprocessor_config.json: audio feature sizes out of "
                      "range");
    return 0;
}

/* ---- FFT: mixed radix, decimation in time (n_fft = 400 = 2^4 5^2) ------------------------ */

typedef double complex cplx;

static int smallest_factor(int n) {
    for (int p = 2; p * p <= n; p++)
        if (n % p == 0)
            return p;
    return n;
}

/* out[0..n) = DFT of x[0], x[s], ..., x[(n-1)s]; tw[j] = e^(-2 pi i j / N), N = n * step */
static void fft_rec(const cplx *x, int s, int n, cplx *out, const cplx *tw, int step,
                    cplx *tmp) {
    if (n == 1) {
        out[0] = x[0];
        return;
    }
    int p = smallest_factor(n), m = n / p, N = n * step;
    for (int r = 0; r < p; r++)
        fft_rec(x + (size_t)r * s, s * p, m, out + (size_t)r * m, tw, step * p, tmp);
    for (int k = 0; k < m; k++) {
        for (int q = 0; q < p; q++) {
            cplx acc = 0;
            for (int r = 0; r < p; r++)
                acc += out[r * m + k] * tw[((long)r * (k + q * m) * step) % N];
            tmp[q] = acc;
        }
        for (int q = 0; q < p; q++)
            out[k + q * m] = tmp[q];
    }
}

/* ---- the mel filters: Slaney's scale and norm, 0 Hz to rate / 2 --------------------------- */

static double hz_to_mel(double f) {
    const double min_log_hz = 1000.0, min_log_mel = 15.0, logstep = 27.0 / log(6.4);
    return f >= min_log_hz ? min_log_mel + log(f / min_log_hz) * logstep : 3.0 * f / 200.0;
}

static double mel_to_hz(double m) {
    const double min_log_hz = 1000.0, min_log_mel = 15.0, logstep = log(6.4) / 27.0;
    return m >= min_log_mel ? min_log_hz * exp(logstep * (m - min_log_mel)) : 200.0 * m / 3.0;
}

/* fb (n_mels, bins) as audio_utils.mel_filter_bank(norm="slaney", mel_scale="slaney") */
static void mel_filters(const hr_mel_cfg *c, int bins, double *fb) {
    int n = c->n_mels;
    double ff[514]; /* n_mels <= 512 */
    double mmax = hz_to_mel(c->rate / 2.0);
    for (int i = 0; i < n + 2; i++) /* np.linspace(0, mel_max, n + 2) */
        ff[i] = mel_to_hz(i == n + 1 ? mmax : i * (mmax / (n + 1)));
    for (int i = 0; i < n; i++) {
        double enorm = 2.0 / (ff[i + 2] - ff[i]);
        for (int b = 0; b < bins; b++) {
            double f = b == bins - 1 ? (double)(c->rate / 2) : b * ((double)(c->rate / 2) / (bins - 1));
            double down = (f - ff[i]) / (ff[i + 1] - ff[i]);
            double up = (ff[i + 2] - f) / (ff[i + 2] - ff[i + 1]);
            double w = down < up ? down : up;
            fb[(size_t)i * bins + b] = (w > 0 ? w : 0) * enorm;
        }
    }
}

/* ---- the features ------------------------------------------------------------------------ */

int hr_mel_compute(const hr_mel_cfg *c, const float *pcm, size_t n, float *out, int *valid,
                   hr_error *err) {
    size_t S = hr_mel_samples(c), F = hr_mel_frames(c);
    if (!n || n > S)
        return hr_err(err, HR_ERANGE, "the audio has %zu samples; 1 to %zu (%d s at %d Hz) are "
                      "accepted", n, S, c->chunk, c->rate);
    int nf = c->n_fft, half = nf / 2, bins = nf / 2 + 1;
    double *wave = calloc(S + (size_t)nf, sizeof(double)); /* reflect-padded: half each side */
    double *win = malloc(sizeof(double) * (size_t)nf);
    double *fb = malloc(sizeof(double) * (size_t)c->n_mels * bins);
    double *power = malloc(sizeof(double) * (size_t)bins);
    cplx *tw = malloc(sizeof(cplx) * (size_t)nf), *buf = malloc(sizeof(cplx) * (size_t)nf);
    cplx *spec = malloc(sizeof(cplx) * (size_t)nf), *tmp = malloc(sizeof(cplx) * (size_t)nf);
    int rc = 0;
    if (!wave || !win || !fb || !power || !tw || !buf || !spec || !tmp) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    double *x = wave + half;
    for (size_t i = 0; i < n; i++)
        x[i] = pcm[i];
    for (int i = 1; i <= half; i++) { /* np.pad(mode="reflect") */
        x[-i] = x[i];
        x[S - 1 + i] = x[S - 1 - i];
    }
    for (int i = 0; i < nf; i++) {
        win[i] = 0.5 - 0.5 * cos(2.0 * M_PI * i / nf); /* np.hanning(nf + 1)[:-1] */
        tw[i] = cexp(-2.0 * M_PI * I * i / nf);
    }
    mel_filters(c, bins, fb);
    /* a frame that starts past the clip sees only zeros (mel_floor: log10 = -10) when the
     * reflected end of the window is zeros too */
    float top = -INFINITY;
    for (size_t t = 0; t < F; t++) {
        size_t start = t * (size_t)c->hop; /* in wave: x[start - half ..] */
        bool silent = start >= n + (size_t)half && n + (size_t)half < S;
        for (int m = 0; m < c->n_mels; m++)
            out[(size_t)m * F + t] = -10.0f;
        if (silent) {
            top = top > -10.0f ? top : -10.0f;
            continue;
        }
        for (int i = 0; i < nf; i++)
            buf[i] = wave[start + (size_t)i] * win[i];
        fft_rec(buf, 1, nf, spec, tw, 1, tmp);
        for (int b = 0; b < bins; b++) {
            double re = creal(spec[b]), im = cimag(spec[b]);
            power[b] = re * re + im * im;
        }
        for (int m = 0; m < c->n_mels; m++) {
            const double *w = fb + (size_t)m * bins;
            double acc = 0;
            for (int b = 0; b < bins; b++)
                acc += w[b] * power[b];
            float v = (float)log10(acc > 1e-10 ? acc : 1e-10);
            out[(size_t)m * F + t] = v;
            if (v > top)
                top = v;
        }
    }
    float floor_ = top - 8.0f;
    for (size_t i = 0; i < (size_t)c->n_mels * F; i++) {
        float v = out[i] > floor_ ? out[i] : floor_;
        out[i] = (v + 4.0f) / 4.0f;
    }
    *valid = (int)((n + (size_t)c->hop - 1) / (size_t)c->hop);
done:
    free(wave);
    free(win);
    free(fb);
    free(power);
    free(tw);
    free(buf);
    free(spec);
    free(tmp);
    return rc;
}
