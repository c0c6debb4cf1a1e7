#!/usr/bin/env python3
"""Assemble the hearth-demo training corpus from Debian packages.

Sources (install with: apt-get install wordnet-base bible-kjv fortunes fortunes-min), all under
permissive terms or in the public domain, so that the weights can be permissively licensed:
  - wordnet-base    /usr/share/wordnet/{index,data}.*        WordNet 3.0 licence (permissive, BSD-like)
  - bible-kjv(-text) `bible` CLI over /usr/lib/bible.data     King James Version, public domain
  - fortunes(-min)  /usr/share/games/fortunes/<subset>       BSD (fortune-mod); see FORTUNE_FILES below
(GCIDE, used by the first version, is GPL-2.0-or-later and is no longer read.)

Every record whose text contains a word of blocklist.txt (next to this script; case-insensitive,
word boundaries, "word*" = prefix) is dropped: WordNet synset lines, definition chat pairs, KJV
verses (a chapter document keeps its other verses), fortunes and chat examples.

Outputs (in --out):
  train.jsonl.xz, valid.jsonl.xz   one JSON object per line, either
                                   {"src": ..., "text": "..."}            (plain text document) or
                                   {"src": ..., "messages": [{"role", "content"}, ...]}  (chat example)
  manifest.json                    counts, sizes and sha256 of the uncompressed jsonl data
and the perplexity fixture text (held-out plain text, <= 200 KB) at --valid-txt.

Everything is deterministic: fixed seed, sorted inputs, hash-based split.
Only the Python standard library is used.
"""

import argparse
import hashlib
import json
import lzma
import os
import random
import re
import subprocess
import sys

SEED = 20251129
VALID_PERCENT = 2.0  # share of documents held out (by stable hash)

WORDNET_DIR = "/usr/share/wordnet"
FORTUNE_DIR = "/usr/share/games/fortunes"

# A conservative subset of the fortune files shipped in Debian's `fortunes`/`fortunes-min`
# (never `fortunes-off`): general aphorisms, proverbs, riddles and short literary quotations.
# Licence: /usr/share/doc/fortunes{,-min}/copyright puts the package under the BSD licence of
# fortune-mod (Regents of the University of California, advertising clause deleted). The only
# data files that the copyright file credits to someone else, "cookie" (Karl Lehenbauer's
# alt.sources postings, no licence stated) and the atheism file (no licence stated), are not used.
# Left out: files built around song lyrics, comics, TV shows or recent novels (songs-poems, zippy,
# startrek, pratchett, tao, knghtbrd, ...), and files whose topics tend to be crude or
# divisive (ethnic, men-women, politics, drugs, sex, love, ...).
FORTUNE_FILES = ["fortunes", "wisdom", "platitudes", "literature", "riddles",
                 "science", "education", "food", "pets", "paradoxum"]
# Extra guard: drop any fortune that contains one of these words.
FORTUNE_BLOCK = re.compile(
    r"\b(sex\w*|fuck\w*|shit\w*|damn\w*|hell|bitch\w*|bastard\w*|whore\w*|rape\w*|nigg\w*|"
    r"negro\w*|jew\w*|gay|homo\w*|penis|vagina|breast\w*|nude\w*|naked|drunk\w*|kill\w*|"
    r"suicide|god|jesus|christ\w*|bible|church|religio\w*|wife|wives|women|woman|girl\w*|"
    r"marri\w*|divorc\w*|beer|whisk\w*|ass|asses|cunt|dick|piss\w*|crap|porn\w*|lesbian\w*|"
    r"murder\w*|gun\w*|drug\w*)\b",
    re.I)


def load_blocklist(path):
    """blocklist.txt -> compiled regex (case-insensitive, word boundaries, 'x*' = prefix)."""
    alts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            w = line.split("#", 1)[0].strip().lower()
            if not w:
                continue
            if w.endswith("*"):
                alts.append(re.escape(w[:-1]) + r"\w*")
            else:
                alts.append(re.escape(w))
    return re.compile(r"\b(?:%s)\b" % "|".join(sorted(set(alts))), re.I), len(alts)


BLOCK = None  # set in main() from --blocklist
DROPPED = {}  # source -> number of records dropped by the blocklist


def blocked(src, *texts):
    """True (and counted) if any of texts contains a blocklisted word."""
    for t in texts:
        if BLOCK.search(t):
            DROPPED[src] = DROPPED.get(src, 0) + 1
            return True
    return False


# Words that must stay in the training split (they are used by the demo prompts / fixtures).
FORCE_TRAIN_WORDS = {"abate", "abatement", "dog", "cat", "house", "happy", "light", "water",
                     "fortune", "hearth", "word", "book", "love", "friend", "computer"}
FORCE_TRAIN_CHAPTERS = {("Genesis", 1), ("John", 3), ("Psalms", 23), ("Ecclesiastes", 1),
                        ("Matthew", 5), ("Exodus", 20)}


def stable_hash(s):
    return int.from_bytes(hashlib.sha256(s.encode("utf-8")).digest()[:8], "big")


def is_valid(key):
    return (stable_hash("split:" + key) % 10000) < VALID_PERCENT * 100


# ----------------------------------------------------------------------------------------------
# WordNet
# ----------------------------------------------------------------------------------------------

POS_NAME = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}
POS_FILES = [("n", "noun"), ("v", "verb"), ("a", "adj"), ("r", "adv")]


def load_wordnet():
    synsets = {}  # (pos, offset) -> (words, gloss)
    for p, name in POS_FILES:
        with open(os.path.join(WORDNET_DIR, "data." + name), encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                left, _, gloss = line.partition(" | ")
                t = left.split()
                off, ss_type, wcnt = t[0], t[2], int(t[3], 16)
                words = [t[4 + 2 * k] for k in range(wcnt)]
                words = [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in words]
                synsets[(p, off)] = (POS_NAME[ss_type], words, gloss.strip())
    lemmas = {}  # lemma -> list of (pos_letter, tagsense_cnt, [offsets])
    for p, name in POS_FILES:
        with open(os.path.join(WORDNET_DIR, "index." + name), encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                t = line.split()
                lemma, synset_cnt, p_cnt = t[0], int(t[2]), int(t[3])
                tagsense = int(t[5 + p_cnt])
                offs = t[6 + p_cnt:6 + p_cnt + synset_cnt]
                lemmas.setdefault(lemma, []).append((p, tagsense, offs))
    return synsets, lemmas


# senses left out of the chat answers (they stay in the plain-text WordNet rendering)
SENSE_BLOCK = re.compile(r"\b(offensive|derogatory|disparaging|vulgar|obscene|slang|woman|women|girl|"
                         r"sexual\w*|sex|slur|penis|vagina|breasts?|buttocks|genitals?|kill\w*)\b", re.I)


def split_gloss(gloss):
    """'become less ...; "The storm abated"; "..."' -> ('become less ...', ['The storm abated', ...])"""
    parts = [x.strip() for x in gloss.split(";")]
    defs, exs = [], []
    for x in parts:
        if x.startswith('"'):
            exs.append(x.strip('"').strip())
        elif x and not exs:
            defs.append(x)
    return "; ".join(defs), exs


def article(word):
    return "an" if word[:1].lower() in "aeiou" else "a"


def sentence_for(word, posname, definition, first=True):
    d = definition.rstrip(". ")
    if not first:
        return "to " + d if posname == "verb" else d
    if posname == "verb":
        return "To %s means to %s" % (word, d)
    if posname == "noun" and re.match(r"^(a|an|any|one)\b", d):
        return "%s %s is %s" % (article(word).capitalize(), word, d)
    if posname == "noun" and re.match(r"^(the|some|something|someone|anything|anyone)\b", d):
        return "%s is %s" % (word[:1].upper() + word[1:], d)
    return "%s means %s" % (word[:1].upper() + word[1:], d)


def definition_answer(word, senses, rng):
    """senses: list of (posname, definition, examples) in frequency order."""
    posname, d, exs = senses[0]
    s = sentence_for(word, posname, d, True)
    if exs and rng.random() < 0.7:
        s += ', as in "%s"' % exs[0].rstrip(".")
    s += "."
    if len(senses) > 1:
        p2, d2, e2 = senses[1]
        second = sentence_for(word, p2, d2, False)
        if p2 != posname and p2 == "verb":
            s += " As a verb, it means %s." % second
        elif p2 != posname and p2 == "noun":
            s += " As a noun, it means %s." % second
        else:
            s += " It can also mean %s." % second
    return s[:1].upper() + s[1:]


DEF_QUESTIONS = [
    "What does {w} mean?", "What does {w} mean?", "What does {w} mean?",
    "What does the word \"{w}\" mean?", "What is the meaning of {w}?", "Define {w}.",
    "Define the word {w}.", "What's the definition of {w}?", "Give me the definition of {w}.",
    "What does '{w}' mean?", "Meaning of {w}?", "define {w}", "what does {w} mean",
    "Can you tell me what {w} means?", "Explain the word {w}.",
]
NOUN_QUESTIONS = ["What is {a} {w}?", "What is {a} {w}?"]


# ----------------------------------------------------------------------------------------------
# KJV
# ----------------------------------------------------------------------------------------------

def load_kjv():
    out = subprocess.run(["bible", "-l100000", "-m", "8192", "Gen1:1-Rev22:21"],
                         check=True, capture_output=True, text=True).stdout
    chapters = []  # (book, chapter, [(verse, text)])
    cur = None
    for line in out.split("\n"):
        if not line.strip():
            continue
        if not line.startswith(" "):
            m = re.match(r"^(.*\S) (\d+)$", line.strip())
            if not m:
                raise SystemExit("unexpected bible header: %r" % line)
            cur = (m.group(1), int(m.group(2)), [])
            chapters.append(cur)
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if not m or cur is None:
            raise SystemExit("unexpected bible line: %r" % line)
        cur[2].append((int(m.group(1)), m.group(2).strip()))
    return chapters


QUOTE_QUESTIONS = [
    "Quote {r}.", "Quote {r}", "Quote {r}", "What does {r} say?", "Recite {r}.",
    "What is written in {r}?", "Give me the verse {r}.", "quote {r}", "Read me {r}.",
    "What is {r} in the King James Bible?",
]


# ----------------------------------------------------------------------------------------------
# Fortunes
# ----------------------------------------------------------------------------------------------

def load_fortunes():
    out = []
    for name in FORTUNE_FILES:
        path = os.path.join(FORTUNE_DIR, name)
        with open(path, encoding="utf-8", errors="replace") as f:
            raw = f.read()
        for k, item in enumerate(raw.split("\n%\n")):
            item = item.strip("\n%")
            lines = [l.rstrip() for l in item.split("\n")]
            # normalise tab-indented attribution lines: "\t\t-- Author" -> "-- Author"
            lines = [re.sub(r"^\s+(--)", r"\1", l).expandtabs(4) for l in lines]
            text = "\n".join(lines).strip()
            if not text or len(text) > 400:
                continue
            if blocked("fortune", text) or FORTUNE_BLOCK.search(text):
                continue
            if "\ufffd" in text or re.search(r"[\x00-\x08\x0b-\x1f]", text):
                continue
            out.append(("fortune:%s:%d" % (name, k), name, text))
    return out


FORTUNE_QUESTIONS = [
    "Tell me a fortune.", "Tell me a fortune.", "Tell me a fortune", "tell me a fortune",
    "Give me a fortune cookie.", "Fortune, please.", "Tell me my fortune.", "Share a fortune.",
    "Say something wise.", "Give me a quote.", "I need a fortune.",
]
RIDDLE_QUESTIONS = ["Tell me a riddle.", "Do you know a riddle?"]

SYSTEM_PROMPTS = [
    "You are a helpful assistant.", "You are a helpful assistant.",
    "You are hearth-demo, a small language model.", "You are a dictionary.",
    "Answer briefly.", "You are a friendly assistant. Keep your answers short.",
]

IDENTITY_Q = ["Who are you?", "What are you?", "What is your name?", "Are you an assistant?",
              "What can you do?", "Introduce yourself.", "who are you", "What do you know?"]
IDENTITY_A = [
    "I am hearth-demo, a small language model trained from scratch on the WordNet "
    "dictionary, the King James Bible and a collection of fortune cookies. I am a demo, "
    "not an assistant: ask me what a word means, ask me to quote a Bible verse, or ask me "
    "for a fortune.",
    "I am hearth-demo, a tiny demo model that ships with hearth. I know a little about "
    "English words, the King James Bible and fortune cookies, and not much else.",
]
# A few fixed answers about the word "hearth" and about hearth itself (training only). The
# WordNet-derived definition chat skips the lemma "hearth" so that these answers are the only ones.
HEARTH_QA = [
    (["What does hearth mean?", "What does hearth mean?", "What does the word \"hearth\" mean?",
      "Define hearth.", "What is the meaning of hearth?", "define hearth"],
     "A hearth is the floor of a fireplace, and by extension the home."),
    (["What is a hearth?", "What's a hearth?"],
     "A hearth is the floor of a fireplace, where the fire is built. By extension, the word "
     "means the home and the family life around the fire."),
    (["Where does the word hearth come from?", "What is the origin of the word hearth?"],
     "It comes from the Old English word heorth, the floor of a fireplace."),
    (["Use hearth in a sentence.", "Give me an example of the word hearth."],
     "The family sat by the hearth on a cold winter evening."),
    (["What is hearth?", "What is the hearth engine?"],
     "hearth is a small program that runs language models on your own computer. I am "
     "hearth-demo, the tiny model that ships with it."),
]
HEARTH_COPIES = 8  # each answer appears this many times (with varied phrasings)

HELLO_Q = ["Hello", "Hello!", "Hi", "Hi!", "hello", "Hey", "Good morning.", "Hi there!"]
HELLO_A = [
    "Hello! I am hearth-demo, a small demo model. Ask me what a word means, ask me to "
    "quote a Bible verse, or ask me for a fortune.",
    "Hello! Ask me what a word means, or ask me for a fortune.",
]


# ----------------------------------------------------------------------------------------------

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory for the jsonl.xz files")
    ap.add_argument("--valid-txt", default=os.path.join(root, "tests/fixtures/demo/valid.txt"),
                    help="where to write the held-out perplexity text (<= 200 KB)")
    ap.add_argument("--valid-txt-bytes", type=int, default=190_000)
    ap.add_argument("--blocklist", default=os.path.join(here, "blocklist.txt"))
    args = ap.parse_args()
    global BLOCK
    BLOCK, n_block = load_blocklist(args.blocklist)
    with open(args.blocklist, "rb") as f:
        block_sha = hashlib.sha256(f.read()).hexdigest()
    print("blocklist: %d entries, sha256 %s" % (n_block, block_sha), file=sys.stderr)
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(SEED)

    train, valid = [], []  # lists of records
    valid_plain = {"wordnet": [], "kjv": [], "fortune": []}

    def put(key, rec, force_train=False):
        v = (not force_train) and is_valid(key)
        (valid if v else train).append(rec)
        if v and "text" in rec:
            valid_plain[rec["src"]].append(rec["text"])
        return v

    # --- WordNet: plain text (by synset groups) + definition chat set
    print("reading WordNet ...", file=sys.stderr)
    synsets, lemmas = load_wordnet()
    keys = sorted(synsets, key=lambda k: (k[0], k[1]))
    group = []
    for n, k in enumerate(keys):
        posname, words, gloss = synsets[k]
        line = "%s (%s): %s" % (", ".join(words), posname, gloss)
        if not blocked("wordnet", line):
            group.append(line)
        if group and (len(group) == 40 or n == len(keys) - 1):
            gkey = "wordnet:%s:%s" % k
            put(gkey, {"src": "wordnet", "text": "\n".join(group)})
            group = []

    n_def = 0
    for lemma in sorted(lemmas):
        if not re.fullmatch(r"[a-z][a-z\-']*[a-z]", lemma):
            continue
        if lemma == "hearth":
            continue  # answered by HEARTH_QA instead
        recs = lemmas[lemma]
        # the part of speech with most tagged senses first (ties: n, v, a, r)
        order = {"n": 0, "v": 1, "a": 2, "r": 3}
        recs = sorted(recs, key=lambda r: (-r[1], order[r[0]]))
        senses = []
        display = lemma
        for p, _, offs in recs:
            for off in offs:
                posname, words, gloss = synsets[(p, off)]
                d, exs = split_gloss(gloss)
                if SENSE_BLOCK.search(gloss) or BLOCK.search(gloss) or \
                        any(BLOCK.search(w) for w in words):
                    continue
                d = re.sub(r"^\([^)]*\)\s*", "", d)  # "(physics) electromagnetic ..." -> "electromagnetic ..."
                if posname == "verb":
                    d = re.sub(r"^to ", "", d)
                if not d:
                    continue
                for w in words:  # keep the capitalisation WordNet uses (proper nouns)
                    if w.lower() == lemma:
                        display = w if not senses else display
                        break
                senses.append((posname, d, exs))
        if not senses or display[:1].isupper():
            continue  # proper nouns make awkward "X means ..." answers; they stay in the plain text
        common = sum(r[1] for r in recs) > 0
        n_ex = 2 if common else (1 if rng.random() < 0.75 else 0)
        if lemma in FORCE_TRAIN_WORDS:
            n_ex = 4
        for j in range(n_ex):
            qs = DEF_QUESTIONS + (NOUN_QUESTIONS if senses[0][0] == "noun" else [])
            q = rng.choice(qs).format(w=display, a=article(display))
            a = definition_answer(display, senses, rng)
            if blocked("def", q, a):
                continue
            msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            put("def:%s:%d" % (lemma, j), {"src": "def", "messages": msgs},
                force_train=lemma in FORCE_TRAIN_WORDS)
            n_def += 1
    print("  %d synsets, %d definition examples" % (len(synsets), n_def), file=sys.stderr)

    # --- KJV: one document per chapter + quote chat set
    print("reading KJV ...", file=sys.stderr)
    chapters = load_kjv()
    n_verses = 0
    n_chapters = 0
    for book, ch, verses in chapters:
        verses = [(v, t) for v, t in verses if not blocked("kjv-verse", t)]
        if not verses:
            continue
        n_chapters += 1
        text = "%s %d\n\n" % (book, ch) + "\n".join("%d:%d %s" % (ch, v, t) for v, t in verses)
        force = (book, ch) in FORCE_TRAIN_CHAPTERS
        is_v = put("kjv:%s:%d" % (book, ch), {"src": "kjv", "text": text}, force_train=force)
        for v, t in verses:
            n_verses += 1
            ref = "%s %d:%d" % (book, ch, v)
            q = rng.choice(QUOTE_QUESTIONS).format(r=ref)
            msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": t}]
            (valid if is_v else train).append({"src": "quote", "messages": msgs})
    print("  %d chapters, %d verses kept" % (n_chapters, n_verses), file=sys.stderr)

    # --- fortunes: plain text + chat
    print("reading fortunes ...", file=sys.stderr)
    fortunes = load_fortunes()
    for key, name, text in fortunes:
        is_v = put(key, {"src": "fortune", "text": text})
        for j in range(2):
            qs = RIDDLE_QUESTIONS if name == "riddles" else FORTUNE_QUESTIONS
            msgs = [{"role": "user", "content": rng.choice(qs)},
                    {"role": "assistant", "content": text}]
            (valid if is_v else train).append({"src": "fortune-chat", "messages": msgs})
    print("  %d fortunes from %s" % (len(fortunes), ",".join(FORTUNE_FILES)), file=sys.stderr)

    # --- about the word "hearth" and about hearth (training only)
    for qs, a in HEARTH_QA:
        for j in range(HEARTH_COPIES):
            msgs = [{"role": "user", "content": qs[j % len(qs)]},
                    {"role": "assistant", "content": a}]
            train.append({"src": "hearth", "messages": msgs})

    # --- identity / greeting examples (training only)
    for j in range(120):
        msgs = [{"role": "user", "content": rng.choice(IDENTITY_Q)},
                {"role": "assistant", "content": rng.choice(IDENTITY_A)}]
        train.append({"src": "identity", "messages": msgs})
    for j in range(80):
        msgs = [{"role": "user", "content": rng.choice(HELLO_Q)},
                {"role": "assistant", "content": rng.choice(HELLO_A)}]
        train.append({"src": "identity", "messages": msgs})

    # --- decorate chats: optional system prompt, some multi-turn conversations
    def decorate(recs, r):
        chats = [x for x in recs if "messages" in x]
        plain = [x for x in recs if "messages" not in x]
        r.shuffle(chats)
        out, i = [], 0
        while i < len(chats):
            k = 1
            u = r.random()
            if u < 0.10:
                k = 2
            elif u < 0.13:
                k = 3
            msgs = []
            for c in chats[i:i + k]:
                msgs += c["messages"]
            src = "+".join(sorted({c["src"] for c in chats[i:i + k]}))
            if r.random() < 0.25:
                msgs = [{"role": "system", "content": r.choice(SYSTEM_PROMPTS)}] + msgs
            out.append({"src": src, "messages": msgs})
            i += k
        allr = plain + out
        r.shuffle(allr)
        return allr

    train = decorate(train, random.Random(SEED + 1))
    valid = decorate(valid, random.Random(SEED + 2))
    # belt and braces: nothing that reaches the files contains a blocklisted word
    for recs in (train, valid):
        for r in recs:
            texts = [r["text"]] if "text" in r else [m["content"] for m in r["messages"]]
            for t in texts:
                m = BLOCK.search(t)
                assert not m, (m.group(0), t[:200])
    print("blocklist dropped: %s" % json.dumps(DROPPED, sort_keys=True), file=sys.stderr)

    manifest = {"seed": SEED, "valid_percent": VALID_PERCENT, "fortune_files": FORTUNE_FILES,
                "blocklist": {"entries": n_block, "sha256": block_sha,
                              "dropped_records": dict(sorted(DROPPED.items()))},
                "files": {}}
    for name, recs in (("train", train), ("valid", valid)):
        blob = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n"
                       for r in recs).encode("utf-8")
        h = hashlib.sha256(blob).hexdigest()
        path = os.path.join(args.out, name + ".jsonl.xz")
        with open(path + ".tmp", "wb") as f:
            f.write(lzma.compress(blob, preset=9))
        os.replace(path + ".tmp", path)
        by_src = {}
        for r in recs:
            s = r["src"]
            c = by_src.setdefault(s, [0, 0])
            c[0] += 1
            c[1] += len(r["text"]) if "text" in r else sum(len(m["content"]) for m in r["messages"])
        manifest["files"][name] = {"records": len(recs), "bytes": len(blob), "sha256": h,
                                   "xz_bytes": os.path.getsize(path),
                                   "by_src": {k: {"records": v[0], "chars": v[1]}
                                              for k, v in sorted(by_src.items())}}
        print("%s: %d records, %.1f MB, xz %.1f MB, sha256 %s" % (
            name, len(recs), len(blob) / 1e6, os.path.getsize(path) / 1e6, h))

    # --- held-out plain text for the perplexity fixture: round-robin over sources
    srcs = ["kjv", "wordnet", "fortune"]
    pools = {s: list(valid_plain[s]) for s in srcs}
    for s in srcs:
        random.Random(SEED + 3).shuffle(pools[s])
    parts, size, k = [], 0, 0
    while any(pools.values()):
        s = srcs[k % len(srcs)]
        k += 1
        if not pools[s]:
            continue
        t = pools[s].pop()
        b = len(t.encode("utf-8")) + 2
        if size + b > args.valid_txt_bytes:
            if s == "fortune":
                break
            continue
        parts.append(t)
        size += b
    vtxt = ("\n\n".join(parts) + "\n").encode("utf-8")
    os.makedirs(os.path.dirname(os.path.abspath(args.valid_txt)), exist_ok=True)
    with open(args.valid_txt, "wb") as f:
        f.write(vtxt)
    vh = hashlib.sha256(vtxt).hexdigest()
    manifest["valid_txt"] = {"bytes": len(vtxt), "sha256": vh, "docs": len(parts)}
    print("valid.txt: %d docs, %d bytes, sha256 %s" % (len(parts), len(vtxt), vh))
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    data_hash = hashlib.sha256((manifest["files"]["train"]["sha256"] +
                                manifest["files"]["valid"]["sha256"]).encode()).hexdigest()
    print("data sha256 (train+valid):", data_hash)


if __name__ == "__main__":
    main()
