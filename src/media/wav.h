/* WAV files (RIFF WAVE) as input_audio parts carry them, decoded by hand
 * (a small container: a format chunk and a data chunk). PCM integers of 8
 * (unsigned), 16, 24 and 32 bits and IEEE floats of 32 and 64 bits, in the
 * plain format tag or WAVE_FORMAT_EXTENSIBLE; channels averaged into one,
 * as librosa.load(mono=True) and the HF audio pipeline give a model one
 * channel. Samples are scaled to [-1, 1) as soundfile reads them (int16:
 * x / 32768, 8-bit: (x - 128) / 128). */
#ifndef HR_MEDIA_WAV_H
#define HR_MEDIA_WAV_H

#include "hearth.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HR_WAV_MAX_CHANNELS 16

typedef struct hr_audio {
    float *pcm;       /* (n) mono samples, malloc'd */
    size_t n;
    int rate;         /* samples per second, as the file says */
    int channels;     /* the file's, before averaging */
    int bits;         /* the file's sample size */
    bool is_float;    /* the file's samples are floats */
    uint8_t hash[16]; /* XXH3-128 of (rate, pcm): the clip's identity */
} hr_audio;

/* True when the bytes start as a RIFF WAVE file. */
bool hr_wav_sniff(const uint8_t *p, size_t n);

/* Decodes p[0..n) into *a (caller frees with hr_audio_deinit). A clip
 * longer than max_seconds is refused from the header, before any sample is
 * allocated (HR_ERANGE, the message gives both durations). HR_EFORMAT for
 * bytes that are not a WAV file or are cut short before the data chunk, or
 * a non-finite float sample; HR_EUNSUPPORTED for a WAV variant outside the
 * list above (A-law, ADPCM, 12-bit); HR_ENOMEM. A data chunk that claims
 * more bytes than the file holds (a stream's header) is read to the end
 * of the file, whole frames only. */
int hr_wav_decode(const uint8_t *p, size_t n, double max_seconds, hr_audio *a, hr_error *err);
void hr_audio_deinit(hr_audio *a); /* NULL and a zeroed clip allowed */

#endif
