/* The cost budget of compiling a grammar and warming its mask cache, per
 * thread (the thread that compiles for a request), and the memory bounds
 * of the mask caches. docs/grammar.md#limits. */
#include "grammar/internal.h"
#include "core/timer.h"

static _Thread_local struct {
    int set;           /* hr_grammar_budget_set was called on this thread */
    hr_grammar_budget b;
    double compile_end; /* thread CPU seconds */
    int hit;            /* the last compile ran out of time (or was cancelled) */
    int cancelled;      /* the last compile was cancelled */
    int (*cancel_fn)(void *arg);
    void *cancel_arg;
} tb;

static hr_grammar_budget current(void) {
    hr_grammar_budget d = {.compile_seconds = 2, .warm_seconds = 0.5,
                           .cache_bytes = (size_t)256 << 20};
    if (tb.set) {
        if (tb.b.compile_seconds > 0)
            d.compile_seconds = tb.b.compile_seconds;
        if (tb.b.warm_seconds > 0)
            d.warm_seconds = tb.b.warm_seconds;
        if (tb.b.cache_bytes > 0)
            d.cache_bytes = tb.b.cache_bytes;
    }
    return d;
}

void hr_grammar_budget_set(const hr_grammar_budget *b) {
    tb.set = b != NULL;
    if (b)
        tb.b = *b;
}

void hr_grammar_cancel_set(int (*cancelled)(void *arg), void *arg) {
    tb.cancel_fn = cancelled;
    tb.cancel_arg = arg;
}

void hr__gbudget_start(void) {
    tb.compile_end = hr_thread_cpu() + current().compile_seconds;
    tb.hit = tb.cancelled = 0;
}

int hr__gbudget_cancel_now(void) {
    if (tb.cancel_fn && tb.cancel_fn(tb.cancel_arg))
        tb.cancelled = tb.hit = 1;
    return tb.cancelled;
}

int hr__gbudget_over(void) {
    if (hr__gbudget_cancel_now())
        return 1;
    if (hr_thread_cpu() <= tb.compile_end)
        return 0;
    tb.hit = 1;
    return 1;
}

int hr__gbudget_hit(void) { return tb.hit; }

int hr__gbudget_cancelled(void) { return tb.cancelled; }

double hr__gbudget_compile_seconds(void) { return current().compile_seconds; }

double hr__gbudget_warm_seconds(void) { return current().warm_seconds; }

size_t hr__gbudget_cache_bytes(void) { return current().cache_bytes; }
