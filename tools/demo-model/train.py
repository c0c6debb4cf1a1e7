#!/usr/bin/env python3
"""Train hearth's demo tokenizer, main model and draft model; write HF model dirs + golden fixtures.

Runs on the accelerator machine (torch, transformers, tokenizers, safetensors, jinja2).
Input: the corpus made by corpus.py (train.jsonl.xz, valid.jsonl.xz, manifest.json) and the
held-out perplexity text (valid.txt). Output (--out): the model shards of the main model as
separate files (each < 16 MiB) and bundle.tar.gz with everything else, laid out as in the repo:
  models/hearth-demo/{config.json,generation_config.json,model.safetensors.index.json,
                      model-0000k-of-0000n.safetensors,tokenizer.json,tokenizer_config.json}
  models/hearth-demo-draft/{... model.safetensors ...}
  tests/fixtures/demo/golden.json
  results.json   (metrics, hashes, timings, sample transcripts)

Phases: data -> tokenizer -> encode -> self-test of every later code path on a tiny model ->
train main -> save -> train draft -> save -> float32 oracle evaluation from the saved bf16
weights (validation loss/perplexity, mlx_lm-style perplexity of valid.txt, draft agreement,
greedy golden continuations with top-5 logprobs) -> bundle.

Both models train on CTX = 1024-token windows; config.json says max_position_embeddings 2048
(MAX_POS), which is untested past 1024. Training evaluates the validation loss every 50 steps
and keeps the weights with the lowest one (early stopping), so the saved model is the one
before overfitting sets in.
"""

import argparse
import copy
import hashlib
import json
import lzma
import math
import os
import shutil
import tarfile
import time
import traceback

import numpy as np
import torch
import torch.nn.functional as F

T0 = time.time()

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
BOS, EOT, IM_START, IM_END, PAD = range(5)
VOCAB = 8192
CTX = 1024      # training sequence length
MAX_POS = 2048  # max_position_embeddings written to config.json (quality past CTX is untested)
PPL_L = 512     # row length of the valid.txt perplexity fixture (mlx_lm.perplexity's default)
SEED = 20251129

# ChatML, like Qwen's simpler templates, plus the BOS token up front (the tokenizer itself never
# adds special tokens, so this is the only BOS a chat prompt gets).
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}"
)

# Qwen2's pre-tokenizer split (GPT-4-like, single digits), then byte-level mapping.
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

MODELS = {
    # name: (hidden, layers, heads, kv_heads, intermediate, tie, lr, dir)
    "main": dict(hidden=384, layers=10, heads=6, kv_heads=2, inter=1024, tie=True, lr=1.5e-3,
                 dir="models/hearth-demo"),
    "draft": dict(hidden=128, layers=6, heads=4, kv_heads=2, inter=384, tie=True, lr=3e-3,
                  dir="models/hearth-demo-draft"),
}

GOLDEN_PROMPTS = [
    {"name": "chat-abate", "messages": [{"role": "user", "content": "What does abate mean?"}]},
    {"name": "chat-genesis", "messages": [{"role": "user", "content": "Quote Genesis 1:1."}]},
    {"name": "chat-fortune-system", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Tell me a fortune."}]},
    {"name": "text-kjv", "text": "In the beginning God created"},
    {"name": "text-wordnet", "text": "water, H2O (noun):"},
    {"name": "chat-multiturn", "messages": [
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": "I am hearth-demo, a tiny demo model that ships with hearth."},
        {"role": "user", "content": "What does hearth mean?"}]},
]
SAMPLE_CHATS = ["What does abate mean?", "Define dog.", "What is the meaning of happy?",
                "What does hearth mean?", "What is a hearth?", "What is a computer?", "What does serendipity mean?",
                "Quote Genesis 1:1.", "Quote John 3:16.", "What does Psalms 23:1 say?",
                "Tell me a fortune.", "Tell me a riddle.", "Who are you?", "Hello!"]
SAMPLE_TEXTS = ["In the beginning", "abate, let up, slack off, slack, die away (verb):",
                "The meaning of life is"]


def log(*a):
    print("[%6.1fs]" % (time.time() - T0), *a, flush=True)


def sha256_bytes(b):
    return hashlib.sha256(b).hexdigest()


def sha256_file(p):
    with open(p, "rb") as f:
        return sha256_bytes(f.read())


# ------------------------------------------------------------------------------------------------
# data + tokenizer
# ------------------------------------------------------------------------------------------------

def load_jsonl_xz(path):
    blob = lzma.decompress(open(path, "rb").read())
    recs = [json.loads(l) for l in blob.decode("utf-8").splitlines() if l]
    return recs, sha256_bytes(blob)


def make_renderer():
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    tmpl = env.from_string(CHAT_TEMPLATE)

    def render(messages, add_generation_prompt=False):
        return tmpl.render(messages=messages, add_generation_prompt=add_generation_prompt,
                           bos_token=SPECIALS[BOS], eos_token=SPECIALS[IM_END])
    return render


def train_tokenizer(recs, every=3, full_size=True):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    texts = []
    for i, r in enumerate(recs):
        if i % every:  # a deterministic third of the records is plenty for an 8k vocabulary
            continue
        if "text" in r:
            texts.append(r["text"])
        else:
            texts.extend(m["role"] + "\n" + m["content"] for m in r["messages"])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    assert tok.get_vocab_size() == VOCAB or not full_size, tok.get_vocab_size()
    return tok, sum(len(t) for t in texts)


def tokenizer_config():
    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, s in enumerate(SPECIALS)}
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": SPECIALS[BOS],
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": SPECIALS[IM_END],
        "model_max_length": MAX_POS,
        "pad_token": SPECIALS[PAD],
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def write_tokenizer(tok, d):
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=2, ensure_ascii=False)
        f.write("\n")


def encode_all(tok, recs, render):
    strings = [r["text"] if "text" in r else render(r["messages"]) for r in recs]
    enc = getattr(tok, "encode_batch_fast", None) or tok.encode_batch
    out = enc(strings, add_special_tokens=False)
    pieces = []
    for r, e in zip(recs, out):
        ids = e.ids
        if "text" in r:
            pieces.append([BOS] + ids + [EOT])
        else:
            assert ids[0] == BOS and ids[1] == IM_START, ids[:4]
            pieces.append(ids + [EOT])
    flat = np.fromiter((t for p in pieces for t in p), dtype=np.uint16)
    return flat


# ------------------------------------------------------------------------------------------------
# models
# ------------------------------------------------------------------------------------------------

def make_config(spec):
    import inspect
    from transformers import LlamaConfig
    rope = {"rope_theta": 10000.0}
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        rope = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    return LlamaConfig(
        **rope,
        vocab_size=VOCAB, hidden_size=spec["hidden"], intermediate_size=spec["inter"],
        num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kv_heads"], head_dim=spec["hidden"] // spec["heads"],
        max_position_embeddings=MAX_POS, rms_norm_eps=1e-5, hidden_act="silu",
        attention_bias=False, mlp_bias=False, tie_word_embeddings=spec["tie"],
        bos_token_id=BOS, eos_token_id=[IM_END, EOT], pad_token_id=PAD,
        initializer_range=0.02, use_cache=True)


def build_model(spec, seed):
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = make_config(spec)
    try:
        m = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
    except Exception as e:  # noqa
        log("_from_config(sdpa) failed (%r); default attention" % (e,))
        torch.manual_seed(seed)
        m = LlamaForCausalLM(cfg)
    return m.float()


def n_params(m):
    return sum(p.numel() for p in m.parameters())  # tied weights are counted once


def lr_at(step, steps, base, warmup):
    if step < warmup:
        return base * (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


class Batches:
    def __init__(self, data_gpu, batch, seed):
        self.d = data_gpu
        self.b = batch
        self.g = torch.Generator(device=data_gpu.device)
        self.g.manual_seed(seed)
        self.ar = torch.arange(CTX + 1, device=data_gpu.device)

    def next(self):
        ix = torch.randint(0, self.d.numel() - CTX - 1, (self.b,), generator=self.g,
                           device=self.d.device)
        w = self.d[ix[:, None] + self.ar]
        return w[:, :-1], w[:, 1:]


def make_optimizer(model, lr):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def train_step(model, opt, x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=x, use_cache=False).logits
    loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss, gn


@torch.no_grad()
def windows_loss(model, windows, bs=32, autocast=True):
    """Mean next-token NLL over rows of `windows` ([n, L]); mlx_lm.perplexity style."""
    model.eval()
    tot, cnt = 0.0, 0
    for s in range(0, windows.shape[0], bs):
        b = windows[s:s + bs]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=b[:, :-1], use_cache=False).logits
        l = F.cross_entropy(logits.float().reshape(-1, VOCAB), b[:, 1:].reshape(-1),
                            reduction="sum")
        tot += float(l)
        cnt += b[:, 1:].numel()
    model.train()
    return tot / max(1, cnt)


def train_model(name, spec, train_gpu, valid_windows, budget_s, steps_override, batch, seed,
                max_steps=None, eval_every=50, patience=6, max_wall_s=None):
    """Train with a cosine schedule over `steps`; evaluate the validation loss every `eval_every`
    steps and keep the best weights (early stopping: stop after `patience` evaluations without
    improvement, or when `max_wall_s` seconds of training have passed). Returns the best model."""
    dev = train_gpu.device
    model = build_model(spec, seed).to(dev)
    model.train()
    npar = n_params(model)
    log("%s: %d parameters (%.2fM), attn=%s" % (name, npar, npar / 1e6,
                                               getattr(model.config, "_attn_implementation", "?")))
    init_state = copy.deepcopy({k: v.detach().cpu() for k, v in model.state_dict().items()})
    steps = steps_override
    bench_ms = None
    if not steps:
        opt = make_optimizer(model, spec["lr"])
        bt = Batches(train_gpu, batch, seed + 999)
        for i in range(4):
            train_step(model, opt, *bt.next())
        torch.cuda.synchronize()
        t = time.time()
        nb = 12
        for i in range(nb):
            train_step(model, opt, *bt.next())
        torch.cuda.synchronize()
        per = (time.time() - t) / nb
        bench_ms = per * 1000
        steps = max(20, int(budget_s / (per * 1.06)))
        if max_steps:
            steps = min(steps, max_steps)
        log("%s: %.1f ms/step at batch %dx%d -> %d steps for %.0f s (pass --%s-steps %d to "
            "reproduce)" % (name, per * 1000, batch, CTX, steps, budget_s, name, steps))
        model.load_state_dict(init_state)
        del opt
    opt = make_optimizer(model, spec["lr"])
    bt = Batches(train_gpu, batch, seed + 1)
    warmup = max(20, int(0.03 * steps))
    eval_every = max(1, min(eval_every, steps))
    vw = valid_windows[:256]
    hist = []
    losses = []
    best = {"valid_loss": float("inf"), "step": 0, "train_loss": None, "state": None}
    since_best = 0
    stop_reason = "schedule finished"
    t = time.time()
    step = 0
    for step in range(steps):
        lr = lr_at(step, steps, spec["lr"], warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, gn = train_step(model, opt, *bt.next())
        losses.append(loss.detach())
        last = step == steps - 1
        over = max_wall_s is not None and time.time() - t > max_wall_s
        if (step + 1) % eval_every == 0 or last or over:
            tl = float(torch.stack(losses[-eval_every:]).mean())
            vl = windows_loss(model, vw)
            el = time.time() - t
            mark = ""
            if vl < best["valid_loss"]:
                best = {"valid_loss": vl, "step": step + 1, "train_loss": tl,
                        "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
                since_best = 0
                mark = "  *best"
            else:
                since_best += 1
            hist.append({"step": step + 1, "train_loss": tl, "valid_loss": vl, "lr": lr,
                         "grad_norm": float(gn), "elapsed_s": el})
            log("%s step %5d/%d  train %.4f  valid %.4f  lr %.2e  gn %.2f  %.0f s  %.0f tok/s%s" % (
                name, step + 1, steps, tl, vl, lr, float(gn), el,
                (step + 1) * batch * CTX / el, mark))
            if since_best >= patience:
                stop_reason = "early stop: no better validation loss in %d evaluations" % patience
                break
            if over and not last:
                stop_reason = "wall-clock cap of %.0f s reached" % max_wall_s
                break
    torch.cuda.synchronize()
    wall = time.time() - t
    steps_run = step + 1
    final_train = float(torch.stack(losses[-100:]).mean())
    model.load_state_dict(best["state"])
    log("%s: %s after %d steps; keeping step %d (valid %.4f)" % (
        name, stop_reason, steps_run, best["step"], best["valid_loss"]))
    return model, {"params": npar, "steps": steps, "steps_run": steps_run,
                   "stop_reason": stop_reason, "best_step": best["step"],
                   "best_valid_loss_bf16": best["valid_loss"],
                   "train_loss_at_best": best["train_loss"],
                   "eval_every": eval_every, "patience": patience,
                   "valid_rows_for_selection": int(vw.shape[0]),
                   "batch": batch, "ctx": CTX,
                   "tokens_seen": steps_run * batch * CTX,
                   "tokens_seen_by_saved_weights": best["step"] * batch * CTX,
                   "bench_ms_per_step": bench_ms,
                   "train_wall_s": wall, "final_train_loss_last100": final_train,
                   "history": hist, "lr": spec["lr"], "warmup": warmup, "seed": seed,
                   "optimizer": "AdamW(0.9,0.95,eps=1e-8,wd=0.1 on matrices), grad clip 1.0, "
                                "linear warmup then cosine to 10%, bf16 autocast, fp32 master; "
                                "weights of the evaluation with the lowest validation loss kept"}


def save_model(model, tok, d, shard="15MB"):
    if os.path.exists(d):
        shutil.rmtree(d)
    os.makedirs(d)
    m = model.to(torch.bfloat16)
    m.save_pretrained(d, max_shard_size=shard)
    cp = os.path.join(d, "config.json")
    cfg = json.load(open(cp))
    cfg["eos_token_id"] = [IM_END, EOT]
    cfg["bos_token_id"] = BOS
    cfg["pad_token_id"] = PAD
    cfg["torch_dtype"] = "bfloat16"
    cfg["dtype"] = "bfloat16"
    rp = cfg.get("rope_parameters") or {}
    cfg.setdefault("rope_theta", float(rp.get("rope_theta", 10000.0)))
    assert cfg["rope_theta"] == 10000.0, cfg
    cfg.pop("rope_scaling", None) if cfg.get("rope_scaling") is None else None
    with open(cp, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    gen = {"bos_token_id": BOS, "eos_token_id": [IM_END, EOT], "pad_token_id": PAD,
           "do_sample": False, "max_length": MAX_POS}
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2, sort_keys=True)
        f.write("\n")
    write_tokenizer(tok, d)
    files = sorted(os.listdir(d))
    for fn in files:
        assert os.path.getsize(os.path.join(d, fn)) < 16 * 1024 * 1024, fn
    hashes = {fn: sha256_file(os.path.join(d, fn)) for fn in files}
    wh = sha256_bytes("".join(hashes[f] for f in files if f.endswith(".safetensors")).encode())
    return hashes, wh


# ------------------------------------------------------------------------------------------------
# float32 oracle evaluation from the saved bf16 weights
# ------------------------------------------------------------------------------------------------

def load_f32(d, dev):
    from transformers import LlamaForCausalLM
    m = LlamaForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    return m.to(dev).eval()


@torch.no_grad()
def mlx_perplexity(model, ids, dev, L=CTX, bs=8):
    """mlx_lm.perplexity: non-overlapping rows of L tokens, loss on positions 1..L-1, mean NLL."""
    n = len(ids) // L
    data = torch.tensor(ids[:n * L], dtype=torch.long).view(n, L).to(dev)
    losses, argmax = [], []
    for s in range(0, n, bs):
        b = data[s:s + bs]
        logits = model(input_ids=b[:, :-1], use_cache=False).logits.float()
        losses.append(F.cross_entropy(logits.reshape(-1, VOCAB), b[:, 1:].reshape(-1),
                                      reduction="none"))
        argmax.append(logits.argmax(-1).reshape(-1))
    al = torch.cat(losses).double()
    mean = float(al.mean())
    ppl = math.exp(mean)
    se = float(al.std(unbiased=True)) / math.sqrt(al.numel()) * ppl
    return {"rows": n, "tokens_scored": int(al.numel()), "mean_nll": mean, "ppl": ppl,
            "ppl_standard_error": se,
            "row_mean_nll": [float(x) for x in al.view(n, L - 1).mean(1)]}, torch.cat(argmax), data


@torch.no_grad()
def greedy_steps(model, tok, ids, n, dev):
    ids = list(ids)
    steps = []
    for _ in range(n):
        logits = model(input_ids=torch.tensor([ids], device=dev), use_cache=False).logits[0, -1]
        logits = logits.double()
        lp = torch.log_softmax(logits, -1)
        top = torch.topk(lp, 5)
        t = int(top.indices[0])
        steps.append({
            "token": t, "token_str": tok.id_to_token(t),
            "logprob": float(top.values[0]),
            "margin": float(top.values[0] - top.values[1]),
            "top5": [[int(i), float(v)] for i, v in zip(top.indices, top.values)],
            "top5_logits": [float(logits[int(i)]) for i in top.indices],
        })
        ids.append(t)
    return steps


@torch.no_grad()
def greedy_until(model, ids, n, dev, stop=(IM_END, EOT)):
    ids = list(ids)
    out = []
    for _ in range(n):
        logits = model(input_ids=torch.tensor([ids[-CTX:]], device=dev), use_cache=False).logits
        t = int(logits[0, -1].argmax())
        if t in stop:
            break
        out.append(t)
        ids.append(t)
    return out


def prompt_ids(tok, render, p):
    if "messages" in p:
        text = render(p["messages"], add_generation_prompt=True)
    else:
        text = p["text"]
    return text, tok.encode(text, add_special_tokens=False).ids


def evaluate(main_dir, draft_dir, tok, render, valid_stream, valid_txt, dev, n_golden=32,
             sample_tokens=96, quick=False):
    res = {}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    main = load_f32(main_dir, dev)
    draft = load_f32(draft_dir, dev)
    vtxt = open(valid_txt, encoding="utf-8").read()
    vids = tok.encode(vtxt, add_special_tokens=False).ids
    if quick:
        vids = vids[:CTX * 2]
    ppl_m, am_m, data = mlx_perplexity(main, vids, dev, L=PPL_L)
    ppl_d, am_d, _ = mlx_perplexity(draft, vids, dev, L=PPL_L)
    tgt = data[:, 1:].reshape(-1)
    vt = {"file": "tests/fixtures/demo/valid.txt", "bytes": len(vtxt.encode("utf-8")),
          "sha256": sha256_bytes(vtxt.encode("utf-8")), "n_tokens": len(vids),
          "token_ids_sha256": sha256_bytes(np.asarray(vids, dtype="<i4").tobytes()),
          "first_token_ids": vids[:64], "sequence_length": PPL_L,
          "method": ("mlx_lm.perplexity: tokens = encode(valid.txt) with no special tokens "
                     "added; keep floor(n/{L})*{L} tokens; reshape to rows of {L}; per row, NLL "
                     "of token[t+1] given row[0..t] for t = 0..{L2} (rows independent, no "
                     "overlap); ppl = exp(mean NLL over all rows*{L1} positions); standard error "
                     "= ppl * std(NLL, ddof=1) / sqrt(count)").format(L=PPL_L, L1=PPL_L - 1,
                                                                       L2=PPL_L - 2)}
    res["valid_txt"] = dict(vt, main=ppl_m, draft=ppl_d)
    # the same file in rows of the training length CTX (results.json only)
    l_m, _, _ = mlx_perplexity(main, vids, dev, L=CTX)
    l_d, _, _ = mlx_perplexity(draft, vids, dev, L=CTX)
    for v in (l_m, l_d):
        v.pop("row_mean_nll")
    res["valid_txt_rows_of_ctx"] = {"sequence_length": CTX, "main": l_m, "draft": l_d}
    agree_txt = float((am_m == am_d).double().mean())
    res["agreement_valid_txt"] = {
        "positions": int(am_m.numel()), "draft_agrees_with_main": agree_txt,
        "main_top1_accuracy": float((am_m == tgt).double().mean()),
        "draft_top1_accuracy": float((am_d == tgt).double().mean())}
    # validation split (plain text + chat, the token stream used in training): mean NLL
    n = len(valid_stream) // CTX
    if quick:
        n = min(n, 2)
    vs = valid_stream[:n * CTX].tolist()
    vm, am_m2, data2 = mlx_perplexity(main, vs, dev)
    vd, am_d2, _ = mlx_perplexity(draft, vs, dev)
    for v in (vm, vd):
        v.pop("row_mean_nll")
    res["valid_split"] = {"tokens": len(vs), "main": vm, "draft": vd,
                          "draft_agrees_with_main": float((am_m2 == am_d2).double().mean())}
    # golden continuations
    golden = []
    for p in GOLDEN_PROMPTS:
        text, ids = prompt_ids(tok, render, p)
        g = dict(p)
        g["prompt"] = text
        g["prompt_ids"] = ids
        for name, m in (("main", main), ("draft", draft)):
            st = greedy_steps(m, tok, ids, 2 if quick else n_golden, dev)
            out = [s["token"] for s in st]
            g[name] = {"ids": out, "text": tok.decode(out, skip_special_tokens=False),
                       "min_margin": min(s["margin"] for s in st), "steps": st}
        golden.append(g)
    res["golden"] = golden
    # sample transcripts (greedy, stop at <|im_end|> / <|end_of_text|>)
    samples = []
    for q in (SAMPLE_CHATS[:2] if quick else SAMPLE_CHATS):
        text, ids = prompt_ids(tok, render, {"messages": [{"role": "user", "content": q}]})
        s = {"user": q}
        for name, m in (("main", main), ("draft", draft)):
            s[name] = tok.decode(greedy_until(m, ids, 4 if quick else sample_tokens, dev))
        samples.append(s)
    for q in (SAMPLE_TEXTS[:1] if quick else SAMPLE_TEXTS):
        ids = tok.encode(q, add_special_tokens=False).ids
        s = {"text": q}
        for name, m in (("main", main), ("draft", draft)):
            s[name] = tok.decode(greedy_until(m, ids, 4 if quick else 48, dev, stop=(EOT,)),
                                 skip_special_tokens=False)
        samples.append(s)
    res["samples"] = samples
    return res


def check_with_transformers(d, tok, render):
    """Non-fatal: transformers' own tokenizer + chat template agree with ours."""
    out = {}
    try:
        from transformers import AutoTokenizer
        at = AutoTokenizer.from_pretrained(d)
        msgs = GOLDEN_PROMPTS[2]["messages"]
        a = at.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        b = render(msgs, add_generation_prompt=True)
        out["template_matches"] = a == b
        ids_a = at.encode(b, add_special_tokens=False)
        ids_b = tok.encode(b, add_special_tokens=False).ids
        out["encode_matches"] = list(ids_a) == list(ids_b)
        out["class"] = type(at).__name__
        out["eos_token"] = at.eos_token
        out["bos_token"] = at.bos_token
    except Exception as e:  # noqa
        out["error"] = repr(e)
    return out


# ------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="dir with train.jsonl.xz, valid.jsonl.xz")
    ap.add_argument("--valid-txt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/demo-work")
    ap.add_argument("--main-budget", type=float, default=280.0,
                    help="seconds of main training when --main-steps is 0")
    ap.add_argument("--draft-budget", type=float, default=75.0)
    ap.add_argument("--main-steps", type=int, default=1686,
                    help="length of the cosine schedule (0: from budget); 1686 = half of the "
                         "first version's 3372 steps, which overfitted")
    ap.add_argument("--draft-steps", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64, help="sequences of CTX tokens per step")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--patience", type=int, default=6,
                    help="early stop after this many evaluations without a better valid loss")
    ap.add_argument("--deadline", type=float, default=450.0,
                    help="script wall-clock target; training stops early (keeping the best "
                         "weights) to fit")
    ap.add_argument("--smoke", action="store_true", help="tiny data + few steps, for testing")
    args = ap.parse_args()

    dev = torch.device("cuda")
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    log("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
    import tokenizers
    import transformers
    log("transformers", transformers.__version__, "tokenizers", tokenizers.__version__)
    work = args.work
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    os.makedirs(args.out, exist_ok=True)
    results = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                            "tokenizers": tokenizers.__version__,
                            "gpu": torch.cuda.get_device_name(0)},
               "seed": SEED, "timings": {}}

    def bundle():
        results["timings"]["total_s"] = time.time() - T0
        with open(os.path.join(work, "results.json"), "w") as f:
            json.dump(results, f, indent=1, ensure_ascii=False)
            f.write("\n")
        with tarfile.open(os.path.join(args.out, "bundle.tar.gz"), "w:gz") as tf:
            for root, _, files in os.walk(work):
                for fn in sorted(files):
                    p = os.path.join(root, fn)
                    rel = os.path.relpath(p, work)
                    if rel.startswith("models/hearth-demo/model-"):
                        continue  # main shards travel as separate files
                    tf.add(p, arcname=rel)
        log("bundle written", os.path.getsize(os.path.join(args.out, "bundle.tar.gz")), "bytes")

    try:
        # ---- data
        t = time.time()
        train_recs, h_train = load_jsonl_xz(os.path.join(args.data, "train.jsonl.xz"))
        valid_recs, h_valid = load_jsonl_xz(os.path.join(args.data, "valid.jsonl.xz"))
        man = json.load(open(os.path.join(args.data, "manifest.json")))
        assert h_train == man["files"]["train"]["sha256"], "train data hash mismatch"
        assert h_valid == man["files"]["valid"]["sha256"], "valid data hash mismatch"
        if args.smoke:
            train_recs = train_recs[:3000]
        results["data"] = {"train_sha256": h_train, "valid_sha256": h_valid,
                           "valid_txt_sha256": sha256_file(args.valid_txt),
                           "train_records": len(train_recs), "valid_records": len(valid_recs)}
        log("data: train %d records sha256 %s; valid %d records sha256 %s" % (
            len(train_recs), h_train, len(valid_recs), h_valid))
        results["timings"]["data_s"] = time.time() - t

        # ---- self-test of every later code path on a tiny tokenizer + model (fails fast)
        t = time.time()
        render = make_renderer()
        stok, _ = train_tokenizer(train_recs[:3000], every=1, full_size=False)
        s_train = encode_all(stok, train_recs[:3000], render)
        s_valid = encode_all(stok, valid_recs, render)
        s_gpu = torch.from_numpy(s_train.astype(np.int64)).to(dev)
        nv = s_valid.size // CTX
        s_vw = torch.from_numpy(s_valid[:nv * CTX].astype(np.int64)).view(nv, CTX).to(dev)
        tiny = dict(MODELS["draft"], layers=1)
        m, _ = train_model("selftest", tiny, s_gpu, s_vw, 1, 3, 8, SEED)
        d1 = os.path.join("/tmp", "selftest-a")
        save_model(m, stok, d1, shard="1MB")
        assert os.path.exists(os.path.join(d1, "model.safetensors.index.json"))
        ev = evaluate(d1, d1, stok, render, s_valid, args.valid_txt, dev, quick=True)
        assert ev["agreement_valid_txt"]["draft_agrees_with_main"] == 1.0
        log("self-test transformers check:", check_with_transformers(d1, stok, render))
        del m, s_gpu, s_vw
        results["timings"]["selftest_s"] = time.time() - t
        log("self-test passed in %.1f s" % (time.time() - t))

        # ---- tokenizer
        t = time.time()
        tok, tok_chars = train_tokenizer(train_recs)
        tdir = os.path.join(work, "tokenizer")
        write_tokenizer(tok, tdir)
        h_tok = sha256_file(os.path.join(tdir, "tokenizer.json"))
        results["tokenizer"] = {"vocab": VOCAB, "trained_on_chars": tok_chars,
                                "tokenizer_json_sha256": h_tok,
                                "transformers_check": check_with_transformers(tdir, tok, render)}
        results["timings"]["tokenizer_s"] = time.time() - t
        log("tokenizer: %d tokens, trained on %d chars, sha256 %s, %s" % (
            tok.get_vocab_size(), tok_chars, h_tok, results["tokenizer"]["transformers_check"]))

        # ---- encode
        t = time.time()
        train_ids = encode_all(tok, train_recs, render)
        valid_ids = encode_all(tok, valid_recs, render)
        results["tokens"] = {"train": int(train_ids.size), "valid": int(valid_ids.size),
                             "train_sha256": sha256_bytes(train_ids.astype("<u2").tobytes()),
                             "valid_sha256": sha256_bytes(valid_ids.astype("<u2").tobytes()),
                             "chars_per_token": sum(len(r.get("text", "")) + sum(
                                 len(m["content"]) for m in r.get("messages", []))
                                 for r in train_recs) / train_ids.size}
        results["timings"]["encode_s"] = time.time() - t
        log("tokens: train %d (sha256 %s), valid %d, %.2f chars/token" % (
            train_ids.size, results["tokens"]["train_sha256"], valid_ids.size,
            results["tokens"]["chars_per_token"]))
        train_gpu = torch.from_numpy(train_ids.astype(np.int64)).to(dev)
        nv = valid_ids.size // CTX  # non-overlapping rows of CTX tokens
        valid_windows = torch.from_numpy(valid_ids[:nv * CTX].astype(np.int64)).view(nv, CTX).to(dev)

        # ---- main
        budget = args.main_budget
        left = args.deadline - (time.time() - T0) - args.draft_budget - 75
        if not args.main_steps and left < budget:
            log("main budget shrunk from %.0f to %.0f s to meet the deadline" % (budget, left))
            budget = max(30.0, left)
        main_steps = args.main_steps
        if args.smoke:
            budget, main_steps = 5, 0
        # leave room for the draft (its budget + timing) and the evaluation
        cap = args.deadline - (time.time() - T0) - args.draft_budget - 90
        model, info = train_model("main", MODELS["main"], train_gpu, valid_windows, budget,
                                  main_steps, args.batch, SEED, eval_every=args.eval_every,
                                  patience=args.patience, max_wall_s=max(30.0, cap))
        results["main"] = info
        results["main"]["config"] = MODELS["main"]
        mdir = os.path.join(work, MODELS["main"]["dir"])
        hashes, wh = save_model(model, tok, mdir)
        results["main"]["files_sha256"] = hashes
        results["main"]["weights_sha256"] = wh
        for fn in os.listdir(mdir):
            if fn.startswith("model-") and fn.endswith(".safetensors"):
                shutil.copy(os.path.join(mdir, fn), os.path.join(args.out, fn))
        log("main saved: %s weights sha256 %s" % (sorted(os.listdir(mdir)), wh))
        del model
        torch.cuda.empty_cache()

        # ---- draft
        budget = 5 if args.smoke else args.draft_budget
        cap = args.deadline - (time.time() - T0) - 60
        model, info = train_model("draft", MODELS["draft"], train_gpu, valid_windows, budget,
                                  args.draft_steps, args.batch, SEED + 7,
                                  eval_every=args.eval_every, patience=args.patience,
                                  max_wall_s=max(20.0, cap))
        results["draft"] = info
        results["draft"]["config"] = MODELS["draft"]
        ddir = os.path.join(work, MODELS["draft"]["dir"])
        hashes, wh = save_model(model, tok, ddir, shard="15MB")
        results["draft"]["files_sha256"] = hashes
        results["draft"]["weights_sha256"] = wh
        log("draft saved: %s weights sha256 %s" % (sorted(os.listdir(ddir)), wh))
        del model
        torch.cuda.empty_cache()
        results["timings"]["after_training_s"] = time.time() - T0

        # ---- float32 oracle evaluation + fixtures
        t = time.time()
        ev = evaluate(mdir, ddir, tok, render, valid_ids, args.valid_txt, dev)
        results["timings"]["eval_s"] = time.time() - t
        results["transformers_check_main"] = check_with_transformers(mdir, tok, render)
        golden = {
            "about": "Golden outputs of models/hearth-demo (and -draft) computed by transformers "
                     "LlamaForCausalLM in float32 (eager attention, TF32 off, CUDA) from the "
                     "saved bf16 weights. Greedy: argmax at every step, 32 steps, no early stop "
                     "(special tokens included). logprob = log_softmax of float32 logits. margin "
                     "= top1 - top2 logprob. Prompts are encoded with tokenizer.json, no special "
                     "tokens added except those the chat template writes.",
            "oracle": results["versions"],
            "model": MODELS["main"]["dir"], "draft_model": MODELS["draft"]["dir"],
            "main_weights_sha256": results["main"]["weights_sha256"],
            "draft_weights_sha256": results["draft"]["weights_sha256"],
            "tokenizer_json_sha256": h_tok,
            "perplexity": ev["valid_txt"],
            "draft_agreement": ev["agreement_valid_txt"],
            "prompts": ev["golden"],
        }
        fdir = os.path.join(work, "tests/fixtures/demo")
        os.makedirs(fdir, exist_ok=True)
        with open(os.path.join(fdir, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1, ensure_ascii=False)
            f.write("\n")
        ev_small = {k: v for k, v in ev.items() if k != "golden"}
        for k in ("main", "draft"):
            ev_small["valid_txt"][k] = {kk: vv for kk, vv in ev_small["valid_txt"][k].items()
                                        if kk != "row_mean_nll"}
        results["eval"] = ev_small
        # train loss of the saved weights on a fixed sample of training windows
        main32 = load_f32(mdir, dev)
        nrow = min(64, train_ids.size // CTX)
        stride = train_ids.size // nrow
        sample = np.concatenate([train_ids[i * stride:i * stride + CTX] for i in range(nrow)])
        tl, _, _ = mlx_perplexity(main32, sample.tolist(), dev)
        tl.pop("row_mean_nll")
        results["eval"]["train_sample_main"] = tl
        del main32
        vm = ev["valid_split"]["main"]
        log("RESULT main: kept step %d of %d run (%s); train loss at that step %.4f, "
            "train-sample loss %.4f; valid loss "
            "%.4f ppl %.3f; valid.txt ppl %.3f +- %.3f" % (
                results["main"]["best_step"], results["main"]["steps_run"],
                results["main"]["stop_reason"], results["main"]["train_loss_at_best"],
                tl["mean_nll"], vm["mean_nll"],
                vm["ppl"], ev["valid_txt"]["main"]["ppl"],
                ev["valid_txt"]["main"]["ppl_standard_error"]))
        vd = ev["valid_split"]["draft"]
        log("RESULT draft: kept step %d of %d; train loss at that step %.4f; valid loss %.4f "
            "ppl %.3f; valid.txt ppl %.3f; "
            "agreement with main: valid.txt %.4f, valid split %.4f" % (
                results["draft"]["best_step"], results["draft"]["steps_run"],
                results["draft"]["train_loss_at_best"], vd["mean_nll"], vd["ppl"],
                ev["valid_txt"]["draft"]["ppl"],
                ev["agreement_valid_txt"]["draft_agrees_with_main"],
                ev["valid_split"]["draft_agrees_with_main"]))
        for s in ev["samples"]:
            log("SAMPLE", json.dumps(s, ensure_ascii=False))
        for g in ev["golden"]:
            log("GOLDEN %s min margin %.4f: %r" % (g["name"], g["main"]["min_margin"],
                                                    g["main"]["text"]))
    except Exception:
        traceback.print_exc()
        results["error"] = traceback.format_exc()
    finally:
        bundle()
        log("done")


if __name__ == "__main__":
    main()
