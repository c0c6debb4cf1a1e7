#!/usr/bin/env python3
"""Reference generator for hearth's embedding fixtures (sentence-transformers).

Builds tiny random-weight embedding models in the sentence-transformers layout
and records, for a handful of inputs, the token ids the model saw and the
float32 sentence embeddings sentence-transformers produces (the oracle):

  qwen3-embed  Qwen3Model (what AutoModel loads for a Qwen3-Embedding dir:
               tensor names without the "model." prefix), byte-level BPE
               tokenizer whose TemplateProcessing appends <|endoftext|>, last
               token pooling, Normalize, prompts {"query": <instruction>,
               "document": ""} with no default prompt; Matryoshka truncation
               (truncate_dim 16 and 8, re-normalised).
  bert-cls     BertModel (absolute positions, token types, post-LayerNorm,
               exact GELU), WordPiece tokenizer from a small vocab.txt through
               BertTokenizerFast (lower case, accents stripped, Chinese chars
               split), CLS pooling, Normalize.
  bert-mean    the same weights and tokenizer, mean pooling, Normalize,
               prompts {"query": "query: ", "passage": "passage: "} with
               default_prompt_name "query" (e5 style), max_seq_length 24
               (one input is truncated).

Every parameter is re-initialised from torch.Generator seeded with
zlib.crc32(case name).  attn_implementation="eager", float32, CPU, TF32 off.
The oracle is taken from the SAVED directory, reloaded with
SentenceTransformer(dir).

It also writes wordpiece-bert.jsonl: the ids BertTokenizerFast (the bert-cls
tokenizer) gives for every text of the project's tokenizer corpus
(tests/fixtures/tokenizer/qwen3.jsonl, "t" items: the first 40 and every third
one), with and without special tokens ("ids0" only where it is not "ids" less
its first and last id).

Needs torch, transformers, sentence-transformers (the accelerator machine).
The committed fixtures were made with torch 2.11.0, transformers 5.17.0 and
sentence-transformers 6.0.1 (which writes its 6.x layout: "pooling_mode":
"cls", max_seq_length as the tokenizer's model_max_length, modules under
sentence_transformers.base.modules). Known flaw of that run: transformers
5's BertTokenizer takes the vocabulary as `vocab` (a dict, or None for the
five special tokens) and drops an unknown `vocab_file=` keyword silently, so
the saved BERT tokenizer.json had the five special tokens only and every
word was [UNK]: those ids exercise BertNormalizer + BertPreTokenizer word
splitting, not WordPiece matching (tools/tokref/bert.js covers that).
bert_tokenizer() now passes the vocabulary as a dict (transformers 5), falls
back to vocab_file= (transformers 4), and stops if the tokenizer does not
have the whole vocabulary; wordpiece_corpus() stops if most words are [UNK].
Usage: python3 tools/refgen/embed.py --out tests/fixtures/embed [--log FILE]
       python3 tools/refgen/embed.py --vocab-only DIR   (no torch: vocab.txt)
"""

import argparse
import json
import os
import sys
import zlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

QWEN_INSTRUCT = ("Instruct: Given a web search query, retrieve relevant passages that "
                 "answer the query\nQuery:")

INPUTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "What does abate mean?",
    "a",
    "Naïve café in Zürich, 你好世界!",
    "Tell me a story about the sea and the sky and the stars. It is what it is, and that "
    "is that. The cat sat on the mat. In the beginning was the word.",
]
# (prompt_name or None) x input index, per case.  None = what encode() does with no
# prompt_name argument (the default prompt when the model has one).
MATRYOSHKA = (16, 8)


def seed_of(s):
    return zlib.crc32(s.encode("utf-8")) & 0xFFFFFFFF


def wordpiece_vocab():
    """A small deterministic WordPiece vocabulary (a few hundred entries)."""
    v = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    seen = set(v)

    def add(t):
        if t not in seen:
            seen.add(t)
            v.append(t)

    for c in range(33, 127):  # printable ASCII, upper case too (cased variants)
        add(chr(c))
    for c in "abcdefghijklmnopqrstuvwxyz0123456789":
        add("##" + c)
    for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        add("##" + c)
    for c in "éèüöäàçñßłıøåæœ":  # survive only when accents are kept
        add(c)
        add("##" + c)
    for c in "αβγδμπσωабвгдежзиклмнопрстуфхцчшщыэюя":
        add(c)
        add("##" + c)
    for c in "你好世界中文天气很公园日本語東京한국":
        add(c)
    for c in "、。！？「」《》…":
        add(c)
    words = ("the of and to in is was that for on with as by at from his her they be this "
             "have not are but had which one were all we when your can said there use an each "
             "how their if will up other about out many then them these so some would make like "
             "him into time has look two more write go see number no way could people my than "
             "first water been call who oil its now find long down day did get come made may "
             "part hello world quick brown fox jumps over lazy dog what does abate mean tell me "
             "story sea sky star cat sat mat beginning word naive cafe zurich "
             "token trans attention infer quant through server late naïve café "
             "The Hello World What It In").split()
    for w in words:
        add(w)
    for s in ("s ing ed er ly es izer former ence ization put ncy ency tion ation ment ness "
              "able ful less est ers ings ped ted").split():
        add("##" + s)
    return v


def write_vocab(d):
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, "vocab.txt")
    with open(p, "w", encoding="utf-8") as f:
        for t in wordpiece_vocab():
            f.write(t + "\n")
    return p


def bert_tokenizer(transformers, vocab_path):
    """BertTokenizerFast over wordpiece_vocab(), lower case, accents stripped."""
    words = wordpiece_vocab()
    vocab = {t: i for i, t in enumerate(words)}
    kw = dict(do_lower_case=True, tokenize_chinese_chars=True, strip_accents=None)
    cls = getattr(transformers, "BertTokenizerFast", None) or transformers.BertTokenizer
    tok = None
    try:  # transformers 5: the vocabulary is `vocab`; `vocab_file=` is ignored
        tok = cls(vocab=dict(vocab), **kw)
    except (TypeError, ValueError):
        pass
    if tok is None or len(tok.get_vocab()) != len(words):  # transformers 4
        tok = cls(vocab_file=vocab_path, **kw)
    got = tok.get_vocab()
    if len(got) != len(words) or any(got.get(t) != i for t, i in vocab.items()):
        raise SystemExit("BERT tokenizer: %d of %d vocabulary entries at their ids"
                         % (sum(got.get(t) == i for t, i in vocab.items()), len(words)))
    return tok


def corpus_texts():
    texts = []
    with open(os.path.join(ROOT, "tests/fixtures/tokenizer/qwen3.jsonl"), encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            if "t" in o:
                texts.append(o["t"])
    return texts


def randomize(torch, model, seed):
    g = torch.Generator().manual_seed(seed)
    seen = set()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("bias"):
                v = 0.1 * r
            elif p.dim() == 1:
                v = 1.0 + 0.2 * r
            elif "embed" in name:
                v = 0.3 * r
            else:
                v = 0.15 * r
            p.copy_(v)


def qwen_tokenizer(d):
    """The tiny byte-level BPE of tests/fixtures/serve, with Qwen3-Embedding's
    post-processor: TemplateProcessing "$A <|endoftext|>"."""
    src = os.path.join(ROOT, "tests/fixtures/serve")
    tj = json.load(open(os.path.join(src, "tokenizer.json"), encoding="utf-8"))
    eos = next(t for t in tj["added_tokens"] if t["content"] == "<|endoftext|>")
    tj["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}},
                 {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [eos["id"]],
                                             "tokens": ["<|endoftext|>"]}},
    }
    cfg = json.load(open(os.path.join(src, "tokenizer_config.json"), encoding="utf-8"))
    cfg["padding_side"] = "left"
    cfg.pop("chat_template", None)
    os.makedirs(d, exist_ok=True)
    json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8"),
              ensure_ascii=False, indent=1)
    json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"), indent=1)


def build_backbone(torch, transformers, name, outdir, log):
    """Saves a random-weight backbone + tokenizer into outdir; returns hidden size."""
    seed = seed_of(name)
    torch.manual_seed(seed)
    if name.startswith("qwen3"):
        cfg = transformers.Qwen3Config(
            vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            max_position_embeddings=4096, pad_token_id=None, bos_token_id=None,
            eos_token_id=368, tie_word_embeddings=True, use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        model = transformers.Qwen3Model(cfg)
        tok_dir = outdir
        qwen_tokenizer(tok_dir)
    else:
        tok = bert_tokenizer(transformers, write_vocab(outdir))
        tok.model_max_length = 64
        tok.save_pretrained(outdir)
        cfg = transformers.BertConfig(
            vocab_size=len(wordpiece_vocab()), hidden_size=32, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
            type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=0)
        model = transformers.BertModel(cfg, add_pooling_layer=False)
    model = model.to(torch.float32).eval()
    randomize(torch, model, seed)
    model.save_pretrained(outdir)
    log.write("%s: %s, %d params\n" % (name, type(model).__name__,
                                        sum(p.numel() for p in model.parameters())))
    return cfg.hidden_size


def make_case(torch, transformers, st, name, backbone, pooling, prompts, default_prompt,
              max_seq, outdir, log):
    d = os.path.join(outdir, name)
    dim = build_backbone(torch, transformers, backbone, d, log)
    tr = st.models.Transformer(d, max_seq_length=max_seq)
    pool = st.models.Pooling(dim, pooling_mode=pooling)
    model = st.SentenceTransformer(modules=[tr, pool, st.models.Normalize()], device="cpu",
                                   prompts=prompts, default_prompt_name=default_prompt)
    model.save(d)

    # The oracle: the saved directory, loaded fresh.
    m = st.SentenceTransformer(d, device="cpu", model_kwargs={"attn_implementation": "eager"})
    auto = m[0].auto_model
    impl = getattr(auto.config, "_attn_implementation", None)
    if impl != "eager":
        raise RuntimeError("%s: attn_implementation is %r" % (name, impl))
    for k, p in auto.named_parameters():
        if p.dtype != torch.float32:
            raise RuntimeError("%s: %s is %s" % (name, k, p.dtype))
    m.eval()

    prompt_names = [None] + sorted(prompts or {})
    cases = []
    for pn in prompt_names:
        for text in INPUTS:
            kw = {} if pn is None else {"prompt_name": pn}
            emb = m.encode([text], convert_to_numpy=True, batch_size=1, **kw)[0]
            used = pn if pn is not None else default_prompt
            full = (prompts or {}).get(used, "") + text if used else text
            feats = m.tokenize([full])
            ids = [int(x) for x in feats["input_ids"][0].tolist()]
            c = {"text": text, "prompt_name": pn, "ids": ids,
                 "embedding": [float(x) for x in emb.tolist()]}
            if name.startswith("qwen3"):
                c["matryoshka"] = {}
                for k in MATRYOSHKA:
                    t = m.encode([text], convert_to_numpy=True, batch_size=1, truncate_dim=k,
                                 normalize_embeddings=True, **kw)[0]
                    c["matryoshka"][str(k)] = [float(x) for x in t.tolist()]
                    head = emb[:k]
                    nrm = float((head.astype("float64") ** 2).sum()) ** 0.5
                    md = max(abs(float(a) / nrm - float(b)) for a, b in zip(head, t))
                    log.write("   %s: truncate_dim %d vs head/|head| max|d| %.3g\n" % (name, k, md))
            cases.append(c)
    # Token-id path: the model run on exactly these ids (no tokenizer), as the
    # OpenAI "input": [[ids]] form does.
    with torch.no_grad():
        for c in cases[:2]:
            ids = torch.tensor([c["ids"]], dtype=torch.long)
            f = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            if "token_type_ids" in m.tokenize(["x"]):
                f["token_type_ids"] = torch.zeros_like(ids)
            out = m(f)["sentence_embedding"][0]
            diff = max(abs(a - b) for a, b in zip(out.tolist(), c["embedding"]))
            log.write("   %s: ids-forward vs encode max|d| %.3g\n" % (name, diff))
    # Batched encode (padding) vs one at a time.
    batch = m.encode(INPUTS, convert_to_numpy=True, batch_size=len(INPUTS))
    bd = max(abs(float(a) - b) for row, c in zip(batch, cases) for a, b in zip(row, c["embedding"]))
    log.write("   %s: batched vs single max|d| %.3g\n" % (name, bd))

    ref = {
        "case": name, "pooling": pooling, "normalize": True, "dim": dim,
        "max_seq_length": max_seq, "prompts": prompts, "default_prompt_name": default_prompt,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "sentence_transformers": st.__version__},
        "cases": cases,
    }
    with open(os.path.join(d, "ref.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False)
    size = sum(os.path.getsize(os.path.join(r, x)) for r, _, fs in os.walk(d) for x in fs)
    log.write("   %s: %d bytes, files %s\n" % (name, size, sorted(
        os.path.relpath(os.path.join(r, x), d) for r, _, fs in os.walk(d) for x in fs)))
    return m


def wordpiece_corpus(transformers, outdir, log):
    tok = transformers.AutoTokenizer.from_pretrained(os.path.join(outdir, "bert-cls"))
    log.write("bert-cls tokenizer class %s\n" % type(tok).__name__)
    lines = []
    for i, t in enumerate(corpus_texts()):
        if i >= 40 and i % 3:
            continue
        ids = tok(t, add_special_tokens=True)["input_ids"]
        ids0 = tok(t, add_special_tokens=False)["input_ids"]
        o = {"t": t, "ids": ids}
        if ids0 != ids[1:-1]:
            o["ids0"] = ids0
        lines.append(json.dumps(o, ensure_ascii=False))
    unk = tok.convert_tokens_to_ids("[UNK]")
    n = sum(len(json.loads(x)["ids"]) - 2 for x in lines)
    n_unk = sum(json.loads(x)["ids"].count(unk) for x in lines)
    if 2 * n_unk > n:
        raise SystemExit("wordpiece corpus: %d of %d ids are [UNK]" % (n_unk, n))
    log.write("wordpiece corpus: %d ids, %d [UNK]\n" % (n, n_unk))
    p = os.path.join(outdir, "wordpiece-bert.jsonl")
    with open(p, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    log.write("wordpiece corpus: %d strings, %d bytes\n" % (len(lines), os.path.getsize(p)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/embed")
    ap.add_argument("--log", default=None)
    ap.add_argument("--vocab-only", default=None)
    a = ap.parse_args()
    if a.vocab_only:
        print(write_vocab(a.vocab_only), len(wordpiece_vocab()))
        return 0
    import torch
    import transformers
    import sentence_transformers as st
    import sentence_transformers.models  # noqa: F401 (st.models)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(4)
    log = open(a.log, "w") if a.log else sys.stderr
    os.makedirs(a.out, exist_ok=True)
    make_case(torch, transformers, st, "qwen3-embed", "qwen3-embed", "lasttoken",
              {"query": QWEN_INSTRUCT, "document": ""}, None, 512, a.out, log)
    make_case(torch, transformers, st, "bert-cls", "bert", "cls", None, None, 64, a.out, log)
    make_case(torch, transformers, st, "bert-mean", "bert", "mean",
              {"query": "query: ", "passage": "passage: "}, "query", 24, a.out, log)
    wordpiece_corpus(transformers, a.out, log)
    log.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
