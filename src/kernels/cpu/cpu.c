#include "kernels/cpu/cpu.h"

#include <stdlib.h>
#include <string.h>

static int isa_supported(hr_isa isa) {
    switch (isa) {
    case HR_ISA_SCALAR:
        return 1;
    case HR_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case HR_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni") &&
               isa_supported(HR_ISA_AVX2);
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
    __builtin_cpu_init();
    return isa_supported(isa) ? tables[isa] : NULL;
}

const hr_cpu_kernels *hr_cpu(void) {
    static const hr_cpu_kernels *best;
    if (best)
        return best;
    hr_isa cap = HR_ISA_AVX512;
    const char *env = getenv("HEARTH_ISA");
    if (env)
        for (int i = 0; i < HR_ISA_COUNT; i++)
            if (!strcmp(env, tables[i]->name))
                cap = (hr_isa)i;
    for (int i = cap; i >= 0; i--)
        if (hr_cpu_isa((hr_isa)i)) {
            best = tables[i];
            break;
        }
    return best;
}
