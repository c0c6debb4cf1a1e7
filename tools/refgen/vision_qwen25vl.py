#!/usr/bin/env python3
"""Reference for hearth's Qwen2.5-VL vision path: a tiny random-weight
Qwen2_5_VLForConditionalGeneration (transformers 5.17, eager, float32, CPU),
three PNG images, and what transformers computes from them:

  pixel_values      the image processor's output (Qwen2VLImageProcessor,
                    what AutoImageProcessor loads; its class is recorded):
                    (n_patches, C * T * P * P) per image, patches in the
                    processor's order, and image_grid_thw (t, h, w)
  resized           the size smart_resize chose (height, width)
  vision_hidden     the ViT's output before the patch merger, in the
                    processor's patch order (HF runs it in window order;
                    un-permuted here with the window index), (n_patches, d)
  image_features    the merger's output as get_image_features gives it,
                    (n_patches / merge^2, text hidden)
  position_ids      the M-RoPE positions (3, n) of the prompt (get_rope_index
                    with mm_token_type_ids, which 5.17's forward needs to
                    compute them at all: without, it gives every token one
                    position; the difference is recorded)
  logits            the full model's logits over a prompt with the two first
                    images placed as the processor places them
                    (<|vision_start|>, <|image_pad|> x tokens,
                    <|vision_end|>), then 8 greedy tokens (a full forward
                    each step, no cache), logprobs and top-2 margins.

The tiny tower keeps every mechanism of the real one: windowed attention
(window_size 24: 3 x 3 merged tokens a window, with padding at the grid's
edge) in blocks 0 and 2, full attention in 1 and 3, 2D rotary positions, the
temporal patch (an image is its frame twice), and a merge of 2 x 2 patches.
smart_resize is exercised enlarging, shrinking (max_pixels) and with
Python's round-half-even (a 20 x 12 image).

Writes DIR/model/ (save_pretrained + preprocessor_config.json), DIR/images/
(PNGs made with PIL from a formula), DIR/ref.json and DIR/*.f32 (raw
little-endian float32, shapes in ref.json). About 500 KB.

Usage (GPU machine, from the worktree root):
  python3 tools/refgen/vision_qwen25vl.py --out tests/fixtures/vision/qwen2_5_vl
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

from vision import pattern, write_f32  # noqa: E402  (tools/refgen/vision.py)

VOCAB = 256
VSTART, VEND, IMG, VID = 250, 251, 252, 253
PATCH, MERGE, TPATCH, WINDOW = 4, 2, 2, 24
MIN_PIXELS, MAX_PIXELS = 256, 4096
N_GEN = 8


# file, width, height, alpha, salt
IMAGES = [("a.png", 50, 40, False, 0), ("b.png", 97, 61, True, 7), ("c.png", 20, 12, False, 91)]


def reinit(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            n = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                v = 0.1 * n
            elif ("norm" in name or "ln_q" in name) and p.ndim == 1:
                v = 1.0 + 0.2 * n  # Qwen2 RMSNorms are x * w
            elif "embed_tokens" in name:
                v = 0.5 * n
            else:
                fan_in = int(np.prod(p.shape[1:])) if p.ndim > 1 else p.shape[0]
                v = n * (0.9 / fan_in ** 0.5)
            p.copy_(v)


def window_index(grid_thw):
    """transformers' Qwen2_5_VisionTransformerPretrainedModel.get_window_index
    (the merged-token order the windowed blocks run in), written out here so
    that the fixture does not depend on the method's name."""
    out, base = [], 0
    vw = WINDOW // MERGE // PATCH
    for t, h, w in grid_thw.tolist():
        lh, lw = h // MERGE, w // MERGE
        index = torch.arange(t * lh * lw).reshape(t, lh, lw)
        ph, pw = vw - lh % vw, vw - lw % vw
        nh, nw = (lh + ph) // vw, (lw + pw) // vw
        padded = torch.nn.functional.pad(index, (0, pw, 0, ph), "constant", -100)
        padded = padded.reshape(t, nh, vw, nw, vw).permute(0, 1, 3, 2, 4).reshape(-1)
        out.append(padded[padded != -100] + base)
        base += t * lh * lw
    return torch.cat(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = args.out
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    torch.manual_seed(0)

    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                rms_norm_eps=1e-6, tie_word_embeddings=False, hidden_act="silu",
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                 "mrope_section": [2, 3, 3]},
                pad_token_id=0, bos_token_id=1, eos_token_id=2)
    vision = dict(depth=4, hidden_size=16, hidden_act="silu", intermediate_size=32, num_heads=2,
                  in_channels=3, patch_size=PATCH, spatial_merge_size=MERGE,
                  temporal_patch_size=TPATCH, window_size=WINDOW, out_hidden_size=64,
                  fullatt_block_indexes=[1, 3])
    cfg = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision,
                                        image_token_id=IMG, video_token_id=VID,
                                        vision_start_token_id=VSTART, vision_end_token_id=VEND,
                                        tie_word_embeddings=False)
    model = transformers.Qwen2_5_VLForConditionalGeneration(cfg).eval()
    reinit(model, zlib.crc32(b"qwen2.5-vl-vision"))
    mdir = os.path.join(out, "model")
    model.save_pretrained(mdir)
    model = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(
        mdir, attn_implementation="eager", dtype=torch.float32).eval()

    proc_cls = getattr(transformers, "Qwen2VLImageProcessor", None)
    if proc_cls is None:
        proc_cls = transformers.Qwen2VLImageProcessorFast
    proc = proc_cls(size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
                    patch_size=PATCH, temporal_patch_size=TPATCH, merge_size=MERGE)
    proc.save_pretrained(mdir)

    inner = model.model
    visual = getattr(inner, "visual", None) or getattr(model, "visual")
    cap = {}
    visual.merger.register_forward_hook(lambda m, i, o: cap.update(inp=i[0], out=o))

    ref = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "image_processor": type(proc).__name__,
           "image_processor_backend": getattr(proc, "backend", None),
           "vision_start": VSTART, "vision_end": VEND, "image_token": IMG, "images": []}
    feats, grids, pvs = [], [], []
    with torch.no_grad():
        for i, (fname, w, h, alpha, salt) in enumerate(IMAGES):
            pattern(w, h, alpha, salt).save(os.path.join(out, "images", fname))
            im = Image.open(os.path.join(out, "images", fname))
            im.load()
            enc = proc(images=[im], return_tensors="pt")
            pv = enc["pixel_values"].to(torch.float32)
            grid = enc["image_grid_thw"]
            cap.clear()
            ft = visual(pv, grid_thw=grid)
            if not torch.is_tensor(ft):
                po = getattr(ft, "pooler_output", None)
                ft = po if po is not None else ft[0]
            wi = window_index(grid)
            if hasattr(visual, "get_window_index"):
                hf_wi = visual.get_window_index(grid)[0]
                assert torch.equal(hf_wi.to(wi.dtype), wi), "window index differs from transformers'"
            rev = torch.argsort(wi)
            unit = MERGE * MERGE
            hin = cap["inp"].reshape(-1, unit, cap["inp"].shape[-1])[rev].reshape(-1, cap["inp"].shape[-1])
            merged = cap["out"][rev]
            ref.setdefault("merger_vs_visual_max_diff", 0.0)
            if merged.shape == ft.shape:
                ref["merger_vs_visual_max_diff"] = max(ref["merger_vs_visual_max_diff"],
                                                       float((merged - ft).abs().max()))
            g = inner.get_image_features(pv, grid)
            if not torch.is_tensor(g):
                po = getattr(g, "pooler_output", None)
                g = po if po is not None else g[0]
            if isinstance(g, (list, tuple)):
                g = torch.cat(list(g))
            ref.setdefault("get_image_features_max_diff", 0.0)
            if torch.is_tensor(g) and g.numel() == ft.numel():
                ref["get_image_features_max_diff"] = max(
                    ref["get_image_features_max_diff"], float((g.reshape(ft.shape) - ft).abs().max()))
            feats.append(ft)
            grids.append(grid)
            pvs.append(pv)
            t_, gh, gw = (int(x) for x in grid[0])
            ref["images"].append({
                "file": "images/" + fname, "size": [h, w],
                "resized": [gh * PATCH, gw * PATCH], "grid_thw": [t_, gh, gw],
                "tokens": t_ * gh * gw // unit,
                "pixel_values": {"file": f"pixels_{i}.f32", "shape": write_f32(os.path.join(out, f"pixels_{i}.f32"), pv)},
                "vision_hidden": {"file": f"vision_{i}.f32", "shape": write_f32(os.path.join(out, f"vision_{i}.f32"), hin)},
                "image_features": {"file": f"features_{i}.f32", "shape": write_f32(os.path.join(out, f"features_{i}.f32"), ft)},
            })

        # a prompt with images 0 and 1 placed as Qwen2_5_VLProcessor places them
        def span(k):
            return [VSTART] + [IMG] * ref["images"][k]["tokens"] + [VEND]
        prompt = [1, 17, 33, 108] + span(0) + [108, 45, 46] + span(1) + [108, 71]
        pv = torch.cat([pvs[0], pvs[1]])
        grid = torch.cat([grids[0], grids[1]])
        ids = torch.tensor([prompt])
        # transformers 5.17 computes M-RoPE positions only with mm_token_type_ids
        # (the processor's: 1 at image tokens); without them the forward falls
        # back to one position per token
        tt = (ids == IMG).int()
        pos, deltas = inner.get_rope_index(input_ids=ids, mm_token_type_ids=tt, image_grid_thw=grid,
                                           attention_mask=torch.ones_like(ids))
        pos = pos[:, 0, :]
        assert not torch.equal(pos, torch.arange(len(prompt)).expand(3, -1)), "M-RoPE positions are 1D"
        ref["position_ids"] = pos.tolist()
        ref["rope_deltas"] = int(deltas.reshape(-1)[0])
        ids = list(prompt)
        steps = []
        for _ in range(N_GEN):
            t = torch.tensor([ids])
            logits = model(input_ids=t, pixel_values=pv, image_grid_thw=grid,
                           mm_token_type_ids=(t == IMG).int()).logits[0].float()
            if not steps:
                ref["prompt_logits"] = {"file": "prompt_logits.f32",
                                        "shape": write_f32(os.path.join(out, "prompt_logits.f32"), logits)}
                plain = model(input_ids=t, pixel_values=pv, image_grid_thw=grid).logits[0].float()
                ref["logits_without_mm_token_type_ids_max_diff"] = float((plain - logits).abs().max())
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
