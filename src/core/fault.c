#include "core/fault.h"
#include "core/log.h"

#include <execinfo.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic long target[HR_FAULT_N]; /* 0: unarmed */
static _Atomic long count[HR_FAULT_N];
static _Atomic bool fired[HR_FAULT_N];

void hr_fault_set(hr_fault_kind k, long n) {
    atomic_store(&target[k], 0);
    atomic_store(&count[k], 0);
    atomic_store(&fired[k], false);
    atomic_store(&target[k], n > 0 ? n : 0);
}

void hr_fault_arm_env(void) {
    const char *v = getenv("HEARTH_FAULT");
    if (!v || !*v)
        return;
    static const char *const names[HR_FAULT_N] = {"alloc:", "write:", "device:"};
    static const char *const what[HR_FAULT_N] = {"allocation", "file write",
                                                 "forward step on a GPU"};
    for (int k = 0; k < HR_FAULT_N; k++) {
        size_t l = strlen(names[k]);
        if (strncmp(v, names[k], l))
            continue;
        char *end;
        long n = strtol(v + l, &end, 10);
        if (*end || n <= 0)
            break;
        hr_log(HR_LOG_WARN, "HEARTH_FAULT: the %ld%s %s from now fails", n,
               n % 10 == 1 && n % 100 != 11 ? "st" : n % 10 == 2 && n % 100 != 12 ? "nd"
               : n % 10 == 3 && n % 100 != 13 ? "rd" : "th",
               what[k]);
        hr_fault_set((hr_fault_kind)k, n);
        return;
    }
    hr_log(HR_LOG_WARN, "HEARTH_FAULT=%s: expected alloc:N, write:N or device:N (N >= 1); ignored",
           v);
}

bool hr_fault_hit(hr_fault_kind k) {
    long t = atomic_load_explicit(&target[k], memory_order_relaxed);
    if (!t)
        return false;
    if (atomic_fetch_add(&count[k], 1) + 1 != t)
        return false;
    atomic_store(&fired[k], true);
    if (getenv("HEARTH_FAULT_TRACE")) { /* where it fired: for finding the caller */
        void *bt[32];
        backtrace_symbols_fd(bt, backtrace(bt, 32), 2);
    }
    return true;
}

long hr_fault_count(hr_fault_kind k) { return atomic_load(&count[k]); }

bool hr_fault_fired(hr_fault_kind k) { return atomic_load(&fired[k]); }
