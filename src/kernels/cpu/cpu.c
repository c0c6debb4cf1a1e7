#include "kernels/cpu/cpu.h"

#include "core/error.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* cpuid + xgetbv: the CPU has the instructions and the OS saves the
 * registers. (Not __builtin_cpu_supports: older compilers lack names.) */
typedef struct cpu_feat {
    bool avx2, fma, f16c, avx512; /* avx512 = F+BW+VL+DQ+VNNI (Cascade Lake,
                                     * Ice Lake on): no kernel uses BF16's */
} cpu_feat;

static cpu_feat detect(void) {
    cpu_feat f = {0};
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return f;
    bool osxsave = c & (1u << 27), avx = c & (1u << 28);
    f.fma = c & (1u << 12);
    f.f16c = c & (1u << 29);
    if (!osxsave || !avx)
        return f;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    bool ymm = (lo & 0x6) == 0x6, zmm = (lo & 0xe6) == 0xe6;
    if (!ymm || __get_cpuid_max(0, NULL) < 7)
        return f;
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = b & (1u << 5);
    f.avx512 = zmm && (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) &&
               (b & (1u << 31)) && (c & (1u << 11));
#endif
    return f;
}

static int isa_supported(hr_isa isa) {
    static cpu_feat f;
    static bool done;
    if (!done) {
        f = detect();
        done = true;
    }
    switch (isa) {
    case HR_ISA_SCALAR:
        return 1;
    case HR_ISA_AVX2:
        return f.avx2 && f.fma && f.f16c;
    case HR_ISA_AVX512:
        return f.avx512 && f.avx2 && f.fma && f.f16c;
    default:
        return 0;
    }
}

static const hr_cpu_kernels *const tables[HR_ISA_COUNT] = {
    [HR_ISA_SCALAR] = &hr__cpu_scalar,
    [HR_ISA_AVX2] = &hr__cpu_avx2,
    [HR_ISA_AVX512] = &hr__cpu_avx512,
};

const hr_cpu_kernels *hr_cpu_isa(hr_isa isa) {
    if ((unsigned)isa >= HR_ISA_COUNT)
        return NULL;
    return isa_supported(isa) ? tables[isa] : NULL;
}

/* The best table this CPU runs up to cap (NULL: none named: the best). */
static int pick(const char *cap, const hr_cpu_kernels **out, hr_error *err) {
    int c = HR_ISA_AVX512;
    if (cap && *cap) {
        for (c = 0; c < HR_ISA_COUNT && strcmp(cap, tables[c]->name); c++)
            ;
        if (c == HR_ISA_COUNT)
            return hr_err(err, HR_EINVAL, "CPU kernels '%s': scalar, avx2 or avx512", cap);
    }
    for (int i = c; i >= 0; i--)
        if (hr_cpu_isa((hr_isa)i)) {
            *out = tables[i];
            return 0;
        }
    return hr_err(err, HR_EINVAL, "no CPU kernels"); /* scalar always runs */
}

static _Atomic(const hr_cpu_kernels *) g_best;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

int hr_cpu_select(const char *cap, hr_error *err) {
    const hr_cpu_kernels *want = NULL;
    int rc = pick(cap, &want, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&g_mu);
    const hr_cpu_kernels *have = atomic_load(&g_best);
    if (!have)
        atomic_store(&g_best, have = want);
    pthread_mutex_unlock(&g_mu);
    if (have != want)
        return hr_err(err, HR_EINVAL, "CPU kernels '%s' asked, but this process runs %s's "
                      "(chosen once, by the first model loaded)", cap ? cap : "(best)",
                      have->name);
    return 0;
}

const hr_cpu_kernels *hr_cpu(void) {
    const hr_cpu_kernels *best = atomic_load(&g_best);
    if (best)
        return best;
    /* nothing selected yet: $HEARTH_ISA (one that names nothing: the best) */
    const hr_cpu_kernels *want = NULL;
    if (pick(getenv("HEARTH_ISA"), &want, NULL))
        pick(NULL, &want, NULL);
    pthread_mutex_lock(&g_mu);
    if (!(best = atomic_load(&g_best)))
        atomic_store(&g_best, best = want);
    pthread_mutex_unlock(&g_mu);
    return best;
}
