/* Grammar-constrained decoding: grammars (from GBNF, JSON Schema, a regex, a
 * list of choices, or "any JSON object"), a per-tokenizer vocabulary index,
 * and a per-request matcher that gives the set of tokens which keep the
 * output a prefix of a sentence of the grammar.
 *
 * The output text is the concatenation of the bytes of the accepted tokens
 * (hr_tokenizer_token_bytes; special tokens contribute nothing and are never
 * allowed while constrained, except EOS). Grammars work on UTF-8 bytes:
 * character classes are sets of Unicode code points, matched as their UTF-8
 * encodings, so a token may end inside a multi-byte character.
 *
 * Threads: an hr_grammar and an hr_grammar_vocab are immutable after
 * creation and may be shared by any number of threads (a grammar fills an
 * internal mask cache under a mutex). A matcher belongs to one request.
 * See docs/grammar.md for the syntax, JSON Schema keywords and limits. */
#ifndef HR_GRAMMAR_H
#define HR_GRAMMAR_H

#include "hearth.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hr_grammar hr_grammar; /* compiled, immutable, shareable */

/* GBNF (llama.cpp's syntax; the start rule is "root"). Errors carry the
 * byte position in err->pos. */
int hr_grammar_from_gbnf(hr_grammar **out, const char *src, size_t len,
                         hr_error *err);
/* JSON Schema (see docs/grammar.md for the keywords). A keyword that is not
 * supported is HR_EUNSUPPORTED with a message naming it and its location. */
int hr_grammar_from_json_schema(hr_grammar **out, const json_t *schema,
                                hr_error *err);
/* The whole output matches the regex (ECMAScript-like syntax, anchored at
 * both ends). */
int hr_grammar_from_regex(hr_grammar **out, const char *re, hr_error *err);
/* The output is exactly one of the n strings (n >= 1). */
int hr_grammar_from_choices(hr_grammar **out, const char *const *choices,
                            int n, hr_error *err);
/* Any JSON object (same whitespace policy as JSON Schema grammars). */
int hr_grammar_json_object(hr_grammar **out, hr_error *err);
/* Any of n alternatives: the literal prefix[i], a JSON value valid against
 * schema[i], the literal suffix[i] (tool calls: a family's markers around
 * the call object). */
int hr_grammar_from_wrapped_schemas(hr_grammar **out, const char *const *prefix,
                                    const json_t *const *schema, const char *const *suffix,
                                    int n, hr_error *err);
void hr_grammar_free(hr_grammar *g);

/* Number of parser states (for diagnostics and limits). */
int hr_grammar_n_states(const hr_grammar *g);

/* v as Python's json.dumps(v, ensure_ascii=False) writes it (separators
 * ", " and ": ", floats as repr): a malloc'd NUL-terminated string, NULL
 * when out of memory. The canonical text of the JSON grammars. */
char *hr_grammar_json_dumps(const json_t *v);

/* ---- vocabulary ---------------------------------------------------------- */

typedef struct hr_grammar_vocab hr_grammar_vocab;

/* Index a tokenizer: every token's bytes and a byte trie over them.
 * n_vocab is the model's vocabulary size (rows of the logits); it may exceed
 * the tokenizer's, the extra IDs are never allowed. eos_ids (n_eos >= 0) are
 * the tokens that end the output; they are allowed when the grammar can end.
 * The tokenizer need not outlive the vocabulary. */
int hr_grammar_vocab_new(hr_grammar_vocab **out, const hr_tokenizer *tok,
                         int n_vocab, const int32_t *eos_ids, int n_eos,
                         hr_error *err);
void hr_grammar_vocab_free(hr_grammar_vocab *v);
/* Bytes held by v's mask cache shared across grammars (keys and entries;
 * at most hr_grammar_budget's cache_bytes). */
size_t hr_grammar_vocab_cache_bytes(const hr_grammar_vocab *v);
int hr_grammar_vocab_n(const hr_grammar_vocab *v); /* the model's n_vocab */

/* Precompute the grammar's per-state mask cache for this vocabulary (what
 * the first masks would otherwise compute lazily). Optional: call it when a
 * grammar is compiled, off the decode loop. */
int hr_grammar_warm(const hr_grammar *g, const hr_grammar_vocab *v,
                    hr_error *err);

/* ---- budget -------------------------------------------------------------- */

/* What one grammar may cost the thread that compiles it (a request's).
 * 0 in a field: its default. Compiling (any hr_grammar_from_*) that needs
 * more than compile_seconds of the thread's CPU fails with HR_ERANGE
 * ("grammar too costly"); hr_grammar_warm stops after warm_seconds and
 * leaves the other states to be computed when first used; a grammar's
 * mask cache holds at most cache_bytes (beyond, entries are computed for
 * one use and dropped), and so does a vocabulary's cache shared across
 * grammars (beyond, it is emptied and starts again). */
typedef struct hr_grammar_budget {
    double compile_seconds; /* default 2 */
    double warm_seconds;    /* default 0.5 */
    size_t cache_bytes;     /* default 256 MiB */
} hr_grammar_budget;
/* The calling thread's budget from now on (a copy); NULL: the defaults.
 * Cache bounds are read when a grammar's cache or the shared cache grows,
 * on whichever thread that is. */
void hr_grammar_budget_set(const hr_grammar_budget *b);
/* A cancel check for the calling thread's compiles and mask warming from
 * now on (NULL: none; the server's: "the client went away"). It is polled
 * with the CPU budget (every few milliseconds of work); once it returns
 * nonzero, compiling frees what it built and fails with HR_ECANCELLED,
 * and hr_grammar_warm stops. */
void hr_grammar_cancel_set(int (*cancelled)(void *arg), void *arg);

/* ---- matcher ------------------------------------------------------------- */

typedef struct hr_matcher hr_matcher; /* per request: the parse state */

/* g and v must outlive the matcher. */
int hr_matcher_new(hr_matcher **out, const hr_grammar *g,
                   const hr_grammar_vocab *v, hr_error *err);
void hr_matcher_free(hr_matcher *m);

/* allowed: ceil(n_vocab / 32) words; bit i of word i/32 is set for each
 * token that keeps the output a valid prefix; EOS bits only when the
 * grammar can end here. After EOS was accepted, nothing is allowed. */
void hr_matcher_mask(hr_matcher *m, uint32_t *allowed);
/* Advance by one token. HR_EINVAL (state unchanged) if it is not allowed. */
int hr_matcher_accept(hr_matcher *m, int32_t token, hr_error *err);
/* Advance by raw bytes (no token boundaries): for tests and tools. */
int hr_matcher_accept_bytes(hr_matcher *m, const char *s, size_t n,
                            hr_error *err);
/* Undo the last n accepted tokens (or accept_bytes calls). HR_ERANGE if
 * fewer were accepted (state unchanged). */
int hr_matcher_rollback(hr_matcher *m, int n_tokens);
void hr_matcher_reset(hr_matcher *m); /* back to the start */
/* The fewest bytes that complete the text from here: 0 when it can end
 * (or has ended), -1 when it cannot be completed. */
int hr_matcher_distance(const hr_matcher *m);
/* Like hr_matcher_mask, restricted to what can still finish within n_tokens
 * tokens, this one included: the tokens after which the distance is at most
 * n_tokens - 1 (one token per byte of the shortest completion, as a
 * vocabulary with a token for every byte allows), and EOS when the text can
 * end here. When no token fits, the tokens that leave the least distance
 * (best effort: the output will be cut). A full vocabulary walk, uncached:
 * for the last steps of a request, not for every step. n_tokens >= 1. */
void hr_matcher_mask_budget(hr_matcher *m, uint32_t *allowed, int n_tokens);
bool hr_matcher_can_end(const hr_matcher *m); /* the text is complete */
bool hr_matcher_done(const hr_matcher *m);    /* nothing but EOS can follow */
int hr_matcher_n_accepted(const hr_matcher *m);

#endif
