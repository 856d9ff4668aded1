/* simd.h — which vector instruction set the CPU kernels use, chosen at run time
 * (cpuid) so one binary runs on any x86-64 (and, through the portable path, on
 * anything else). Every kernel with a SIMD path takes the level as an argument,
 * so tests can run each path on one machine. */
#ifndef SPECD_CPU_SIMD_H
#define SPECD_CPU_SIMD_H

typedef enum { SIMD_GENERIC = 0, SIMD_AVX2 = 1, SIMD_AVX512 = 2 } simd_level;

/* The best level this CPU supports, unless SPECD_SIMD (generic|avx2|avx512)
 * asks for a lower one. */
simd_level simd_detect(void);
const char *simd_name(simd_level l);

#endif
