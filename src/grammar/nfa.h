/* The NFA built per rule (Thompson construction, compile.c) and its subset
 * construction into a DFA over bytes and calls (determinize.c). Internal to
 * src/grammar. */
#ifndef HR_GRAMMAR_NFA_H
#define HR_GRAMMAR_NFA_H

#include "grammar/internal.h"

#include <stddef.h>
#include <stdint.h>

enum { HR__NE_EPS, HR__NE_BYTE, HR__NE_CALL };

typedef struct hr__nedge {
    uint32_t to, next, rule;
    uint8_t kind, lo, hi;
} hr__nedge;

typedef struct hr__nfa {
    uint32_t *head; /* per state: first edge + 1, 0 = none */
    uint32_t n, cap;
    hr__nedge *e;
    uint32_t ne, ecap;
    int err; /* HR_ENOMEM or HR_ERANGE (too large) */
} hr__nfa;

typedef struct hr__dfa {
    hr_grammar *g;
    uint32_t cap_st, cap_e, cap_c;
    /* interned NFA sets of the rule being compiled: set i = pool[off[i]..off[i+1]) */
    uint32_t *pool;
    size_t npool, cap_pool;
    size_t *off;
    uint32_t nsets, cap_sets;
    uint32_t *tab, tcap; /* hash: set index + 1 */
    uint32_t base;       /* global index of set 0 */
    /* scratch */
    uint32_t *stack, *mark, stamp, *buf;
    size_t nbuf;
} hr__dfa;

/* The DFA of NFA a from its start state 0, accepting at acc; *start gets
 * its first state's global index. 0, HR_ENOMEM or HR_ERANGE. */
int hr__determinize(hr__dfa *d, const hr__nfa *a, uint32_t acc, uint32_t *start);
/* Frees d's work arrays (not d->g). */
void hr__dfa_free(hr__dfa *d);

#endif
