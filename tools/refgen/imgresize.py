#!/usr/bin/python3
"""PIL's Image.resize and alpha_composite, the steps of the Hugging Face
image processors that hearth ports bit for bit (src/media/imgproc.c).

Runs with Debian's python3-pil (Pillow 9.4; the resampling code is the same
in later versions): /usr/bin/python3 tools/refgen/imgresize.py
--out tests/fixtures/vision/resize.json

Source images are a formula both sides compute (pattern() here and in
tests/media/test_imgproc.c); each case records the sha256 of the resized RGB
bytes, and of the RGBA image composited on white then resized (as
transformers' convert_to_rgb does before the resize)."""
import argparse
import hashlib
import json

from PIL import Image


def pattern(w, h, alpha):
    px = bytearray()
    for y in range(h):
        for x in range(w):
            for c in range(3):
                px.append((x * 31 + y * 17 + c * 89 + (x * y) % 7 * 13) % 256)
            if alpha:
                px.append((x * 11 + y * 5) % 256)
    return Image.frombytes('RGBA' if alpha else 'RGB', (w, h), bytes(px))


CASES = [  # w, h, dw, dh
    (64, 48, 32, 32), (64, 48, 17, 23), (50, 40, 128, 96), (7, 5, 896, 896), (33, 65, 33, 20),
    (40, 30, 40, 30), (300, 200, 896, 896), (1000, 700, 896, 896), (97, 1, 13, 3), (1, 1, 4, 4),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    rows = []
    for w, h, dw, dh in CASES:
        for resample in (Image.BILINEAR, Image.BICUBIC):
            for alpha in (False, True):
                im = pattern(w, h, alpha)
                if alpha:  # transformers.image_transforms.convert_to_rgb
                    bg = Image.new('RGBA', im.size, (255, 255, 255))
                    im = Image.alpha_composite(bg, im).convert('RGB')
                out = im.resize((dw, dh), resample=resample, reducing_gap=None)
                rows.append({'w': w, 'h': h, 'dw': dw, 'dh': dh, 'resample': int(resample),
                             'alpha': alpha,
                             'sha256': hashlib.sha256(out.tobytes()).hexdigest()})
    with open(a.out, 'w') as f:
        json.dump({'pillow': Image.__version__, 'cases': rows}, f, indent=1)


if __name__ == '__main__':
    main()
