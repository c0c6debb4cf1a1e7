/* Whisper's log-mel features (WhisperFeatureExtractor in transformers
 * 5.17, its numpy path: audio_utils.spectrogram with a periodic Hann
 * window, power 2, Slaney mel filters, log10), as Qwen2-Audio's processor
 * asks for them: the clip zero-padded to chunk_length seconds
 * (padding="max_length"), frames centred with reflect padding, the last
 * frame dropped, then max(x, max(x) - 8) and (x + 4) / 4 over the whole
 * padded window, and the attention mask every hop_length-th sample of the
 * padding mask (the clip's first ceil(n / hop) frames). Computed in double
 * (numpy's float64) and rounded to float32 where numpy rounds. */
#ifndef HR_MEDIA_MEL_H
#define HR_MEDIA_MEL_H

#include "hearth.h"

#include <jansson.h>
#include <stddef.h>

typedef struct hr_mel_cfg {
    int n_mels;      /* feature_size (Qwen2-Audio: 128) */
    int n_fft;       /* 400 */
    int hop;         /* hop_length: 160 */
    int rate;        /* sampling_rate: 16000 */
    int chunk;       /* chunk_length in seconds: 30 */
} hr_mel_cfg;

/* Samples of the padded window (rate * chunk) and its frames (samples / hop). */
size_t hr_mel_samples(const hr_mel_cfg *c);
size_t hr_mel_frames(const hr_mel_cfg *c);

/* A preprocessor_config.json's WhisperFeatureExtractor fields over
 * Whisper's defaults (80 mels, 400, 160, 16000 Hz, 30 s); cfg NULL: the
 * defaults. HR_EUNSUPPORTED for settings this code does not compute
 * (do_normalize, dither, a feature_extractor_type other than
 * WhisperFeatureExtractor), HR_EFORMAT for out-of-range sizes. */
int hr_mel_cfg_from_json(hr_mel_cfg *c, const json_t *cfg, hr_error *err);

/* The features of pcm[0..n) (mono at c->rate): out (n_mels,
 * hr_mel_frames) row by row, *valid the frames the attention mask keeps.
 * HR_ERANGE when n is 0 or passes the window (the processor would cut it:
 * refused here), HR_ENOMEM. */
int hr_mel_compute(const hr_mel_cfg *c, const float *pcm, size_t n, float *out, int *valid,
                   hr_error *err);

#endif
