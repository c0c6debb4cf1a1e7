/* libFuzzer: an input_audio part's untrusted bytes. The input is decoded as
 * a WAV file (an error, or a clip within the duration limit whose samples
 * are finite and whose count the bytes could hold, never a crash) and a
 * short decoded clip goes on through Whisper's log-mel features. */
#include "media/mel.h"
#include "media/wav.h"

#include <math.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hr_audio a;
    if (hr_wav_decode(data, size, 2.0, &a, NULL) != 0) {
        if (a.pcm || a.n)
            __builtin_trap();
        return 0;
    }
    if (!a.pcm || !a.n || a.n > size || a.rate < 1 || (double)a.n / a.rate > 2.0 ||
        a.channels < 1 || a.channels > HR_WAV_MAX_CHANNELS)
        __builtin_trap();
    for (size_t i = 0; i < a.n; i++)
        if (!isfinite(a.pcm[i]))
            __builtin_trap();
    hr_mel_cfg c;
    if (hr_mel_cfg_from_json(&c, NULL, NULL) == 0 && (c.chunk = 1) && a.n <= hr_mel_samples(&c)) {
        /* a 1 s window (100 frames) keeps a run fast */
        float *mel = malloc(sizeof(float) * (size_t)c.n_mels * hr_mel_frames(&c));
        int valid = 0;
        if (mel && hr_mel_compute(&c, a.pcm, a.n, mel, &valid, NULL) == 0) {
            if (valid < 1 || (size_t)valid > hr_mel_frames(&c))
                __builtin_trap();
            for (size_t i = 0; i < (size_t)c.n_mels * hr_mel_frames(&c); i++)
                if (!isfinite(mel[i]))
                    __builtin_trap();
        }
        free(mel);
    }
    hr_audio_deinit(&a);
    return 0;
}
