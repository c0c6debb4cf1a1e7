/* WAV decoding (media/wav.h). */
#include "media/wav.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

enum { TAG_PCM = 1, TAG_FLOAT = 3, TAG_EXTENSIBLE = 0xfffe };

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }

bool hr_wav_sniff(const uint8_t *p, size_t n) {
    return n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WAVE", 4);
}

typedef struct fmt {
    unsigned tag, channels, rate, block, bits;
} fmt;

static int read_fmt(const uint8_t *c, uint32_t size, fmt *f, hr_error *err) {
    if (size < 16)
        return hr_err(err, HR_EFORMAT, "bad WAV: a fmt chunk of %u bytes", size);
    *f = (fmt){.tag = le16(c), .channels = le16(c + 2), .rate = le32(c + 4),
               .block = le16(c + 12), .bits = le16(c + 14)};
    if (f->tag == TAG_EXTENSIBLE) {
        if (size < 40)
            return hr_err(err, HR_EFORMAT, "bad WAV: an extensible fmt chunk of %u bytes", size);
        unsigned valid = le16(c + 18);
        if (valid && valid != f->bits)
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet: WAV samples of %u valid "
                          "bits in %u", valid, f->bits);
        f->tag = le16(c + 24); /* the sub-format GUID's first two bytes */
    }
    if (f->tag != TAG_PCM && f->tag != TAG_FLOAT)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: WAV format tag 0x%04x (PCM "
                      "integers and IEEE floats are)", f->tag);
    if (f->channels < 1 || f->channels > HR_WAV_MAX_CHANNELS)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: a WAV of %u channels (1 to %d "
                      "are)", f->channels, HR_WAV_MAX_CHANNELS);
    bool ok = f->tag == TAG_PCM ? (f->bits == 8 || f->bits == 16 || f->bits == 24 || f->bits == 32)
                                : (f->bits == 32 || f->bits == 64);
    if (!ok)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %u-bit %s WAV samples", f->bits,
                      f->tag == TAG_PCM ? "integer" : "float");
    if (f->rate < 1 || f->rate > 1000000)
        return hr_err(err, HR_EFORMAT, "bad WAV: a sample rate of %u Hz", f->rate);
    if (f->block != f->channels * (f->bits / 8))
        return hr_err(err, HR_EFORMAT, "bad WAV: block align %u for %u channels of %u bits",
                      f->block, f->channels, f->bits);
    return 0;
}

/* one sample at p as a double in [-1, 1) (floats as they are) */
static double sample(const uint8_t *p, const fmt *f) {
    if (f->tag == TAG_FLOAT) {
        if (f->bits == 32) {
            uint32_t u = le32(p);
            float x;
            memcpy(&x, &u, 4);
            return x;
        }
        uint64_t u = le32(p) | (uint64_t)le32(p + 4) << 32;
        double x;
        memcpy(&x, &u, 8);
        return x;
    }
    switch (f->bits) {
    case 8: return ((int)p[0] - 128) / 128.0;
    case 16: return (int16_t)le16(p) / 32768.0;
    case 24: {
        int32_t v = (int32_t)(le16(p) | (uint32_t)p[2] << 16);
        if (v & 0x800000)
            v -= 0x1000000;
        return v / 8388608.0;
    }
    default: return (int32_t)le32(p) / 2147483648.0;
    }
}

int hr_wav_decode(const uint8_t *p, size_t n, double max_seconds, hr_audio *a, hr_error *err) {
    memset(a, 0, sizeof *a);
    if (!hr_wav_sniff(p, n))
        return hr_err(err, HR_EFORMAT, "not a WAV file (no RIFF WAVE header)");
    fmt f = {0};
    bool have_fmt = false;
    size_t at = 12;
    const uint8_t *data = NULL;
    size_t data_n = 0;
    while (!data) {
        if (n - at < 8)
            return hr_err(err, HR_EFORMAT, "bad WAV: no data chunk%s", have_fmt ? "" : " and no "
                          "fmt chunk");
        uint32_t size = le32(p + at + 4);
        const uint8_t *id = p + at, *body = p + at + 8;
        size_t room = n - at - 8;
        if (!memcmp(id, "data", 4)) {
            if (!have_fmt)
                return hr_err(err, HR_EFORMAT, "bad WAV: the data chunk comes before the fmt "
                              "chunk");
            data = body;
            data_n = size < room ? size : room; /* a stream's header may claim more */
            break;
        }
        if (size > room)
            return hr_err(err, HR_EFORMAT, "bad WAV: a chunk at byte %zu claims %u bytes past the "
                          "end of the file", at, size);
        if (!memcmp(id, "fmt ", 4)) {
            int rc = read_fmt(body, size, &f, err);
            if (rc)
                return rc;
            have_fmt = true;
        }
        at += 8 + (size_t)size + (size & 1); /* chunks are padded to even sizes */
        if (at > n)
            at = n;
    }
    size_t frames = data_n / f.block;
    double seconds = (double)frames / f.rate;
    if (seconds > max_seconds)
        return hr_err(err, HR_ERANGE, "the audio is %.2f s long; at most %g s are accepted",
                      seconds, max_seconds);
    if (!frames)
        return hr_err(err, HR_EFORMAT, "the WAV file has no samples");
    if (!(a->pcm = malloc(frames * sizeof(float))))
        return hr_err(err, HR_ENOMEM, "out of memory");
    size_t bps = f.bits / 8;
    for (size_t i = 0; i < frames; i++) {
        double s = 0;
        for (unsigned c = 0; c < f.channels; c++)
            s += sample(data + i * f.block + c * bps, &f);
        s /= f.channels;
        if (!isfinite(s)) {
            free(a->pcm);
            a->pcm = NULL;
            return hr_err(err, HR_EFORMAT, "bad WAV: sample %zu is not a finite number", i);
        }
        a->pcm[i] = (float)s;
    }
    a->n = frames;
    a->rate = (int)f.rate;
    a->channels = (int)f.channels;
    a->bits = (int)f.bits;
    a->is_float = f.tag == TAG_FLOAT;
    XXH3_state_t *st = XXH3_createState();
    if (!st) {
        hr_audio_deinit(a);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    int32_t rate = a->rate;
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, &rate, sizeof rate);
    XXH3_128bits_update(st, a->pcm, a->n * sizeof(float));
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    XXH3_freeState(st);
    memcpy(a->hash, c.digest, 16);
    return 0;
}

void hr_audio_deinit(hr_audio *a) {
    if (!a)
        return;
    free(a->pcm);
    memset(a, 0, sizeof *a);
}
