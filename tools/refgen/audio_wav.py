"""WAV decoding references for test_wav: each case is a WAV file and the
mono float32 samples the HF audio pipeline would hand Qwen2-Audio's
feature extractor for it (soundfile's scaling, channels averaged as
librosa.load(mono=True) does).

  python3 tools/refgen/audio_wav.py --out tests/fixtures/audio/wav

Runs here (no GPU machine): the integer files are written and read back
with Python's stdlib `wave` module (its readframes is the oracle for the
frame layout); the float and WAVE_FORMAT_EXTENSIBLE files, which `wave`
refuses, are written by hand and read back by struct. Scaling: 8-bit
(x - 128) / 128, 16-bit x / 32768, 24-bit x / 2^23, 32-bit x / 2^31. When
numpy is importable the conversion is done a second time with it
(np.frombuffer, astype(float64), mean over channels, astype(float32)) and
the two must agree bit for bit. Writes <case>.wav, <case>.f32 (the
expected samples, little-endian float32) and manifest.json.
"""
import argparse, json, math, os, random, struct, sys, wave

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../tests/e2e/lib"))
from qwen2_audio import clip  # noqa: E402

try:
    import numpy as np
except ImportError:
    np = None


def ints(frames, bits):
    top = 1 << (bits - 1)
    return [[max(-top, min(top - 1, int(math.floor(v * top)))) for v in fr] for fr in frames]


def int_bytes(q, bits):
    out = bytearray()
    for fr in q:
        for v in fr:
            out += bytes([v + 128]) if bits == 8 else (v & ((1 << bits) - 1)).to_bytes(bits // 8, "little")
    return bytes(out)


def decode_ints(raw, bits, ch):
    w = bits // 8
    vals = []
    for i in range(0, len(raw), w):
        b = raw[i:i + w]
        if bits == 8:
            vals.append((b[0] - 128) / 128.0)
        else:
            v = int.from_bytes(b, "little", signed=True)
            vals.append(v / float(1 << (bits - 1)))
    return [sum(vals[i:i + ch]) / ch for i in range(0, len(vals), ch)]


def numpy_check(raw, bits, ch, is_float, mono):
    if np is None:
        return
    if is_float:
        x = np.frombuffer(raw, "<f4" if bits == 32 else "<f8").astype(np.float64)
    elif bits == 8:
        x = (np.frombuffer(raw, np.uint8).astype(np.float64) - 128) / 128
    elif bits == 24:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = np.where(v >= 1 << 23, v - (1 << 24), v).astype(np.float64) / (1 << 23)
    else:
        x = np.frombuffer(raw, {16: "<i2", 32: "<i4"}[bits]).astype(np.float64) / (1 << (bits - 1))
    y = x.reshape(-1, ch).mean(axis=1).astype(np.float32)
    assert (y == np.array(mono, np.float32)).all(), "numpy and struct disagree"


def riff(chunks):
    body = b"WAVE" + b"".join(cid + struct.pack("<I", len(d)) + d + (b"\0" if len(d) % 2 else b"")
                               for cid, d in chunks)
    return b"RIFF" + struct.pack("<I", len(body)) + body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    manifest = []

    def emit(name, data, mono, rate, ch, bits, is_float):
        open(os.path.join(a.out, name + ".wav"), "wb").write(data)
        open(os.path.join(a.out, name + ".f32"), "wb").write(struct.pack(f"<{len(mono)}f", *mono))
        manifest.append({"case": name, "rate": rate, "channels": ch, "bits": bits, "float": is_float,
                         "frames": len(mono)})

    # integer PCM through the wave module
    for name, rate, ch, bits, sec in (("s16_mono", 16000, 1, 16, 0.05), ("u8_mono", 16000, 1, 8, 0.04),
                                      ("s24_stereo", 16000, 2, 24, 0.03), ("s32_stereo", 16000, 2, 32, 0.03),
                                      ("s16_6ch", 16000, 6, 16, 0.02), ("s16_22k", 22050, 1, 16, 0.02)):
        q = ints(clip(sec, rate, ch, seed=len(manifest) + 3), bits)
        path = os.path.join(a.out, name + ".wav")
        with wave.open(path, "wb") as w:
            w.setnchannels(ch)
            w.setsampwidth(bits // 8)
            w.setframerate(rate)
            w.writeframes(int_bytes(q, bits))
        with wave.open(path, "rb") as w:
            assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (ch, bits // 8, rate)
            raw = w.readframes(w.getnframes())
        mono = decode_ints(raw, bits, ch)
        numpy_check(raw, bits, ch, False, mono)
        emit(name, open(path, "rb").read(), mono, rate, ch, bits, False)
    # floats, extensible, odd chunks: by hand
    for name, bits, ch in (("f32_mono", 32, 1), ("f64_stereo", 64, 2)):
        fr = clip(0.03, 16000, ch, seed=len(manifest) + 3)
        raw = b"".join(struct.pack("<" + ("f" if bits == 32 else "d") * ch, *v) for v in fr)
        vals = struct.unpack("<" + ("f" if bits == 32 else "d") * (len(raw) * 8 // bits), raw)
        mono = [sum(vals[i:i + ch]) / ch for i in range(0, len(vals), ch)]
        numpy_check(raw, bits, ch, True, mono)
        fmt = struct.pack("<HHIIHH", 3, ch, 16000, 16000 * ch * bits // 8, ch * bits // 8, bits)
        emit(name, riff([(b"fmt ", fmt), (b"data", raw)]), mono, 16000, ch, bits, True)
    # WAVE_FORMAT_EXTENSIBLE (PCM sub-format) with a LIST chunk of odd size before the data
    ch, bits = 2, 16
    q = ints(clip(0.03, 16000, ch, seed=41), bits)
    raw = int_bytes(q, bits)
    guid = struct.pack("<H", 1) + bytes.fromhex("000000001000800000aa00389b71")
    fmt = struct.pack("<HHIIHHHHI", 0xFFFE, ch, 16000, 16000 * ch * 2, ch * 2, bits, 22, bits, 3) + guid
    mono = decode_ints(raw, bits, ch)
    numpy_check(raw, bits, ch, False, mono)
    emit("ext_s16_stereo_list", riff([(b"fmt ", fmt), (b"LIST", b"abc"), (b"data", raw)]), mono, 16000, ch,
         bits, False)
    json.dump({"numpy": np.__version__ if np is not None else None, "cases": manifest},
              open(os.path.join(a.out, "manifest.json"), "w"), indent=1)
    print(f"{len(manifest)} cases in {a.out} (numpy cross-check: {'yes' if np is not None else 'no'})")


if __name__ == "__main__":
    main()
