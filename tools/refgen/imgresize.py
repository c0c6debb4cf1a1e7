#!/usr/bin/python3
"""The resize step of the Hugging Face image processors, which hearth ports
bit for bit (src/media/imgproc.c), from either of transformers 5.17's
backends:

  --backend pil          PIL's Image.resize (the PIL backend). Runs with
                         Debian's python3-pil (Pillow 9.4; the resampling
                         code is the same in later versions):
                         /usr/bin/python3 tools/refgen/imgresize.py
                         --out tests/fixtures/vision/resize.json
  --backend torchvision  torchvision's resize of a uint8 tensor, antialiased
                         (the torchvision backend, what AutoImageProcessor
                         loads): torch's own uint8 kernels (torch >= 2.1,
                         on the CPU). On the GPU machine:
                         python3 tools/refgen/imgresize.py --backend
                         torchvision --out tests/fixtures/vision/resize_torchvision.json

Source images are a formula both sides compute (pattern() here and in
tests/media/test_imgproc.c); each case records the sha256 of the resized RGB
bytes (rows of packed RGB). transformers 5.17's convert_to_rgb is PIL's
convert("RGB"), which drops alpha, so the sources are RGB."""
import argparse
import hashlib
import json

from PIL import Image


def pattern(w, h):
    px = bytearray()
    for y in range(h):
        for x in range(w):
            for c in range(3):
                px.append((x * 31 + y * 17 + c * 89 + (x * y) % 7 * 13) % 256)
    return Image.frombytes('RGB', (w, h), bytes(px))


CASES = [  # w, h, dw, dh
    (64, 48, 32, 32), (64, 48, 17, 23), (50, 40, 128, 96), (7, 5, 896, 896), (33, 65, 33, 20),
    (40, 30, 40, 30), (300, 200, 896, 896), (1000, 700, 896, 896), (97, 1, 13, 3), (1, 1, 4, 4),
    (97, 61, 64, 64), (50, 40, 64, 64), (1000, 3, 7, 900), (31, 257, 224, 28),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--backend', choices=('pil', 'torchvision'), default='pil')
    a = ap.parse_args()
    meta = {'backend': a.backend, 'pillow': Image.__version__}
    if a.backend == 'torchvision':
        import torch
        from torchvision.transforms.v2 import functional as tvF
        meta.update(torch=torch.__version__, cpu_capability=torch.backends.cpu.get_cpu_capability())
    rows = []
    for w, h, dw, dh in CASES:
        for resample in (Image.BILINEAR, Image.BICUBIC):
            im = pattern(w, h)
            if a.backend == 'pil':
                data = im.resize((dw, dh), resample=resample, reducing_gap=None).tobytes()
            else:
                mode = {Image.BILINEAR: tvF.InterpolationMode.BILINEAR,
                        Image.BICUBIC: tvF.InterpolationMode.BICUBIC}[resample]
                t = tvF.pil_to_tensor(im)[None]  # (1, 3, h, w) uint8, as transformers stacks
                out = tvF.resize(t, [dh, dw], interpolation=mode, antialias=True)
                assert out.dtype == torch.uint8
                data = out[0].permute(1, 2, 0).contiguous().numpy().tobytes()
            rows.append({'w': w, 'h': h, 'dw': dw, 'dh': dh, 'resample': int(resample),
                         'sha256': hashlib.sha256(data).hexdigest()})
    with open(a.out, 'w') as f:
        json.dump(dict(meta, cases=rows), f, indent=1)


if __name__ == '__main__':
    main()
