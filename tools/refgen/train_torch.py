#!/usr/bin/env python3
"""Gradient references for `hearth train` from torch autograd alone
(tests/train/test_backprop.c, test_torch_fixture).

tools/refgen/train.py makes the same fixtures through transformers + peft on
the GPU machine. This script needs only torch (any version from 1.13) and
numpy: Debian's python3-torch, python3-numpy. It builds the forward pass of
the tiny fixture models (tests/fixtures/models: llama with GQA, qwen3 with
per-head q/k norms and tied embeddings, qwen2 with q/k/v biases, llama-tied)
in plain torch, float64, from transformers' modeling_llama / modeling_qwen2 /
modeling_qwen3 (RMSNorm, rotate-half RoPE, eager causal attention with
repeated kv heads, SwiGLU), and a LoRA adapter in mlx-lm's layout on the
last `num_layers` blocks: y = x W^T + b + scale * (x lora_a) lora_b, as
peft's LoraLayer with lora_A.weight = lora_a^T, lora_B.weight = lora_b^T,
scaling = scale.

Two checks that the torch model is transformers' model, not a look-alike:
  - here: its log-probabilities against the committed transformers
    references of each base (tests/fixtures/models/<base>/ref.json, top-10
    log-probs of every greedy step of the first prompt) within 1e-4;
  - in test_backprop: hearth's loss on the same batch equals the loss
    written here within 1e-5 relative.

Losses (each a case's "loss" field):
  sft   the mean cross-entropy over the batch's targets, target j of
        sequence s counting when max(offset, 1) <= j < len(s) (hearth's
        definition, docs/training.md).
  dpo   TRL's DPOTrainer (sigmoid), the reference the frozen base;
  orpo  TRL's ORPOTrainer: see preference_loss below.

Per case, OUT/<case>/:
  adapters.safetensors  the adapter the gradients are taken at (float32);
  adapter_config.json   mlx-lm's;
  grads.safetensors     d loss / d lora_a and d lora_b (mlx names, shapes);
  steps.safetensors     the adapter after STEPS mlx.optimizers.AdamW steps
                        on the same batch (mlx-lm's defaults: betas 0.9,
                        0.999, eps 1e-8, weight decay 0.01, no bias
                        correction; w *= 1 - lr wd; m = b1 m + (1 - b1) g;
                        v = b2 v + (1 - b2) g^2; w -= lr m / (sqrt(v) + eps));
  ref.json              base, rank, scale, num_layers, the batch, loss,
                        adamw, the loss before each step.

Usage: python3 tools/refgen/train_torch.py --out tests/fixtures/train
(Debian: apt-get install python3-torch python3-numpy; use /usr/bin/python3
when another python3 comes first on PATH.)
"""

import argparse
import json
import math
import os
import random
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "tests", "fixtures", "models")
SLOTS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
STEPS = 3
ADAMW = {"lr": 1e-2, "b1": 0.9, "b2": 0.999, "eps": 1e-8, "wd": 0.01}
DT = torch.float64

# name, base, rank, scale, num_layers, seed, loss, loss parameter (beta / lambda)
CASES = [
    ("llama", "llama", 2, 2.0, -1, 101, "sft", None),
    ("qwen3", "qwen3", 4, 2.0, 2, 102, "sft", None),
    ("qwen2", "qwen2", 2, 4.0, 1, 103, "sft", None),
    ("llama-tied", "llama-tied", 4, 2.0, 2, 104, "sft", None),
    ("llama-dpo", "llama", 2, 2.0, 2, 105, "dpo", 0.1),
    ("qwen3-orpo", "qwen3", 2, 2.0, 2, 106, "orpo", 0.1),
    ("qwen2-dpo", "qwen2", 2, 4.0, 1, 107, "dpo", 0.1),
]


# ---- safetensors by hand -------------------------------------------------------------------

def st_read(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (path, k, v["dtype"])
        a, b = v["data_offsets"]
        arr = np.frombuffer(raw, dtype="<f4", count=(b - a) // 4, offset=8 + n + a)
        out[k] = torch.from_numpy(arr.reshape(v["shape"]).copy())
    return out


def st_write(path, tensors):
    hdr, blobs, off = {}, [], 0
    for k in sorted(tensors):
        a = tensors[k].detach().to(torch.float32).contiguous().numpy().astype("<f4")
        b = a.tobytes()
        hdr[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---- the model -------------------------------------------------------------------------------

class Model:
    def __init__(self, base):
        d = os.path.join(MODELS, base)
        with open(os.path.join(d, "config.json")) as f:
            self.cfg = json.load(f)
        self.w = {k: v.to(DT) for k, v in st_read(os.path.join(d, "model.safetensors")).items()}
        c = self.cfg
        self.n_layers = c["num_hidden_layers"]
        self.nh, self.nkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim") or c["hidden_size"] // self.nh
        self.eps = c["rms_norm_eps"]
        rp = c.get("rope_parameters") or {"rope_theta": c.get("rope_theta", 10000.0)}
        assert rp.get("rope_type", "default") == "default"
        self.theta = rp["rope_theta"]
        self.vocab = c["vocab_size"]
        self.head = self.w.get("lm_head.weight", self.w["model.embed_tokens.weight"])
        self.lora = {}  # "model.layers.N.<slot>" -> (lora_a (in, r), lora_b (r, out))
        self.scale = 0.0
        self.enabled = True

    def rms(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def proj(self, name, x):
        y = x @ self.w[name + ".weight"].t()
        if name + ".bias" in self.w:
            y = y + self.w[name + ".bias"]
        if self.enabled and name in self.lora:
            a, b = self.lora[name]
            y = y + self.scale * ((x @ a) @ b)
        return y

    def rope(self, x, T):
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2, dtype=torch.int64).to(DT) / self.hd))
        f = torch.outer(torch.arange(T, dtype=DT), inv)
        emb = torch.cat([f, f], -1)
        cos, sin = emb.cos(), emb.sin()
        h = self.hd // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def logits(self, toks):
        """toks: a list of ids -> (len, vocab) logits, float64."""
        T = len(toks)
        x = self.w["model.embed_tokens.weight"][torch.tensor(toks)]
        mask = torch.full((T, T), -math.inf, dtype=DT).triu(1)
        for il in range(self.n_layers):
            p = f"model.layers.{il}."
            h = self.rms(x, self.w[p + "input_layernorm.weight"])
            q = self.proj(p + "self_attn.q_proj", h).view(T, self.nh, self.hd)
            k = self.proj(p + "self_attn.k_proj", h).view(T, self.nkv, self.hd)
            v = self.proj(p + "self_attn.v_proj", h).view(T, self.nkv, self.hd)
            if p + "self_attn.q_norm.weight" in self.w:
                q = self.rms(q, self.w[p + "self_attn.q_norm.weight"])
                k = self.rms(k, self.w[p + "self_attn.k_norm.weight"])
            q = self.rope(q.transpose(0, 1), T)  # (nh, T, hd)
            k = self.rope(k.transpose(0, 1), T)
            v = v.transpose(0, 1)
            rep = self.nh // self.nkv
            k = k.repeat_interleave(rep, 0)
            v = v.repeat_interleave(rep, 0)
            s = q @ k.transpose(1, 2) / math.sqrt(self.hd) + mask
            o = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(T, self.nh * self.hd)
            x = x + self.proj(p + "self_attn.o_proj", o)
            h = self.rms(x, self.w[p + "post_attention_layernorm.weight"])
            g = self.proj(p + "mlp.gate_proj", h)
            u = self.proj(p + "mlp.up_proj", h)
            x = x + self.proj(p + "mlp.down_proj", torch.nn.functional.silu(g) * u)
        x = self.rms(x, self.w["model.norm.weight"])
        return x @ self.head.t()


def check_transformers(model, base):
    """The model's log-probs against transformers' (the base's ref.json)."""
    with open(os.path.join(MODELS, base, "ref.json")) as f:
        ref = json.load(f)
    c = ref["cases"][0]
    toks = list(c["prompt_tokens"])
    worst = 0.0
    with torch.no_grad():
        for i, step in enumerate(c["steps"]):
            lp = torch.log_softmax(model.logits(toks)[-1], -1)
            for tid, want in step["top"]:
                worst = max(worst, abs(float(lp[tid]) - want))
            toks.append(c["greedy_tokens"][i])
    assert worst < 1e-4, f"{base}: torch forward differs from transformers by {worst}"
    return worst


# ---- losses ------------------------------------------------------------------------------------

def seq_logps(model, toks, off):
    """Sum and count of log p(tok[j] | tok[:j]) over targets j >= max(off, 1)."""
    lp = torch.log_softmax(model.logits(toks[:-1]), -1)
    idx = [j for j in range(1, len(toks)) if j >= max(off, 1)]
    s = sum(lp[j - 1, toks[j]] for j in idx)
    return s, len(idx)


def sft_loss(model, batch):
    tot, n = 0.0, 0
    for toks, off in zip(batch["tokens"], batch["offsets"]):
        s, c = seq_logps(model, toks, off)
        tot, n = tot - s, n + c
    return tot / n


def preference_loss(model, kind, param, batch):
    """Sequences 2i, 2i+1: pair i's prompt + chosen, prompt + rejected; the
    prompt (offset tokens) is no target.

    dpo (TRL DPOTrainer, loss_type "sigmoid", label_smoothing 0): with pi,
      ref the summed completion log-probs under the adapted model and the
      frozen base (the adapter off), z = beta ((pi_c - pi_r) - (ref_c - ref_r)),
      loss = mean over pairs of -log sigmoid(z).
    orpo (TRL ORPOTrainer.odds_ratio_loss, lambda = its beta): p the mean
      completion log-prob, log_odds = (p_c - p_r) - (log1p(-e^p_c) -
      log1p(-e^p_r)), loss = NLL - lambda mean log sigmoid(log_odds), NLL the
      mean cross-entropy over every chosen completion token of the batch.
    """
    toks, offs = batch["tokens"], batch["offsets"]
    pol = [seq_logps(model, t, o) for t, o in zip(toks, offs)]
    np_ = len(toks) // 2
    if kind == "dpo":
        model.enabled = False
        with torch.no_grad():
            ref = [seq_logps(model, t, o)[0] for t, o in zip(toks, offs)]
        model.enabled = True
        z = [param * ((pol[2 * i][0] - pol[2 * i + 1][0]) - (ref[2 * i] - ref[2 * i + 1]))
             for i in range(np_)]
        return sum(-torch.nn.functional.logsigmoid(x) for x in z) / np_
    nll = -sum(pol[2 * i][0] for i in range(np_)) / sum(pol[2 * i][1] for i in range(np_))
    ratio = 0.0
    for i in range(np_):
        pc = pol[2 * i][0] / pol[2 * i][1]
        pr = pol[2 * i + 1][0] / pol[2 * i + 1][1]
        lo = (pc - pr) - (torch.log1p(-torch.exp(pc)) - torch.log1p(-torch.exp(pr)))
        ratio = ratio + torch.nn.functional.logsigmoid(lo)
    return nll - param * ratio / np_


def loss_of(model, kind, param, batch):
    if kind == "sft":
        return sft_loss(model, batch)
    return preference_loss(model, kind, param, batch)


# ---- a case ------------------------------------------------------------------------------------

def sft_batch(vocab, seed):
    rng = random.Random(seed)
    return {"tokens": [[rng.randrange(vocab) for _ in range(n)] for n in (9, 7)],
            "offsets": [0, 3]}


def pref_batch(vocab, seed):
    """Two pairs: a prompt of 3 or 4 tokens, completions of 2..6."""
    rng = random.Random(seed)
    toks, offs = [], []
    for plen, clen, rlen in ((3, 5, 3), (4, 2, 6)):
        prompt = [rng.randrange(vocab) for _ in range(plen)]
        for n in (clen, rlen):
            toks.append(prompt + [rng.randrange(vocab) for _ in range(n)])
            offs.append(plen)
    return {"tokens": toks, "offsets": offs}


def run_case(name, base, rank, scale, num_layers, seed, kind, param, out):
    model = Model(base)
    tw = check_transformers(model, base)
    layers = list(range(model.n_layers)) if num_layers < 0 else \
        list(range(model.n_layers - num_layers, model.n_layers))
    gen = torch.Generator().manual_seed(seed)
    params = []
    for il in layers:
        for slot in SLOTS:
            key = f"model.layers.{il}.{slot}"
            W = model.w[key + ".weight"]  # (out, in)
            o_, i_ = W.shape
            # float32 values (what the fixture file holds), computed in float64
            a = (torch.rand(i_, rank, generator=gen) * 2 - 1) / math.sqrt(i_)
            b = (torch.rand(rank, o_, generator=gen) * 2 - 1) * 0.3
            a = a.to(torch.float32).to(DT).requires_grad_(True)
            b = b.to(torch.float32).to(DT).requires_grad_(True)
            model.lora[key] = (a, b)
            params += [(key + ".lora_a", a), (key + ".lora_b", b)]
    model.scale = scale
    batch = sft_batch(model.vocab, seed) if kind == "sft" else pref_batch(model.vocab, seed)
    cd = os.path.join(out, name)
    os.makedirs(cd, exist_ok=True)
    st_write(os.path.join(cd, "adapters.safetensors"), {k: p for k, p in params})
    with open(os.path.join(cd, "adapter_config.json"), "w") as f:
        json.dump({"fine_tune_type": "lora", "num_layers": num_layers,
                   "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0,
                                       "keys": SLOTS}}, f, indent=4)
    ps = [p for _, p in params]
    loss = loss_of(model, kind, param, batch)
    grads = torch.autograd.grad(loss, ps)
    st_write(os.path.join(cd, "grads.safetensors"), {k: g for (k, _), g in zip(params, grads)})
    m1 = [torch.zeros_like(p) for p in ps]
    m2 = [torch.zeros_like(p) for p in ps]
    losses = []
    for _ in range(STEPS):
        l = loss_of(model, kind, param, batch)
        losses.append(float(l))
        g = torch.autograd.grad(l, ps)
        with torch.no_grad():
            for i, p in enumerate(ps):
                p.mul_(1 - ADAMW["lr"] * ADAMW["wd"])
                m1[i] = ADAMW["b1"] * m1[i] + (1 - ADAMW["b1"]) * g[i]
                m2[i] = ADAMW["b2"] * m2[i] + (1 - ADAMW["b2"]) * g[i] * g[i]
                p.sub_(ADAMW["lr"] * m1[i] / (m2[i].sqrt() + ADAMW["eps"]))
    st_write(os.path.join(cd, "steps.safetensors"), {k: p for k, p in params})
    gmax = max(float(g.abs().max()) for g in grads)
    gmin = min(float(g.abs().min()) for g in grads)
    ref = {"generator": "tools/refgen/train_torch.py", "torch_version": torch.__version__,
           "dtype": "float64", "base": base, "rank": rank, "scale": scale,
           "num_layers": num_layers, "loss_kind": kind, "loss": float(loss),
           "adamw": dict(ADAMW, steps=STEPS), "losses": losses,
           "transformers_logprob_diff": tw}
    if param is not None:
        ref["beta" if kind == "dpo" else "lambda"] = param
    ref.update(batch)
    with open(os.path.join(cd, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"{name}: {kind} loss {float(loss):.7f}, {len(ps)} matrices, |grad| in "
          f"[{gmin:.2e}, {gmax:.3f}], transformers log-probs within {tw:.1e}, losses {losses}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    only = set(filter(None, args.only.split(",")))
    for c in CASES:
        if not only or c[0] in only:
            run_case(*c, args.out)


if __name__ == "__main__":
    sys.exit(main())
