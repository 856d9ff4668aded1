/* simd.c — run-time choice of the kernels' instruction set (see simd.h). */
#include "kernels/cpu/simd.h"

#include <stdlib.h>
#include <string.h>

const char *simd_name(simd_level l) {
    switch (l) {
    case SIMD_AVX512: return "avx512";
    case SIMD_AVX2: return "avx2";
    case SIMD_NEON: return "neon";
    default: return "generic";
    }
}

int simd_available(simd_level out[SIMD_LEVELS_MAX]) {
    int n = 0;
    out[n++] = SIMD_GENERIC;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        out[n++] = SIMD_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl"))
            out[n++] = SIMD_AVX512;
    }
#elif defined(__aarch64__)
    out[n++] = SIMD_NEON; /* Advanced SIMD (with fp16 conversions) is part of ARMv8-A */
#endif
    return n;
}

simd_level simd_detect(void) {
    simd_level lv[SIMD_LEVELS_MAX];
    int n = simd_available(lv);
    const char *env = getenv("SPECD_SIMD");
    if (env && *env)
        for (int i = 0; i < n; i++)
            if (!strcmp(env, simd_name(lv[i]))) return lv[i];
    return lv[n - 1];
}
