/* Internals shared by the files of src/tokenizer/ (not a public API).
 *
 * Encoding walks a list of pieces through the HF pipeline:
 *   raw text -> added tokens (raw) -> normalizer -> added tokens (normalized)
 *            -> pre-tokenizer -> model (BPE) -> post-processor.
 * A piece is a span of text in a list's byte buffer, or an already decided
 * token (id >= 0). Each stage reads one list and writes the next. */
#ifndef HR_TOKENIZER_INTERNAL_H
#define HR_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdint.h>

/* ---- hash maps ---------------------------------------------------------- */

/* String -> int32. Keys are copied into an internal pool. */
typedef struct hr__strmap {
    uint32_t *slots;   /* entry index + 1, 0 = empty; cap is a power of 2 */
    size_t cap;
    struct hr__sm_ent { uint64_t hash; uint32_t off, len; int32_t val; } *ent;
    size_t n, ent_cap;
    char *pool;
    size_t pool_len, pool_cap;
} hr__strmap;

int hr__strmap_put(hr__strmap *m, const char *k, size_t len, int32_t val);
int32_t hr__strmap_get(const hr__strmap *m, const char *k, size_t len);
void hr__strmap_clear(hr__strmap *m); /* keeps capacity */
void hr__strmap_free(hr__strmap *m);

/* uint64 -> uint64; UINT64_MAX is not a valid key. */
typedef struct hr__u64map {
    uint64_t *keys, *vals;
    size_t cap, n;
} hr__u64map;

int hr__u64map_put(hr__u64map *m, uint64_t k, uint64_t v);
int hr__u64map_get(const hr__u64map *m, uint64_t k, uint64_t *v); /* 1 found */
void hr__u64map_free(hr__u64map *m);

/* ---- pieces ------------------------------------------------------------- */

typedef struct hr__piece {
    uint32_t off, len; /* text in the list's buf */
    int32_t id;        /* >= 0: a decided token; -1: text to tokenize */
    uint8_t at_start;  /* starts at offset 0 of the original input */
} hr__piece;

typedef struct hr__plist {
    hr__piece *p;
    size_t n, cap;
    char *buf;
    size_t len, bcap;
} hr__plist;

/* Append a piece whose text is copied into l->buf. Empty text pieces are
 * dropped (HF drops empty splits). */
int hr__plist_push(hr__plist *l, const char *s, size_t len, int32_t id,
                   int at_start);
/* Reserve n more bytes at the end of buf; returns where to write them
 * (valid until the list changes). Then commit the bytes written as a piece. */
char *hr__plist_reserve(hr__plist *l, size_t n);
int hr__plist_commit(hr__plist *l, size_t len, int32_t id, int at_start);
void hr__plist_reset(hr__plist *l);
void hr__plist_free(hr__plist *l);

/* A growable byte buffer. */
typedef struct hr__buf {
    char *p;
    size_t len, cap;
} hr__buf;
int hr__buf_put(hr__buf *b, const void *s, size_t n);
int hr__buf_reserve(hr__buf *b, size_t n);

/* ---- utf-8 / unicode helpers (unicode.c) --------------------------------- */

/* Length of the UTF-8 sequence starting at s (1 for an invalid lead byte). */
int hr__utf8_len(unsigned char c);
/* Decode one code point from s[0..n); returns bytes used, or 0 if invalid
 * or incomplete (then *cp is undefined). */
int hr__utf8_decode(const char *s, size_t n, int32_t *cp);
int hr__utf8_encode(int32_t cp, char *out);
/* Length of the valid prefix of s[0..n) that could be the start of a valid
 * sequence but is incomplete: returns 0 if s starts an invalid sequence or
 * is complete; else the number of bytes (1..3) of a truncated sequence. */
size_t hr__utf8_maximal_subpart(const char *s, size_t n);
/* Replace ill-formed subsequences of s by U+FFFD into out (reset first);
 * returns 1 if anything was replaced. */
int hr__utf8_repair(const char *s, size_t n, hr__buf *out);
int hr__utf8_valid(const char *s, size_t n);
/* Bytes of s[0..n) (n >= 1) that are a prefix of a well-formed sequence, and
 * in *need the length that sequence must have (0: invalid lead byte). */
int hr__utf8_prefix(const unsigned char *s, size_t n, int *need);

int hr__uni_is_space(int32_t cp);   /* Unicode White_Space (Rust char) */
int hr__uni_is_word(int32_t cp);    /* regex \w (Rust) */
int hr__uni_is_numeric(int32_t cp); /* Rust char::is_numeric: N* */
int hr__uni_is_punct(int32_t cp);   /* ASCII punct or P* */

/* GPT-2 byte <-> unicode mapping. */
extern const uint16_t hr__byte_to_cp[256];
int hr__cp_to_byte(int32_t cp); /* -1 if unmapped */

/* PCRE2 with UTF + UCP (+ JIT when available). HF regexes are Oniguruma
 * syntax; \s is widened to match U+0085 as Oniguruma does. */
pcre2_code *hr__regex_compile(const char *pattern, size_t len, int literal,
                              hr_error *err);
/* Find the next match in s[0..n) at or after start; 1 found, 0 none, <0
 * error. md is per-thread match data. */
int hr__regex_next(const pcre2_code *re, pcre2_match_data *md,
                   const char *s, size_t n, size_t start, size_t *ms,
                   size_t *me);

/* ---- normalizers (normalizer.c) ----------------------------------------- */

typedef enum hr__norm_kind {
    HR__NORM_NFC, HR__NORM_NFD, HR__NORM_NFKC, HR__NORM_NFKD,
    HR__NORM_LOWER, HR__NORM_STRIP, HR__NORM_REPLACE, HR__NORM_PREPEND,
    HR__NORM_BERT,
} hr__norm_kind;

typedef struct hr__norm {
    hr__norm_kind kind;
    int left, right;   /* Strip */
    uint8_t clean, chinese, strip_accents, lower; /* BertNormalizer */
    char *pat;         /* Replace: literal pattern (NULL when regex) */
    size_t pat_len;
    pcre2_code *re;    /* Replace: regex */
    char *content;     /* Replace content / Prepend text */
    size_t content_len;
} hr__norm;

typedef struct hr__normseq {
    hr__norm *v;
    int n;
} hr__normseq;

int hr__norm_parse(hr__normseq *seq, json_t *j, hr_error *err);
void hr__norm_free(hr__normseq *seq);
/* Normalize s[0..n) into out (reset first). md: match data for regexes. */
int hr__norm_apply(const hr__normseq *seq, const char *s, size_t n,
                   hr__buf *out, hr__buf *tmp, pcre2_match_data *md);

/* ---- pre-tokenizers (pretok.c) ------------------------------------------ */

typedef enum hr__split_behavior {
    HR__SPLIT_REMOVED, HR__SPLIT_ISOLATED, HR__SPLIT_MERGED_PREV,
    HR__SPLIT_MERGED_NEXT, HR__SPLIT_CONTIGUOUS,
} hr__split_behavior;

typedef enum hr__pretok_kind {
    HR__PRE_SPLIT, HR__PRE_BYTELEVEL, HR__PRE_METASPACE, HR__PRE_DIGITS,
    HR__PRE_PUNCT, HR__PRE_WHITESPACE, HR__PRE_WSSPLIT,
} hr__pretok_kind;

typedef struct hr__pretok {
    hr__pretok_kind kind;
    pcre2_code *re;              /* Split (regex or literal), ByteLevel regex */
    int empty_pattern;           /* Split with "" pattern: no split */
    hr__split_behavior behavior; /* Split, Punctuation */
    int invert;
    int add_prefix_space, use_regex; /* ByteLevel */
    char repl[8];                /* Metaspace replacement (UTF-8) */
    int repl_len;
    int prepend;                 /* Metaspace: 0 never, 1 first, 2 always,
                                    3 always even before U+2581 (llama.cpp) */
    int split;                   /* Metaspace */
    int individual_digits;
} hr__pretok;

typedef struct hr__pretokseq {
    hr__pretok *v;
    int n;
} hr__pretokseq;

int hr__pretok_parse(hr__pretokseq *seq, json_t *j, hr_error *err);
void hr__pretok_free(hr__pretokseq *seq);
/* Pre-tokenize the text pieces of *in; decided tokens pass through. The
 * result is in *in when done (lists are swapped). */
int hr__pretok_apply(const hr__pretokseq *seq, hr__plist **in,
                     hr__plist **tmp, pcre2_match_data *md);

/* ---- BPE model (bpe.c) -------------------------------------------------- */

typedef struct hr__bpe_cache {
    pthread_mutex_t mu;
    hr__strmap map;  /* piece -> index into spans */
    struct hr__cspan { uint32_t off, n; } *spans;
    size_t n_spans, spans_cap;
    int32_t *ids;
    size_t n_ids, ids_cap;
} hr__bpe_cache;

typedef struct hr__bpe {
    hr__strmap vocab;   /* model vocabulary only (no added tokens) */
    hr__u64map merges;  /* (a << 32 | b) -> (rank << 32 | merged id) */
    float *scores;      /* SPM (GGUF llama): merge by score; NULL for BPE */
    int32_t n_scores;
    int32_t unk_id;     /* -1 when none */
    int byte_fallback, fuse_unk, ignore_merges;
    int newline_words_whole; /* llama.cpp gemma4: an all-\n piece in the vocab is one token */
    int32_t byte_id[256]; /* <0xXX> tokens, -1 when absent */
    hr__bpe_cache cache;
    /* WordPiece model (wordpiece.c): same vocab and unk_id, no merges */
    int wordpiece;
    char wp_prefix[16];   /* continuing_subword_prefix, "##" */
    int wp_prefix_len;
    int wp_max_chars;     /* max_input_chars_per_word: longer words are unk */
} hr__bpe;

int hr__bpe_init(hr__bpe *b);
void hr__bpe_free(hr__bpe *b);
/* Tokenize one pre-token piece, appending IDs to out. */
int hr__bpe_encode(hr__bpe *b, const char *s, size_t n, hr_tokens *out);

/* WordPiece (wordpiece.c): greedy longest match from the left, the
 * continuation prefix on every piece but the first; a word with no match or
 * longer than wp_max_chars code points is the unk token. */
int hr__wordpiece_encode(const hr__bpe *b, const char *s, size_t n, hr_tokens *out);
/* BertNormalizer (wordpiece.c): clean_text, handle_chinese_chars,
 * strip_accents, lowercase, in HF's order. */
int hr__bert_norm(const hr__norm *x, const hr__buf *in, hr__buf *out, hr__buf *tmp);
/* WordPiece decoder's clean-up of one token, in place (wordpiece.c). */
int hr__wordpiece_cleanup(hr__buf *t, hr__buf *tmp);

/* ---- added tokens (added.c) --------------------------------------------- */

typedef struct hr__added {
    int32_t id;
    char *content;     /* as given */
    size_t len;
    char *norm;        /* normalized content (normalized tokens), or NULL */
    size_t norm_len;
    uint8_t special, lstrip, rstrip, normalized, single_word;
} hr__added;

/* A byte trie over added-token strings for leftmost-longest matching. */
typedef struct hr__trie {
    struct hr__trie_node { int32_t tok; } *nodes; /* tok: index in added[] */
    size_t n, cap;
    hr__u64map edges;    /* node << 8 | byte -> child */
    uint64_t first[4];   /* bitmap of first bytes */
} hr__trie;

typedef struct hr__addedset {
    hr__added *v;
    int n;
    hr__strmap by_content; /* content -> index in v */
    hr__trie raw, normed;  /* non-normalized / normalized tokens */
} hr__addedset;

int hr__added_add(hr__addedset *a, const char *content, size_t len, int32_t id,
                  int special, int lstrip, int rstrip, int normalized,
                  int single_word);
/* Build the tries (after every add; normalizes normalized tokens). */
int hr__added_build(hr__addedset *a, const hr__normseq *norm,
                    pcre2_match_data *md, hr_error *err);
void hr__added_free(hr__addedset *a);
/* Split the text pieces of in (into out) around matches of the raw trie
 * (normalized = 0) or the normalized trie (1). */
int hr__added_split(const hr__addedset *a, int normalized, int split_special,
                    const hr__plist *in, hr__plist *out);

/* ---- post-processor (postproc.c) ---------------------------------------- */

typedef struct hr__postproc {
    int32_t *pre, *post; /* ids added before / after the sequence (single) */
    int n_pre, n_post;
    int present;         /* a processor that adds tokens was configured */
} hr__postproc;

int hr__postproc_parse(hr__postproc *pp, json_t *j, hr_error *err);
void hr__postproc_free(hr__postproc *pp);

/* ---- decoder (decoder.c) ------------------------------------------------ */

typedef enum hr__dec_kind {
    HR__DEC_REPLACE, HR__DEC_BYTEFALLBACK, HR__DEC_FUSE, HR__DEC_STRIP,
    HR__DEC_METASPACE, HR__DEC_BYTELEVEL, HR__DEC_WORDPIECE,
} hr__dec_kind;

typedef struct hr__dec {
    hr__dec_kind kind;
    char *pat, *content;  /* Replace (literal); WordPiece: pat = prefix */
    size_t pat_len, content_len;
    int32_t strip_cp;     /* Strip: the code point to strip */
    int start, stop;      /* Strip; WordPiece: start = cleanup */
    char repl[8];         /* Metaspace */
    int repl_len, prepend;
} hr__dec;

typedef struct hr__decoder {
    hr__dec *v;
    int n;
    int bytelevel;     /* output is byte-level: lossy UTF-8 of the whole */
    int bytefallback;  /* <0xXX> runs decoded strictly, else U+FFFD each */
    int lead_strip;    /* Strip start after Fuse: drop up to N leading cps */
    int32_t lead_cp;
    int post_meta;     /* Metaspace on the whole text: 1 drop, 2 to ' ' */
    int32_t post_meta_cp;
    int no_decoder;    /* no decoder: tokens joined by " " */
} hr__decoder;

int hr__decoder_parse(hr__decoder *d, json_t *j, hr_error *err);
void hr__decoder_free(hr__decoder *d);

/* ---- the tokenizer ------------------------------------------------------ */

struct hr_tokenizer {
    /* ID -> string for every ID (model and added); len -1 = hole */
    char *pool;
    uint32_t *tok_off;
    int32_t *tok_len;
    uint8_t *tok_special;
    int32_t n_vocab;

    hr__bpe bpe;
    hr__normseq norm;
    hr__pretokseq pretok;
    hr__addedset added;
    hr__postproc post;
    hr__decoder dec;

    int32_t bos, eos, pad, unk;
    char *chat_template;
    json_t *config; /* tokenizer_config.json (owned), may be NULL */
};

/* Set the ID -> string table from the model vocabulary and added tokens. */
int hr__tok_build_table(hr_tokenizer *t, hr_error *err);
/* Resolve bos/eos/pad/unk from the config (token strings -> IDs). */
void hr__tok_resolve_specials(hr_tokenizer *t);
hr_tokenizer *hr__tok_alloc(void);

/* GGUF: fill t from an opened GGUF file's tokenizer.ggml.* keys. */
struct hr_gguf;
int hr__tok_from_gguf(hr_tokenizer *t, const struct hr_gguf *g, hr_error *err);

/* Decoder state, shared by hr_tokenizer_decode and the stream. */
typedef struct hr__dec_state {
    const hr_tokenizer *t;
    unsigned flags;
    size_t n_tok;        /* tokens pushed (after skip) */
    hr__buf pend;        /* bytes not yet final (utf-8 tail / byte run) */
    int run;             /* bytes in pend from a byte-fallback run */
    int lead_left;       /* leading code points Strip may still drop */
    hr__buf tok;         /* scratch for one token */
    hr__buf clean;       /* clean-up hold-back */
    hr__buf tmp, meta;   /* scratch */
} hr__dec_state;

void hr__dec_init(hr__dec_state *s, const hr_tokenizer *t, unsigned flags);
void hr__dec_deinit(hr__dec_state *s);
/* Append what became final after id to out. */
int hr__dec_push(hr__dec_state *s, int32_t id, hr__buf *out);
int hr__dec_finish(hr__dec_state *s, hr__buf *out);

/* JSON helpers (tokenizer.c) */
const char *hr__json_str(json_t *o, const char *key); /* NULL if not string */
int hr__json_bool(json_t *o, const char *key, int dflt);

#endif
