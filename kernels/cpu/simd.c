/* simd.c — run-time choice of the kernels' instruction set (see simd.h). */
#include "kernels/cpu/simd.h"

#include <stdlib.h>
#include <string.h>

const char *simd_name(simd_level l) {
    return l == SIMD_AVX512 ? "avx512" : l == SIMD_AVX2 ? "avx2" : "generic";
}

simd_level simd_detect(void) {
    simd_level best = SIMD_GENERIC;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = SIMD_AVX2;
    if (best == SIMD_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        best = SIMD_AVX512;
#endif
    const char *env = getenv("SPECD_SIMD");
    if (env && *env) {
        simd_level want = !strcmp(env, "avx512") ? SIMD_AVX512 : !strcmp(env, "avx2") ? SIMD_AVX2 : SIMD_GENERIC;
        if (want < best) best = want;
    }
    return best;
}
