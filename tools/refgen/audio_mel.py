#!/usr/bin/python3
"""Log-mel references for test_mel, made on this machine (no GPU machine):
Debian's python3-numpy and python3-torch (run it with /usr/bin/python3).

What is HF's and what is not: transformers is not installed here and its
source could not be brought here (the `fetch` tool refuses the 1.3 GB
repository), so WhisperFeatureExtractor itself does not run in this script.
Its two paths are rebuilt from transformers 5.17's text, step for step:

  torch path  (what WhisperFeatureExtractor.__call__ runs wherever torch is
              installed, the GPU machine included: _torch_extract_fbank_features)
              torch.stft(float32 samples, n_fft 400, hop 160,
              window=torch.hann_window(400), return_complex=True) (center,
              reflect padding: torch's defaults), |.|^2 with the last frame
              dropped, mel_filters.T (float32) @ it, clamp(1e-10).log10(),
              max(x, max - 8), (x + 4) / 4: torch's own STFT is the oracle here.
  numpy path  (_np_extract_fbank_features: audio_utils.spectrogram) float64:
              np.pad reflect by n_fft // 2, frames every hop, periodic Hann
              (np.hanning(401)[:-1]), np.fft.rfft, |.|^2, np.maximum(1e-10,
              mel_filters.T @ .), log10, astype(float32), the last frame
              dropped, then max - 8 and (x + 4) / 4 in float32.
  mel_filters audio_utils.mel_filter_bank(201, n_mels, 0, 8000, 16000,
              norm="slaney", mel_scale="slaney") in float64 (the Slaney
              scale: linear below 1 kHz, log step ln(6.4) / 27 above;
              triangles between linspace'd mel points; 2 / width scaling).
The processor's part: the clip zero-padded to 480000 samples
(padding="max_length", truncation), the attention mask every 160th sample of
the padding mask: ceil(n / 160) frames.

The real extractor's outputs (both paths) come with
tools/refgen/audio_qwen2.py's fixture (pending: GPU machine); test_audio
compares hearth with those when present.

  /usr/bin/python3 tools/refgen/audio_mel.py --out tests/fixtures/audio/mel

Writes <case>.f32 (mono float32 samples; not for "full", a formula), <case>.np.f32 and <case>.pt.f32
(the features' stored columns: [0, head) then [F - tail, F), n_mels rows of
head + tail floats) and manifest.json (sizes, the attention mask's count,
the value every unstored column holds when the clip is short).
"""
import argparse, json, math, os, struct, sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/e2e/lib"))
from qwen2_audio import clip  # noqa: E402

N_FFT, HOP, RATE, CHUNK = 400, 160, 16000, 30


def hz_to_mel(f):
    return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-300) / 1000.0) * (27.0 / np.log(6.4)),
                    3.0 * f / 200.0)


def mel_to_hz(m):
    return np.where(m >= 15.0, 1000.0 * np.exp(np.log(6.4) / 27.0 * (m - 15.0)), 200.0 * m / 3.0)


def mel_filter_bank(n_mels):
    fft_freqs = np.linspace(0, RATE // 2, N_FFT // 2 + 1)
    mel = np.linspace(hz_to_mel(np.float64(0.0)), hz_to_mel(np.float64(8000.0)), n_mels + 2)
    ff = mel_to_hz(mel)
    diff = np.diff(ff)
    slopes = np.expand_dims(ff, 0) - np.expand_dims(fft_freqs, 1)
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    fb = np.maximum(np.zeros(1), np.minimum(down, up))
    enorm = 2.0 / (ff[2:n_mels + 2] - ff[:n_mels])
    return fb * np.expand_dims(enorm, 0)  # (201, n_mels)


def np_path(x, fb):
    w = np.pad(x.astype(np.float64), (N_FFT // 2, N_FFT // 2), mode="reflect")
    win = np.hanning(N_FFT + 1)[:-1]
    n = 1 + (len(w) - N_FFT) // HOP
    spec = np.empty((N_FFT // 2 + 1, n), np.float64)
    for t in range(n):
        spec[:, t] = np.abs(np.fft.rfft(w[t * HOP:t * HOP + N_FFT] * win)) ** 2
    mel = np.maximum(1e-10, fb.T @ spec)
    s = np.log10(mel).astype(np.float32)[:, :-1]
    s = np.maximum(s, s.max() - np.float32(8.0))
    return (s + np.float32(4.0)) / np.float32(4.0)


def pt_path(x, fb):
    wave = torch.from_numpy(x.astype(np.float32))
    stft = torch.stft(wave, N_FFT, HOP, window=torch.hann_window(N_FFT), return_complex=True)
    mag = stft[..., :-1].abs() ** 2
    mel = torch.from_numpy(fb).float().T @ mag
    s = torch.clamp(mel, min=1e-10).log10()
    s = torch.maximum(s, s.max() - 8.0)
    return ((s + 4.0) / 4.0).numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    S = RATE * CHUNK
    rng = np.random.default_rng(36)
    tone = [math.sin(2 * math.pi * 1000 * i / RATE) for i in range(8000)]
    cases = [  # name, samples, n_mels
        ("short", np.array([v[0] for v in clip(0.05, RATE, 1, 3)], np.float32), 128),
        ("speechlike", np.array([v[0] for v in clip(1.0, RATE, 1, 7)], np.float32), 128),
        ("whisper80", np.array([v[0] for v in clip(0.7, RATE, 1, 9)], np.float32), 80),
        ("clamp", np.array(tone + list(1e-6 * rng.standard_normal(4000)), np.float32), 128),
        ("tiny", np.array([0.5, -0.25, 0.125] * 107 + [0.3], np.float32), 128),  # 322 samples: 3 frames
        # the whole window, no padding; its samples are a formula test_mel computes too
        # (((i * 7919) % 65536 - 32768) / 32768 * 0.3, in double, to float32) instead of a 1.9 MB file
        ("full", ((np.arange(S, dtype=np.int64) * 7919 % 65536 - 32768) / 32768.0 * 0.3).astype(np.float32), 128),
    ]
    manifest = []
    for name, x, n_mels in cases:
        assert len(x) <= S
        fb = mel_filter_bank(n_mels)
        padded = np.zeros(S, np.float32)
        padded[:len(x)] = x
        mnp, mpt = np_path(padded, fb), pt_path(padded, fb)
        F = mnp.shape[1]
        assert F == S // HOP and mpt.shape == mnp.shape
        valid = -(-len(x) // HOP)
        if len(x) < S:
            head, tail = min(valid + 4, F), 0
            for m in (mnp, mpt):
                assert (m[:, head:] == m[0, -1]).all(), name
        else:
            head, tail = 40, 40
        cols = list(range(head)) + list(range(F - tail, F))
        if name != "full":
            x.astype("<f4").tofile(os.path.join(a.out, name + ".f32"))
        np.ascontiguousarray(mnp[:, cols], "<f4").tofile(os.path.join(a.out, name + ".np.f32"))
        np.ascontiguousarray(mpt[:, cols], "<f4").tofile(os.path.join(a.out, name + ".pt.f32"))
        manifest.append({"case": name, "samples": len(x), "n_mels": n_mels, "frames": F, "valid": valid,
                         "head": head, "tail": tail, "pad_np": float(mnp[0, -1]), "pad_pt": float(mpt[0, -1]),
                         "np_vs_pt_max_abs": float(np.abs(mnp - mpt).max())})
        print(name, "np vs torch max |diff|", manifest[-1]["np_vs_pt_max_abs"])
    json.dump({"numpy": np.__version__, "torch": torch.__version__, "cases": manifest},
              open(os.path.join(a.out, "manifest.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
