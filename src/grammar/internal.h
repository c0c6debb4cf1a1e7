/* Internals shared by the files of src/grammar/ (not a public API).
 *
 * Pipeline: a front end (gbnf.c, regex.c, json_schema*.c, choices in
 * grammar.c) builds an IR (ir.c): rules whose bodies are trees of literals,
 * code-point classes, sequences, alternatives, bounded repetitions and rule
 * references. compile.c turns each rule into a DFA over bytes whose edges
 * are byte ranges or calls of other rules (a pushdown automaton; small
 * non-recursive rules are inlined). matcher.c runs it over a set of stacks;
 * mask.c computes token masks with a per-state cache over the vocabulary
 * trie (vocab.c). */
#ifndef HR_GRAMMAR_INTERNAL_H
#define HR_GRAMMAR_INTERNAL_H

#include "grammar/grammar.h"

#include <pthread.h>
#include <stdint.h>

/* ---- IR (ir.c) ------------------------------------------------------------ */

typedef enum hr__gkind {
    HR__G_EMPTY,  /* the empty string */
    HR__G_NONE,   /* the empty language (matches nothing) */
    HR__G_BYTES,  /* literal bytes: a = offset in bytes, b = length */
    HR__G_CHARS,  /* one code point in ranges: a = offset in ranges, b = n */
    HR__G_JCHARS, /* one code point in ranges, as it appears inside a JSON
                     string written canonically (Python's json.dumps with
                     ensure_ascii=False): raw, except " \\ \b \f \n \r \t
                     escaped and other controls as \u00XX (either case) */
    HR__G_SEQ,    /* kids[a .. a+b) in order */
    HR__G_ALT,    /* one of kids[a .. a+b) */
    HR__G_REP,    /* node a repeated min..max times (max -1: unbounded) */
    HR__G_REF,    /* rule a */
} hr__gkind;

typedef struct hr__gnode {
    uint8_t kind;
    uint32_t a, b;
    int32_t min, max; /* REP */
} hr__gnode;

typedef struct hr__grule {
    char *name;
    int32_t body; /* node, -1 while undefined */
    long pos;     /* where first referenced (for "undefined rule" errors) */
    int noinline; /* always a call: its states stay context-free, so their
                     mask-cache entries are shared (strings, numbers) */
} hr__grule;

typedef struct hr__gir {
    hr__gnode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *kids;
    uint32_t n_kids, cap_kids;
    uint32_t *ranges; /* lo, hi pairs of code points (inclusive) */
    uint32_t n_ranges, cap_ranges;
    uint8_t *bytes;
    uint32_t n_bytes, cap_bytes;
    hr__grule *rules;
    uint32_t n_rules, cap_rules;
    int oom; /* sticky: a builder failed to allocate */
} hr__gir;

/* Builders return a node index; on allocation failure they set ir->oom and
 * return 0 (node 0 is always EMPTY), so a front end checks oom once. */
void hr__gir_init(hr__gir *ir);
void hr__gir_deinit(hr__gir *ir);
uint32_t hr__gir_empty(hr__gir *ir);
uint32_t hr__gir_none(hr__gir *ir);
uint32_t hr__gir_bytes(hr__gir *ir, const void *s, size_t n);
uint32_t hr__gir_str(hr__gir *ir, const char *s); /* NUL-terminated */
/* ranges: n (lo, hi) pairs, any order, may overlap; negate: the complement
 * over all Unicode scalar values. Surrogates are never included. */
uint32_t hr__gir_chars(hr__gir *ir, const uint32_t *ranges, size_t n,
                       int negate, int json);
uint32_t hr__gir_seq(hr__gir *ir, const uint32_t *kids, size_t n);
uint32_t hr__gir_alt(hr__gir *ir, const uint32_t *kids, size_t n);
uint32_t hr__gir_seq2(hr__gir *ir, uint32_t a, uint32_t b);
uint32_t hr__gir_seq3(hr__gir *ir, uint32_t a, uint32_t b, uint32_t c);
uint32_t hr__gir_alt2(hr__gir *ir, uint32_t a, uint32_t b);
uint32_t hr__gir_rep(hr__gir *ir, uint32_t kid, int32_t min, int32_t max);
uint32_t hr__gir_opt(hr__gir *ir, uint32_t kid);
uint32_t hr__gir_ref(hr__gir *ir, uint32_t rule);
/* Find or add a rule by name (len bytes); -1 on allocation failure. */
int32_t hr__gir_rule(hr__gir *ir, const char *name, size_t len);
/* A fresh rule named prefix + a number. */
int32_t hr__gir_new_rule(hr__gir *ir, const char *prefix);
void hr__gir_define(hr__gir *ir, int32_t rule, uint32_t body);

/* A growable uint32 vector (front ends collect kids with it). */
typedef struct hr__u32v {
    uint32_t *v;
    size_t n, cap;
} hr__u32v;
int hr__u32v_push(hr__u32v *v, uint32_t x);
void hr__u32v_free(hr__u32v *v);
/* hr__u32v_push for a front end: a failure sets ir->oom (checked once). */
static inline void hr__gir_push(hr__gir *ir, hr__u32v *v, uint32_t x) {
    if (hr__u32v_push(v, x))
        ir->oom = 1;
}

/* Regex (regex.c) -> IR node. json: the node matches the body of a JSON
 * string (canonical escapes) whose value contains a match (unanchored ends
 * unless ^ / $); else the node matches exactly the text. */
int hr__regex_ir(hr__gir *ir, const char *re, size_t len, int json,
                 uint32_t *out, hr_error *err);

/* ---- the compiled grammar (compile.c) -------------------------------------- */

typedef struct hr__gedge {
    uint8_t lo, hi;
    uint32_t to;
} hr__gedge;

typedef struct hr__gcall {
    uint32_t rule;
    uint32_t ret; /* state to return to */
    uint8_t tail; /* ret is final: a tail call pushes nothing */
} hr__gcall;

typedef struct hr__gstate {
    uint32_t e0, ne; /* byte edges, sorted by lo, disjoint */
    uint32_t c0, nc; /* calls */
    uint8_t accept;  /* the rule may end here */
    uint8_t plain;   /* no calls and not accepting (fast path) */
} hr__gstate;

typedef struct hr__gcache hr__gcache; /* mask.c */

struct hr_grammar {
    hr__gstate *st;
    uint32_t n_st;
    hr__gedge *edges;
    uint32_t n_edges;
    hr__gcall *calls;
    uint32_t n_calls;
    uint32_t *rule_start; /* per rule: start state, or UINT32_MAX if inlined */
    uint32_t n_rules;
    uint32_t root;        /* start state of the root rule */
    uint32_t *dist;       /* per state: fewest bytes to the end of its rule,
                             calls included (distance.c); HR__DIST_INF: never */

    pthread_mutex_t mu;   /* guards caches */
    hr__gcache *caches;   /* one per vocabulary used with this grammar */
};

/* Limits (documented in docs/grammar.md). */
#define HR__G_MAX_STATES 200000u  /* DFA states of a grammar */
#define HR__G_MAX_NFA (4u << 20)  /* NFA states while compiling one rule */
#define HR__G_MAX_REP 100000      /* a repetition bound */
#define HR__G_MAX_SET 4096        /* parse configurations kept per step */

/* The thread's compile budget (budget.c): start the clock; 1 when past it
 * or when the thread's cancel check (hr_grammar_cancel_set) says so (then
 * hr__gbudget_hit, and hr__gbudget_cancelled for a cancel, say so until
 * the next start). hr__gbudget_cancel_now: the cancel check alone. */
void hr__gbudget_start(void);
int hr__gbudget_over(void);
int hr__gbudget_hit(void);
int hr__gbudget_cancelled(void);
int hr__gbudget_cancel_now(void);
double hr__gbudget_compile_seconds(void);
double hr__gbudget_warm_seconds(void);
size_t hr__gbudget_cache_bytes(void);

/* Compile ir (root rule index root) into a grammar. */
int hr__grammar_compile(hr_grammar **out, const hr__gir *ir, int32_t root,
                        hr_error *err);

/* Merge equivalent states across rules (minimize.c). 0 or HR_ENOMEM. */
int hr__grammar_minimize(hr_grammar *g);

/* Fill g->dist (distance.c). 0 or HR_ENOMEM. */
int hr__grammar_distances(hr_grammar *g);

#define HR__DIST_INF UINT32_MAX
/* a + b, saturating at HR__DIST_INF */
static inline uint32_t hr__dadd(uint32_t a, uint32_t b) {
    return b >= HR__DIST_INF - a ? HR__DIST_INF : a + b;
}

/* State after byte b from state s, UINT32_MAX if none. */
static inline uint32_t hr__gstep(const hr_grammar *g, uint32_t s, uint8_t b) {
    const hr__gstate *st = &g->st[s];
    for (uint32_t i = 0; i < st->ne; i++) { /* (edges is NULL in an empty language) */
        const hr__gedge *e = &g->edges[st->e0 + i];
        if (b <= e->hi)
            return b >= e->lo ? e->to : UINT32_MAX;
    }
    return UINT32_MAX;
}

/* ---- parse configurations (stack.c) ------------------------------------------
 * A configuration is a DFA state plus the stack below it: "below" is an
 * interned node (return state, parent node). Node 0 is the empty stack;
 * node 1 is a hole: "whatever the context is" (for context-independent
 * mask caching). */

#define HR__NODE_EMPTY 0u
#define HR__NODE_HOLE 1u

typedef struct hr__cfg {
    uint32_t state, below;
} hr__cfg;

typedef struct hr__stacks {
    uint32_t *nstate, *nparent; /* nodes */
    uint32_t *ndist;  /* per node: sum of sdist over its states (0 for empty, hole) */
    const uint32_t *sdist; /* the grammar's per-state distances */
    uint32_t n, cap;
    uint32_t *tab; /* open addressing: node index, 0 = free */
    uint32_t tcap;
} hr__stacks;

int hr__stacks_init(hr__stacks *s);
void hr__stacks_deinit(hr__stacks *s);
void hr__stacks_reset(hr__stacks *s);
/* Node (state, parent); UINT32_MAX on allocation failure. */
uint32_t hr__stacks_push(hr__stacks *s, uint32_t state, uint32_t parent);

/* A set of configurations being built, deduplicated. */
typedef struct hr__cset {
    uint64_t *keys; /* state << 32 | below, 0 = free (state+1 stored) */
    uint32_t *gen;
    uint32_t cap, cur;
} hr__cset;

int hr__cset_init(hr__cset *c);
void hr__cset_deinit(hr__cset *c);
void hr__cset_clear(hr__cset *c); /* O(1) */
/* 1 if newly added, 0 if present, <0 on allocation failure. */
int hr__cset_add(hr__cset *c, hr__cfg x);

/* A growable configuration buffer. */
typedef struct hr__cbuf {
    hr__cfg *v;
    size_t n, cap;
} hr__cbuf;
int hr__cbuf_push(hr__cbuf *b, hr__cfg c);
int hr__cbuf_reserve(hr__cbuf *b, size_t n);

/* The engine that advances sets: scratch shared by the steps. */
typedef struct hr__run {
    const hr_grammar *g;
    hr__stacks stk;
    hr__cset seen;
    hr__cbuf work;
    int oom;
} hr__run;

int hr__run_init(hr__run *r, const hr_grammar *g);
void hr__run_deinit(hr__run *r);

/* Fewest bytes that complete the text from configuration c (real stack). */
static inline uint32_t hr__cfg_dist(const hr__run *r, hr__cfg c) {
    return hr__dadd(r->g->dist[c.state], r->stk.ndist[c.below]);
}

enum { HR__CL_END = 1, HR__CL_HOLE = 2 };
/* Close configurations in[0..n) under calls and returns. kernel = 0: append
 * to out the configurations that can scan a byte; kernel = 1: append in's
 * configurations and those reached by returns (the "kernel" a matcher keeps:
 * what a context-independent cache entry cannot see). Returns HR__CL_END if
 * the root rule can end (a return from the empty stack), HR__CL_HOLE if a
 * return reaches the hole. */
int hr__closure(hr__run *r, const hr__cfg *in, size_t n, hr__cbuf *out,
                int kernel);
/* Scan byte b from closed configurations; results appended to out (dedup). */
void hr__scan(hr__run *r, const hr__cfg *in, size_t n, uint8_t b,
              hr__cbuf *out);

/* ---- vocabulary (vocab.c) ------------------------------------------------------ */

struct hr_grammar_vocab {
    uint64_t serial;     /* unique per vocabulary (cache key) */
    int32_t n_vocab;     /* the model's */
    int32_t n_tok;       /* the tokenizer's (tokens >= n_tok never allowed) */
    char *bytes;         /* all token bytes */
    uint32_t *off, *len; /* per token; len 0: never allowed (special/empty) */
    uint8_t *is_eos;     /* per model token */
    int32_t *eos;
    int n_eos;
    /* The trie, nodes in preorder. Node 0 is the root (no byte). */
    uint32_t n_nodes;
    uint8_t *nbyte;
    uint16_t *ndepth;
    uint32_t *nend;    /* first node after the subtree */
    uint32_t *nparent;
    uint32_t *ntok0;   /* tokens ending at node i: toks[ntok0[i] .. ntok0[i+1]) */
    int32_t *toks;
    uint32_t max_depth;
    /* Plain string text below each node (plain.c) */
    uint8_t *nplain;   /* bit w: every path below, decoded from UTF-8 state w, is plain */
    uint8_t *nu8;      /* UTF-8 decoder state after the node's path, 0xff: invalid */
    uint16_t *nheight; /* the subtree's height (0 for a leaf) */
    /* Mask-cache entries shared by every grammar used with this vocabulary,
       keyed by the shape of the automaton below a state (mask.c). */
    pthread_mutex_t mu;
    struct hr__vshared *shared;
};

/* ---- plain string text (plain.c) -------------------------------------------------- */

int hr__plain_index(hr_grammar_vocab *v); /* fills nplain, nu8, nheight */

/* Per matcher: memo of hr__plain_reach and scratch for it. */
typedef struct hr__plainmemo {
    uint64_t *key;
    uint16_t *val;
    uint32_t cap, n;
    hr__cset seen;
    hr__cbuf q;
} hr__plainmemo;

/* How many bytes of any plain text, decoded from UTF-8 state w, state q
 * reads by byte edges alone (at most limit; pass the same limit for the
 * same memo). 0 when unsure (out of memory, too many states). */
uint16_t hr__plain_reach(const hr_grammar *g, hr__plainmemo *pm, uint32_t q, int w,
                         uint16_t limit);
void hr__plainmemo_free(hr__plainmemo *pm);

/* ---- mask cache (mask.c) --------------------------------------------------------- */

void hr__vshared_free(hr_grammar_vocab *v);

typedef struct hr__keybuf {
    uint32_t *v;
    size_t n, cap;
    uint32_t *num, *order; /* num: per state (number + 1), order: BFS */
    size_t norder;
} hr__keybuf;

/* Per matcher scratch for mask computation. */
typedef struct hr__maskrun {
    hr__cbuf depth;   /* configuration sets per trie depth */
    size_t *doff;     /* doff[d]: start of depth d's closed set in depth */
    uint32_t *dn;
    size_t ndepth;
    hr__cbuf tmp, tmp2;
    uint32_t *path;
    hr__keybuf key;   /* scratch for shared-cache keys */
    uint32_t *tokd;   /* per model token: distance after it (budget masks) */
    hr__plainmemo plain;
    struct centry *once; /* an entry computed for one use (mask.c) */
} hr__maskrun;

void hr__maskrun_deinit(hr__maskrun *mr);
/* OR into allowed the tokens accepted from kernel configurations
 * k[0..n) (a matcher's current set). r: the matcher's run (real stacks);
 * cr: scratch run for computing cache entries. */
int hr__mask_compute(hr__run *r, hr__run *cr, hr__maskrun *mr,
                     const hr_grammar_vocab *v, const hr__cfg *k, size_t n,
                     uint32_t *allowed);
/* OR into allowed the tokens accepted from kernel k[0..n) by a full trie
 * walk with the real stacks (no cache); with tokd != NULL, tokd[t] gets the
 * distance (hr__cfg_dist, least over the set) after each accepted token t. */
int hr__mask_walk(hr__run *r, hr__maskrun *mr, const hr_grammar_vocab *v,
                  const hr__cfg *k, size_t n, uint32_t *allowed, uint32_t *tokd);
/* Into allowed (zeroed by the caller): the accepted tokens after which the
 * distance is at most max(budget - 1, the least such distance); distance.c. */
int hr__mask_budget(hr__run *r, hr__maskrun *mr, const hr_grammar_vocab *v,
                    const hr__cfg *k, size_t n, uint32_t budget, uint32_t *allowed);
void hr__gcache_clear(hr_grammar *g); /* frees every cache of g */
int hr__mask_warm(const hr_grammar *g, const hr_grammar_vocab *v,
                  hr_error *err);
/* Bytes held by g's cache for v, and by v's shared cache (tests, stats). */
void hr__mask_cache_bytes(const hr_grammar *g, const hr_grammar_vocab *v, size_t *grammar,
                          size_t *shared);

#endif
