#!/usr/bin/env python3
"""Reference generator for hearth's LoRA adapter parity fixtures.

Every case is a random-weight LoRA adapter on one of the committed tiny base
models of tests/fixtures/models (made by gen.py; the base is loaded from there,
not rebuilt) and the peft oracle's greedy generations with it:

  - "peft" cases: peft's own LoraConfig + get_peft_model, every lora_A / lora_B
    (and DoRA magnitude) re-initialised from a seeded generator, saved with
    save_pretrained (adapter_model.safetensors + adapter_config.json) and
    reloaded with PeftModel.from_pretrained before the reference is taken.
  - "mlx" cases: an adapter in mlx-lm's layout (adapters.safetensors +
    adapter_config.json, as mlx_lm.lora writes them), see MLX MAPPING below.
    mlx is not available where this runs, so the oracle is the same A/B loaded
    into an equivalent peft model.

For each case and each of the base case's three prompts (gen.prompts_for), the
reference holds the greedy tokens and top-10 logprobs of 16 steps (gen.greedy:
a full forward per step, no KV cache), once with the adapter unmerged (peft's
LoRA layers) and once after merge_and_unload().

MLX MAPPING.  mlx_lm's LoRALinear computes
    y = x W^T + scale * (x @ lora_a) @ lora_b,   lora_a [in, r], lora_b [r, out]
and DoRALinear (fine_tune_type "dora") computes
    y = (m / ||W + scale * lora_b^T lora_a^T||_row) * (x W^T + scale * (x lora_a) lora_b) (+ bias).
peft's LoRA Linear computes x W^T + scaling * (x lora_A^T) lora_B^T with
lora_A.weight [r, in], lora_B.weight [out, r], scaling = lora_alpha / r, and its
DoRA the same magnitude-over-row-norm form.  So:
    lora_A.weight = lora_a^T,  lora_B.weight = lora_b^T,  lora_alpha = scale * r,
    use_rslora = False,  lora_magnitude_vector = m,
and mlx's num_layers N means the last N transformer blocks (layers_to_transform
= [L-N .. L-1]; N = -1 means all).  Without "keys" in lora_parameters mlx-lm
adapts every Linear inside each of those blocks.

Needs torch + transformers + peft + safetensors (accelerator machine).
Usage: python3 tools/refgen/lora.py --out tests/fixtures/lora [--only a,b] [--log F]
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen  # noqa: E402  (prompts_for, greedy, seed_of, N_GEN, TOPK)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

MODELS = os.path.join(HERE, "..", "..", "tests", "fixtures", "models")
ALL7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# mlx-lm's key names inside one transformer block (relative to model.layers.N).
MLX_KEY = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj",
           "v_proj": "self_attn.v_proj", "o_proj": "self_attn.o_proj",
           "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "down_proj": "mlp.down_proj"}

# std of the random lora_A / lora_B entries: with the base's N(0, 0.15^2)
# matrices and scaling ~1-2 the delta moves logits by O(1) without swamping
# the base (ref.json records max |dlogit| vs the base model).
STD_A = 0.1
STD_B = 0.1


def peft_case(name, base, quirks, **lora):
    return dict(name=name, base=base, fmt="peft", quirks=quirks, lora=lora)


def mlx_case(name, base, quirks, rank, scale, num_layers, keys=None, dora=False):
    return dict(name=name, base=base, fmt="mlx", quirks=quirks, rank=rank, scale=scale,
                num_layers=num_layers, keys=keys, dora=dora)


CASES = [
    peft_case("llama-r8", "llama", "peft LoRA r 8, alpha 16 (scaling 2) on q/k/v/o/gate/up/down",
              r=8, lora_alpha=16, target_modules=ALL7),
    peft_case("llama-patterns", "llama",
              "r 4 alpha 8 by default; rank_pattern: q_proj r 16, layer 1's down_proj r 2; "
              "alpha_pattern: v_proj alpha 4, layer 2's o_proj alpha 32; targets q/v/o/down only",
              r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"],
              rank_pattern={"q_proj": 16, "layers.1.mlp.down_proj": 2},
              alpha_pattern={"v_proj": 4, "layers.2.self_attn.o_proj": 32}),
    peft_case("llama-rslora", "llama", "use_rslora: scaling alpha/sqrt(r) = 16/4 = 4 (r 16)",
              r=16, lora_alpha=16, use_rslora=True, target_modules=ALL7),
    peft_case("llama-dora", "llama", "use_dora: magnitude vector m over the row norms of W + s*B*A",
              r=8, lora_alpha=8, use_dora=True, target_modules=ALL7),
    peft_case("llama-layers", "llama", "layers_to_transform [0, 2] on q/gate/up",
              r=8, lora_alpha=8, target_modules=["q_proj", "gate_proj", "up_proj"],
              layers_to_transform=[0, 2]),
    peft_case("qwen3-r8", "qwen3", "qwen3 base (q/k norms, tied embeddings): r 8 alpha 8, "
              "target_modules as a regex string matching all seven",
              r=8, lora_alpha=8,
              target_modules=r".*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"),
    mlx_case("llama-mlx", "llama", "mlx-lm LoRA: rank 8, scale 2.0, num_layers 2 (layers 1-2), "
             "keys q/v/o/down", rank=8, scale=2.0, num_layers=2,
             keys=["self_attn.q_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.down_proj"]),
    mlx_case("llama-mlx-all", "llama", "mlx-lm LoRA: rank 4, scale 4.0, num_layers -1 (all), "
             "no keys (every Linear in the block)", rank=4, scale=4.0, num_layers=-1),
    mlx_case("llama-mlx-dora", "llama", "mlx-lm DoRA (fine_tune_type dora): rank 8, scale 1.0, "
             "num_layers 3, no keys", rank=8, scale=1.0, num_layers=3, dora=True),
]


def load_base(torch, transformers, base):
    d = os.path.join(MODELS, base)
    return transformers.AutoModelForCausalLM.from_pretrained(
        d, attn_implementation="eager", dtype=torch.float32).eval()


def randomize_lora(torch, model, seed):
    """lora_A/lora_B ~ N(0, STD^2); DoRA magnitude = row norm of the adapted
    weight times (1 + 0.1 N) so that m is not the identity choice."""
    g = torch.Generator().manual_seed(seed)
    n = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name:
                p.copy_(STD_A * torch.randn(p.shape, generator=g))
            elif "lora_B" in name:
                p.copy_(STD_B * torch.randn(p.shape, generator=g))
            else:
                continue
            n += p.numel()
        for mname, mod in model.named_modules():
            mv = getattr(mod, "lora_magnitude_vector", None)
            if mv is None or "default" not in mv:
                continue
            w = mod.get_base_layer().weight
            a = mod.lora_A["default"].weight
            b = mod.lora_B["default"].weight
            s = mod.scaling["default"]
            rown = (w + s * (b @ a)).norm(p=2, dim=1)
            mag = mv["default"].weight
            mag.copy_(rown * (1.0 + 0.1 * torch.randn(mag.shape, generator=g)))
            n += mag.numel()
    return n


def logits_last(torch, model, prompt):
    with torch.no_grad():
        return model(input_ids=torch.tensor([prompt], dtype=torch.long),
                     use_cache=False).logits[0, -1].clone()


def refs(torch, model, prompts):
    out, margins = [], []
    for p in prompts:
        g, steps = gen.greedy(torch, model, p)
        out.append({"prompt_tokens": p, "greedy_tokens": g, "steps": steps})
        margins += [s["margin"] for s in steps]
    return out, margins


def mlx_layers(n_layers, num_layers):
    k = n_layers if num_layers < 0 else min(num_layers, n_layers)
    return list(range(n_layers - k, n_layers))


def write_mlx(torch, c, n_layers, dims, seed):
    """Random mlx-lm adapter: returns {(layer, short): (A [in,r], B [r,out], m|None)}."""
    g = torch.Generator().manual_seed(seed)
    keys = c["keys"] or [MLX_KEY[s] for s in ALL7]
    inv = {v: k for k, v in MLX_KEY.items()}
    tensors, parts = {}, {}
    for layer in mlx_layers(n_layers, c["num_layers"]):
        for key in keys:
            short = inv[key]
            din, dout = dims[short]
            a = STD_A * torch.randn((din, c["rank"]), generator=g)
            b = STD_B * torch.randn((c["rank"], dout), generator=g)
            pre = "model.layers.%d.%s." % (layer, key)
            tensors[pre + "lora_a"] = a.contiguous()
            tensors[pre + "lora_b"] = b.contiguous()
            parts[(layer, short)] = [a, b, None]
    return tensors, parts, g


def mlx_config(c):
    lp = {"rank": c["rank"], "dropout": 0.0, "scale": c["scale"]}
    if c["keys"]:
        lp["keys"] = c["keys"]
    # What mlx_lm.lora writes: vars(args) after CONFIG_DEFAULTS are merged.
    return {
        "adapter_path": "adapters", "batch_size": 4, "config": None, "data": "data",
        "fine_tune_type": "dora" if c["dora"] else "lora", "grad_checkpoint": False,
        "iters": 100, "learning_rate": 1e-05, "lora_parameters": lp, "lr_schedule": None,
        "mask_prompt": False, "max_seq_length": 2048, "model": "tiny-" + c["base"],
        "num_layers": c["num_layers"], "optimizer": "adam", "optimizer_config": {"adam": {}},
        "resume_adapter_file": None, "save_every": 100, "seed": 0, "steps_per_eval": 200,
        "steps_per_report": 10, "test": False, "test_batches": 500, "train": True,
        "val_batches": 25, "wandb": None,
    }


def run_case(torch, transformers, peft, st, c, outdir, log):
    seed = gen.seed_of("lora/" + c["name"])
    torch.manual_seed(seed)
    prompts = gen.prompts_for(c["base"])
    d = os.path.join(outdir, c["name"])
    os.makedirs(d, exist_ok=True)
    base_logits = logits_last(torch, load_base(torch, transformers, c["base"]), prompts[2])

    if c["fmt"] == "peft":
        m = peft.get_peft_model(load_base(torch, transformers, c["base"]),
                                peft.LoraConfig(lora_dropout=0.0, bias="none",
                                                task_type="CAUSAL_LM", **c["lora"]))
        nparam = randomize_lora(torch, m, seed)
        built = {k: v.clone() for k, v in m.state_dict().items() if "lora_" in k}
        m.save_pretrained(d)
        del m
        # The reference is what loading the saved adapter gives.
        um = peft.PeftModel.from_pretrained(load_base(torch, transformers, c["base"]), d).eval()
        sd = um.state_dict()
        for k, v in built.items():
            if k not in sd or not torch.equal(sd[k], v):
                raise RuntimeError("reloaded adapter tensor differs: " + k)
        files = sorted(os.listdir(d))
        saved_keys = sorted(st.safe_open(os.path.join(d, "adapter_model.safetensors"),
                                         "pt").keys())
    else:
        base = load_base(torch, transformers, c["base"])
        cfg = base.config
        L = cfg.num_hidden_layers
        H, I = cfg.hidden_size, cfg.intermediate_size
        qd = cfg.num_attention_heads * cfg.head_dim
        kvd = cfg.num_key_value_heads * cfg.head_dim
        dims = {"q_proj": (H, qd), "k_proj": (H, kvd), "v_proj": (H, kvd), "o_proj": (qd, H),
                "gate_proj": (H, I), "up_proj": (H, I), "down_proj": (I, H)}
        tensors, parts, g = write_mlx(torch, c, L, dims, seed)
        layers = mlx_layers(L, c["num_layers"])
        shorts = sorted({s for (_, s) in parts})
        lc = peft.LoraConfig(r=c["rank"], lora_alpha=c["scale"] * c["rank"], lora_dropout=0.0,
                             bias="none", task_type="CAUSAL_LM", target_modules=shorts,
                             layers_to_transform=layers, use_dora=c["dora"])
        um = peft.get_peft_model(base, lc).eval()
        nparam = 0
        with torch.no_grad():
            for (layer, short), (a, b, _) in sorted(parts.items()):
                sub = MLX_KEY[short].split(".")
                mod = um.base_model.model.model.layers[layer]
                for s in sub:
                    mod = getattr(mod, s)
                mod.lora_A["default"].weight.copy_(a.t())
                mod.lora_B["default"].weight.copy_(b.t())
                nparam += a.numel() + b.numel()
                if c["dora"]:
                    w = mod.get_base_layer().weight
                    rown = (w + c["scale"] * (b.t() @ a.t())).norm(p=2, dim=1)
                    mvec = rown * (1.0 + 0.1 * torch.randn(rown.shape, generator=g))
                    mod.lora_magnitude_vector["default"].weight.copy_(mvec)
                    pre = "model.layers.%d.%s." % (layer, MLX_KEY[short])
                    tensors[pre + "m"] = mvec.clone().contiguous()
                    nparam += mvec.numel()
                if abs(mod.scaling["default"] - c["scale"]) > 1e-12:
                    raise RuntimeError("peft scaling %r != mlx scale %r" %
                                       (mod.scaling["default"], c["scale"]))
        n_lora = sum(1 for n, mm in um.named_modules() if hasattr(mm, "lora_A") and "default" in mm.lora_A)
        if n_lora != len(parts):
            raise RuntimeError("peft adapted %d modules, mlx adapter has %d" % (n_lora, len(parts)))
        st.save_file(tensors, os.path.join(d, "adapters.safetensors"))
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump(mlx_config(c), f, indent=4)
        files = sorted(os.listdir(d))
        saved_keys = sorted(tensors)

    unmerged, margins = refs(torch, um, prompts)
    adapted_logits = logits_last(torch, um, prompts[2])
    merged_model = um.merge_and_unload().eval()
    merged, _ = refs(torch, merged_model, prompts)
    merged_logits = logits_last(torch, merged_model, prompts[2])
    ref = {
        "case": c["name"],
        "base": c["base"],
        "format": c["fmt"],
        "quirks": c["quirks"],
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "peft_version": peft.__version__,
        "adapter_keys": saved_keys,
        "max_dlogit_vs_base": float((adapted_logits - base_logits).abs().max()),
        "max_dlogit_merged_vs_unmerged": float((merged_logits - adapted_logits).abs().max()),
        "cases": unmerged,
        "merged_cases": merged,
    }
    with open(os.path.join(d, "ref.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    log.write("== %s (%s on %s, seed %d)\n   %s\n   files %s\n   keys[:4] %s\n"
              "   max|dlogit| vs base %.4g, merged vs unmerged %.3g\n" % (
                  c["name"], c["fmt"], c["base"], seed, c["quirks"], files, saved_keys[:4],
                  ref["max_dlogit_vs_base"], ref["max_dlogit_merged_vs_unmerged"]))
    return nparam, margins, ref


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "fixtures", "lora"))
    ap.add_argument("--only", default="")
    ap.add_argument("--log", default="")
    args = ap.parse_args()

    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    import peft
    import safetensors.torch as st_torch
    import safetensors
    transformers.logging.set_verbosity_error()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_default_dtype(torch.float32)

    class ST:  # the two safetensors entry points used above
        save_file = staticmethod(st_torch.save_file)
        safe_open = staticmethod(safetensors.safe_open)

    only = set(x for x in args.only.split(",") if x)
    outdir = os.path.abspath(args.out)
    os.makedirs(outdir, exist_ok=True)
    log = open(args.log, "w") if args.log else open(os.devnull, "w")
    print("transformers %s torch %s peft %s -> %s" % (
        transformers.__version__, torch.__version__, peft.__version__, outdir))
    failed = []
    t0 = time.time()
    for c in CASES:
        if only and c["name"] not in only:
            continue
        try:
            nparam, margins, ref = run_case(torch, transformers, peft, ST, c, outdir, log)
            print("%-16s %-4s lora params %6d  min_margin %.2e  dlogit vs base %.3f  "
                  "merged-unmerged %.2e" % (c["name"], c["fmt"], nparam, min(margins),
                                            ref["max_dlogit_vs_base"],
                                            ref["max_dlogit_merged_vs_unmerged"]))
        except Exception as e:
            msg = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            failed.append((c["name"], msg))
            print("%-16s FAILED %s" % (c["name"], msg[:300]))
            import traceback
            log.write("== %s FAILED\n%s\n" % (c["name"], traceback.format_exc()))
        log.flush()
    print("done in %.1fs; %d failed" % (time.time() - t0, len(failed)))
    log.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
