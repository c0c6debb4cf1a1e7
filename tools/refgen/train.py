#!/usr/bin/env python3
"""Reference generator for `hearth train`'s gradient parity (tests/train/test_backprop.c).

For each case: a committed tiny base of tests/fixtures/models (transformers
float32, attn_implementation="eager"), a random LoRA adapter in mlx-lm's layout
on the last `num_layers` blocks (every one of the seven projections), and one
fixed batch of two sequences (the second with a masked prompt).  torch autograd
through peft's LoRA layers gives:

  - loss: the mean cross-entropy over the batch's targets, mlx_lm's
    default_loss without its padding quirk (target j of sequence s counts when
    max(offset, 1) <= j < len(s): hearth's definition, docs/training.md);
  - grads.safetensors: d loss / d lora_a and d lora_b, named and shaped as the
    adapter's tensors (mlx layout: lora_a [in, r], lora_b [r, out]);
  - steps.safetensors + ref.json "losses": STEPS optimizer steps on the same
    batch with mlx.optimizers.AdamW's update (no bias correction, decoupled
    weight decay: w *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    w -= lr m / (sqrt(v) + eps)), the adapter's tensors after the last step
    and the loss before each step.

The mapping to peft (as tools/refgen/lora.py): lora_A.weight = lora_a^T,
lora_B.weight = lora_b^T, lora_alpha = scale * r (scaling = scale).

Needs torch + transformers + peft + safetensors (accelerator machine).
Usage: python3 tools/refgen/train.py --out tests/fixtures/train
Writes, per case, OUT/<case>/{adapters.safetensors, adapter_config.json,
grads.safetensors, steps.safetensors, ref.json}.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "tests", "fixtures", "models")
ALL7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MLX_KEY = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj",
           "v_proj": "self_attn.v_proj", "o_proj": "self_attn.o_proj",
           "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "down_proj": "mlp.down_proj"}

# name, base, rank, scale, num_layers, seed
CASES = [
    ("llama", "llama", 4, 2.0, -1, 101),
    ("qwen3", "qwen3", 4, 2.0, 2, 102),
    ("qwen2", "qwen2", 2, 4.0, 1, 103),
    ("llama-tied", "llama-tied", 4, 2.0, 2, 104),
]
STEPS = 3
ADAMW = {"lr": 1e-2, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "wd": 0.01}
SEQ_LENS = (9, 7)
OFFSETS = (0, 3)


def layers_of(n_layers, num_layers):
    return list(range(n_layers)) if num_layers < 0 else list(range(n_layers - num_layers, n_layers))


def batch_for(vocab, seed):
    import random
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in SEQ_LENS]


def loss_of(torch, model, seqs, offsets):
    total, count = 0.0, 0
    for toks, off in zip(seqs, offsets):
        ids = torch.tensor([toks[:-1]])
        logits = model(input_ids=ids).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        for j in range(1, len(toks)):
            if j >= max(off, 1):
                total = total - logp[j - 1, toks[j]]
                count += 1
    return total / count


def run_case(torch, transformers, peft, st, name, base, rank, scale, num_layers, seed, out):
    d = os.path.join(MODELS, base)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, attn_implementation="eager", dtype=torch.float32).eval()
    cfg = model.config
    n_layers = cfg.num_hidden_layers
    layers = layers_of(n_layers, num_layers)
    lcfg = peft.LoraConfig(r=rank, lora_alpha=scale * rank, lora_dropout=0.0,
                           target_modules=ALL7, layers_to_transform=layers, bias="none")
    pm = peft.get_peft_model(model, lcfg)
    gen = torch.Generator().manual_seed(seed)
    params = {}  # mlx name -> (peft A param, peft B param)
    for li in layers:
        for mod in ALL7:
            parent = pm.base_model.model.model.layers[li]
            lin = getattr(parent.self_attn if mod in ("q_proj", "k_proj", "v_proj", "o_proj")
                          else parent.mlp, mod)
            A, B = lin.lora_A["default"].weight, lin.lora_B["default"].weight
            with torch.no_grad():
                A.copy_(torch.empty_like(A).uniform_(-1, 1, generator=gen) / A.shape[1] ** 0.5)
                B.copy_(torch.empty_like(B).uniform_(-0.3, 0.3, generator=gen))
            params[f"model.layers.{li}.{MLX_KEY[mod]}"] = (A, B)

    def mlx_tensors(get):
        t = {}
        for k, (A, B) in params.items():
            a, b = get(A), get(B)
            t[k + ".lora_a"] = a.detach().t().contiguous().clone()
            t[k + ".lora_b"] = b.detach().t().contiguous().clone()
        return t

    cd = os.path.join(out, name)
    os.makedirs(cd, exist_ok=True)
    st.save_file(mlx_tensors(lambda p: p), os.path.join(cd, "adapters.safetensors"))
    with open(os.path.join(cd, "adapter_config.json"), "w") as f:
        json.dump({"fine_tune_type": "lora", "num_layers": num_layers,
                   "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0,
                                       "keys": [MLX_KEY[m] for m in ALL7]}}, f, indent=4)
    seqs = batch_for(cfg.vocab_size, seed)
    trainable = [p for ab in params.values() for p in ab]
    for p in pm.parameters():
        p.requires_grad_(False)
    for p in trainable:
        p.requires_grad_(True)

    loss = loss_of(torch, pm, seqs, OFFSETS)
    grads = torch.autograd.grad(loss, trainable)
    gmap = dict(zip(trainable, grads))
    st.save_file(mlx_tensors(lambda p: gmap[p]), os.path.join(cd, "grads.safetensors"))

    m1 = [torch.zeros_like(p) for p in trainable]
    m2 = [torch.zeros_like(p) for p in trainable]
    losses = []
    for _ in range(STEPS):
        l = loss_of(torch, pm, seqs, OFFSETS)
        losses.append(float(l))
        g = torch.autograd.grad(l, trainable)
        with torch.no_grad():
            for i, p in enumerate(trainable):
                p.mul_(1 - ADAMW["lr"] * ADAMW["wd"])
                m1[i] = ADAMW["b1"] * m1[i] + (1 - ADAMW["b1"]) * g[i]
                m2[i] = ADAMW["b2"] * m2[i] + (1 - ADAMW["b2"]) * g[i] * g[i]
                p.sub_(ADAMW["lr"] * m1[i] / (m2[i].sqrt() + ADAMW["eps"]))
    st.save_file(mlx_tensors(lambda p: p), os.path.join(cd, "steps.safetensors"))
    with open(os.path.join(cd, "ref.json"), "w") as f:
        json.dump({"base": base, "rank": rank, "scale": scale, "num_layers": num_layers,
                   "tokens": seqs, "offsets": list(OFFSETS), "loss": float(loss),
                   "adamw": dict(ADAMW, steps=STEPS), "losses": losses}, f, indent=1)
    print(f"{name}: loss {float(loss):.6f}, {len(trainable)} matrices, losses {losses}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    import torch
    import transformers
    import peft
    import safetensors.torch as st
    torch.manual_seed(0)
    only = set(filter(None, args.only.split(",")))
    for c in CASES:
        if not only or c[0] in only:
            run_case(torch, transformers, peft, st, *c, args.out)


if __name__ == "__main__":
    sys.exit(main())
