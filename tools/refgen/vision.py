#!/usr/bin/env python3
"""Reference for hearth's Gemma-3 vision path (src/media/imgproc.c,
src/model/vision.c): a tiny random-weight Gemma3ForConditionalGeneration
(transformers 5.17, eager, float32, CPU), three PNG images, and what
transformers computes from them:

  pixel_values      the image processor's output (Gemma3ImageProcessor, the
                    PIL-based one when transformers has it; which one is
                    recorded), one (3, S, S) float32 array per image
  vision_hidden     the SigLIP tower's last_hidden_state, (n_patches, d)
  image_features    the projector's output (get_image_features),
                    (mm_tokens_per_image, text hidden)
  logits            the full model's logits over a prompt that holds the two
                    first images as the processor places them (boi, image
                    soft token x mm_tokens, eoi) with token_type_ids (image
                    tokens attend to each other both ways), then 8 greedy
                    tokens (full forward each step, no cache), logprobs and
                    top-2 margins.

Writes DIR/model/ (save_pretrained + preprocessor_config.json), DIR/images/
(the PNGs, made with PIL from a formula), DIR/ref.json and DIR/*.f32 (raw
little-endian float32, shapes in ref.json). About 600 KB.

Usage (GPU machine, from the worktree root):
  python3 tools/refgen/vision.py --out tests/fixtures/vision/gemma3
"""
import argparse
import json
import os
import zlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402

VOCAB = 512
BOI, EOI, IMG = 500, 501, 502
MM_TOKENS = 16          # 4 x 4 tokens from an 8 x 8 patch grid (pool 2 x 2)
IMAGE_SIZE, PATCH = 64, 8
N_GEN = 8


def pattern(w, h, alpha, salt):
    px = bytearray()
    for y in range(h):
        for x in range(w):
            for c in range(3):
                px.append((x * 31 + y * 17 + c * 89 + (x * y) % 7 * 13 + salt) % 256)
            if alpha:
                px.append((x * 11 + y * 5) % 256)
    return Image.frombytes('RGBA' if alpha else 'RGB', (w, h), bytes(px))


IMAGES = [("a.png", 50, 40, False, 0), ("b.png", 97, 61, True, 7), ("c.png", 64, 64, False, 91)]


def reinit(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            n = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                v = 0.1 * n
            elif "norm" in name and p.ndim == 1:
                # Gemma RMSNorms (text model, mm_soft_emb_norm) are x * (1 + w);
                # SigLIP's LayerNorms are x * w
                gemma = "language_model" in name or "mm_soft_emb_norm" in name
                v = 0.2 * n if gemma else 1.0 + 0.2 * n
            elif "embed_tokens" in name:
                v = 0.07 * n
            elif "position_embedding" in name:
                v = 0.3 * n
            elif "mm_input_projection_weight" in name:
                v = n / (p.shape[0] ** 0.5)
            else:
                fan_in = int(np.prod(p.shape[1:])) if p.ndim > 1 else p.shape[0]
                v = n * (0.6 / fan_in ** 0.5)
            p.copy_(v)


def write_f32(path, t):
    a = np.ascontiguousarray(t.detach().to(torch.float32).cpu().numpy(), dtype="<f4")
    a.tofile(path)
    return list(a.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = args.out
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    torch.manual_seed(0)

    text = transformers.Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
        query_pre_attn_scalar=16, sliding_window=32, layer_types=["sliding_attention", "full_attention"],
        pad_token_id=0, bos_token_id=2, eos_token_id=1)
    vision = transformers.SiglipVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        image_size=IMAGE_SIZE, patch_size=PATCH, layer_norm_eps=1e-6, vision_use_head=False)
    cfg = transformers.Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(),
                                    mm_tokens_per_image=MM_TOKENS, boi_token_index=BOI,
                                    eoi_token_index=EOI, image_token_index=IMG)
    for k, v in (("image_token_id", IMG), ("boi_token_id", BOI), ("eoi_token_id", EOI)):
        setattr(cfg, k, v)
    model = transformers.Gemma3ForConditionalGeneration(cfg).eval()
    reinit(model, zlib.crc32(b"gemma3-vision"))
    mdir = os.path.join(out, "model")
    model.save_pretrained(mdir)
    model = transformers.Gemma3ForConditionalGeneration.from_pretrained(
        mdir, attn_implementation="eager", dtype=torch.float32).eval()

    proc_cls = getattr(transformers, "Gemma3ImageProcessor", None)
    if proc_cls is None:
        proc_cls = transformers.Gemma3ImageProcessorFast
    proc = proc_cls(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    proc.save_pretrained(mdir)

    ref = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "image_processor": type(proc).__name__, "boi": BOI, "eoi": EOI, "image_token": IMG,
           "mm_tokens": MM_TOKENS, "images": []}
    feats = []
    with torch.no_grad():
        for i, (fname, w, h, alpha, salt) in enumerate(IMAGES):
            pattern(w, h, alpha, salt).save(os.path.join(out, "images", fname))
            im = Image.open(os.path.join(out, "images", fname))
            im.load()
            pv = proc(images=[im], return_tensors="pt")["pixel_values"].to(torch.float32)
            vm = model.model.vision_tower(pixel_values=pv).last_hidden_state
            # the projector over the tower's output is what get_image_features
            # computes (5.17 returns an output object, older versions a tensor):
            # taken directly, and compared with it where the shapes agree
            ft = model.model.multi_modal_projector(vm)
            ft = ft.reshape(-1, ft.shape[-1])
            g = model.model.get_image_features(pv)
            if not torch.is_tensor(g):
                po = getattr(g, "pooler_output", None)
                g = po if po is not None else g[0]
            if torch.is_tensor(g) and g.numel() == ft.numel():
                ref.setdefault("get_image_features_max_diff", 0.0)
                ref["get_image_features_max_diff"] = max(
                    ref["get_image_features_max_diff"], float((g.reshape(ft.shape) - ft).abs().max()))
            feats.append(ft)
            ref["images"].append({
                "file": "images/" + fname,
                "pixel_values": {"file": f"pixels_{i}.f32", "shape": write_f32(os.path.join(out, f"pixels_{i}.f32"), pv[0])},
                "vision_hidden": {"file": f"vision_{i}.f32", "shape": write_f32(os.path.join(out, f"vision_{i}.f32"), vm[0])},
                "image_features": {"file": f"features_{i}.f32", "shape": write_f32(os.path.join(out, f"features_{i}.f32"), ft)},
            })

        # a prompt with images 0 and 1 placed as the processor places them
        img_span = [BOI] + [IMG] * MM_TOKENS + [EOI]
        prompt = [2, 17, 33, 108] + img_span + [108, 45, 46] + img_span + [108, 71]
        pv = torch.cat([proc(images=[Image.open(os.path.join(out, "images", IMAGES[k][0]))],
                             return_tensors="pt")["pixel_values"] for k in (0, 1)]).to(torch.float32)
        ids = list(prompt)
        steps = []
        for _ in range(N_GEN):
            t = torch.tensor([ids])
            tt = (t == IMG).long()
            logits = model(input_ids=t, pixel_values=pv, token_type_ids=tt).logits[0].float()
            if not steps:
                ref["prompt_logits"] = {"file": "prompt_logits.f32",
                                        "shape": write_f32(os.path.join(out, "prompt_logits.f32"), logits)}
            last = logits[-1]
            lp = torch.log_softmax(last.double(), -1)
            top = torch.topk(last, 2)
            steps.append({"token": int(top.indices[0]), "logprob": float(lp[top.indices[0]]),
                          "margin": float(top.values[0] - top.values[1])})
            ids.append(int(top.indices[0]))
        ref["prompt"] = prompt
        ref["prompt_images"] = [0, 1]
        ref["greedy"] = steps
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)


if __name__ == "__main__":
    main()
