#!/usr/bin/python3
"""Sampler fixtures from mlx-lm's formulas (mlx_lm/sample_utils.py),
re-expressed in numpy: logits processors (logit_bias, repetition, presence,
frequency penalties), log_softmax, then the filters top_p -> min_p -> XTC ->
top_k and the final distribution softmax(filtered / temp).

Source of truth: ml-explore/mlx-lm mlx_lm/sample_utils.py (make_sampler,
make_logits_processors, apply_top_p/min_p/xtc/top_k, the penalty makers).
XTC is deterministic here because the cases use xtc_probability = 1.
Run: /usr/bin/python3 tools/samplerref/gen.py > tests/fixtures/sample/cases.json
"""
import json
import numpy as np

V = 32
rng = np.random.default_rng(1234)


def processors(logits, hist, p):
    x = logits.astype(np.float64).copy()
    for i, v in p.get("logit_bias", {}).items():
        x[int(i)] += v
    rp = p.get("repetition_penalty", 0)
    if rp and rp != 1 and hist:
        t = np.array(hist[-p.get("repetition_context_size", 20):])
        sel = x[t]
        x[t] = np.where(sel < 0, sel * rp, sel / rp)  # duplicates: once
    pp = p.get("presence_penalty", 0)
    if pp and hist:
        t = np.array(hist[-p.get("presence_context_size", 20):])
        x[t] = x[t] - pp  # fancy-index assignment: once per distinct id
    fp = p.get("frequency_penalty", 0)
    if fp and hist:
        t = np.array(hist[-p.get("frequency_context_size", 20):])
        np.subtract.at(x, t, fp)  # .at[].subtract: once per occurrence
    return x


def log_softmax(x):
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def top_p(lp, top):
    probs = np.exp(lp)
    idx = np.argsort(lp, kind="stable")
    cum = np.cumsum(probs[idx])
    keep = np.zeros(V, bool)
    keep[idx] = cum > 1 - top
    return np.where(keep, lp, -np.inf)


def min_p(lp, mp, keep_n):
    remove = lp < lp.max() + np.log(mp)
    if keep_n > 1:
        remove[np.argsort(-lp, kind="stable")[:keep_n]] = False
    return np.where(remove, -np.inf, lp)


def xtc(lp, thr, special):
    m = lp.max()
    probs = np.exp(lp - m)
    probs /= probs.sum()
    mask = probs > np.where(probs > thr, probs, np.inf).min()
    mask[list(special)] = False
    return np.where(mask, -np.inf, lp)


def top_k(lp, k):
    out = np.full(V, -np.inf)
    idx = np.argsort(-lp, kind="stable")[:k]
    out[idx] = lp[idx]
    return out


def case(params, hist):
    logits = rng.normal(0, 2, V).astype(np.float32)
    x = processors(logits, hist, params)
    lp = log_softmax(x)
    w = lp.copy()
    if 0 < params.get("top_p", 0) < 1:
        w = top_p(w, params["top_p"])
    if params.get("min_p", 0):
        w = min_p(w, params["min_p"], params.get("min_tokens_to_keep", 1))
    if params.get("xtc_probability", 0) > 0:
        w = xtc(w, params.get("xtc_threshold", 0.1), params.get("xtc_special", []))
    if params.get("top_k", 0) > 0:
        w = top_k(w, params["top_k"])
    t = params["temp"]
    fin = np.isfinite(w)
    z = np.where(fin, (w - w[fin].max()) / t, -np.inf)
    probs = np.exp(z)
    probs /= probs.sum()
    return {"params": params, "history": hist, "logits": logits.tolist(),
            "logprobs": lp.tolist(), "probs": probs.tolist()}


hist = [int(v) for v in rng.integers(0, V, 30)]
cases = [
    case({"temp": 1.0}, []),
    case({"temp": 0.7}, hist),
    case({"temp": 1.0, "top_p": 0.9}, []),
    case({"temp": 1.3, "top_p": 0.5}, []),
    case({"temp": 1.0, "min_p": 0.1}, []),
    case({"temp": 1.0, "min_p": 0.5, "min_tokens_to_keep": 3}, []),
    case({"temp": 1.0, "top_k": 5}, []),
    case({"temp": 0.8, "top_k": 1}, []),
    case({"temp": 1.0, "xtc_probability": 1.0, "xtc_threshold": 0.05, "xtc_special": [3, 7]}, []),
    case({"temp": 1.0, "top_p": 0.95, "min_p": 0.05, "top_k": 10}, hist),
    case({"temp": 1.0, "logit_bias": {"5": 10.0, "6": -100.0}}, []),
    case({"temp": 1.0, "repetition_penalty": 1.5, "repetition_context_size": 10}, hist),
    case({"temp": 1.0, "presence_penalty": 1.0, "presence_context_size": 25}, hist),
    case({"temp": 1.0, "frequency_penalty": 0.5, "frequency_context_size": 30}, hist),
    case({"temp": 0.9, "repetition_penalty": 1.2, "presence_penalty": 0.3,
          "frequency_penalty": 0.2, "logit_bias": {"1": 2.5}, "top_p": 0.8}, hist),
]
print(json.dumps({"vocab": V, "source": "mlx_lm/sample_utils.py formulas in numpy",
                  "cases": cases}, indent=1))
