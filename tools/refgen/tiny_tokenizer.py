#!/usr/bin/env python3
"""A tiny byte-level BPE tokenizer (vocab < 512) with a ChatML template, so
the tiny fixture models can be served end to end. The merges are learned by
plain BPE from a fixed English text, deterministically.
Run: python3 tools/refgen/tiny_tokenizer.py tests/fixtures/serve
"""
import collections
import json
import os
import re
import sys

TEXT = """The quick brown fox jumps over the lazy dog. Hello world! What does abate mean?
To abate is to lessen or reduce. The cat sat on the mat. In the beginning was the word.
Tell me a story about the sea and the sky and the stars. It is what it is, and that is that.
"""
N_MERGES = 180


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


b2u = bytes_to_unicode()
pat = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
words = collections.Counter("".join(b2u[b] for b in w.encode()) for w in pat.findall(TEXT))
seqs = {w: list(w) for w in words}
vocab = [b2u[b] for b in range(256)]
merges = []
for _ in range(N_MERGES):
    pairs = collections.Counter()
    for w, c in words.items():
        s = seqs[w]
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += c
    if not pairs:
        break
    (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
    merges.append(f"{a} {b}")
    vocab.append(a + b)
    for w in seqs:
        s, out, i = seqs[w], [], 0
        while i < len(s):
            if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(s[i])
                i += 1
        seqs[w] = out
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ids = {t: i for i, t in enumerate(vocab)}
added = []
for t in specials:
    ids[t] = len(ids)
    added.append({"id": ids[t], "content": t, "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": True})
tok = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True},
    "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                       "use_regex": True},
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
              "ignore_merges": False, "vocab": {t: i for t, i in ids.items() if t not in specials},
              "merges": merges},
}
template = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
            "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
       "pad_token": "<|endoftext|>", "chat_template": template, "add_bos_token": False}
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False, indent=1)
json.dump(cfg, open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
print(f"vocab {len(ids)} ({len(merges)} merges), eos {ids['<|im_end|>']}")
