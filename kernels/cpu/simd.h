/* simd.h — which vector instruction set the CPU kernels use, chosen at run time
 * (cpuid) so one binary runs on any x86-64 (and, through the portable path, on
 * anything else; aarch64 builds add NEON, which every aarch64 CPU has). Every
 * kernel with a SIMD path takes the level as an argument, so tests can run each
 * path on one machine. */
#ifndef SPECD_CPU_SIMD_H
#define SPECD_CPU_SIMD_H

/* x86 levels are ordered (each includes the one below); SIMD_NEON exists only
 * in aarch64 builds' lists. */
typedef enum { SIMD_GENERIC = 0, SIMD_AVX2 = 1, SIMD_AVX512 = 2, SIMD_NEON = 3 } simd_level;
#define SIMD_LEVELS_MAX 4

/* The best level this CPU supports, unless SPECD_SIMD (generic|avx2|avx512|
 * neon) asks for another one it supports (an unknown or unsupported name is
 * ignored: the best level runs). */
simd_level simd_detect(void);
/* The levels this CPU can run, generic first, best last (SPECD_SIMD ignored);
 * returns how many were written to out. */
int simd_available(simd_level out[SIMD_LEVELS_MAX]);
const char *simd_name(simd_level l);

#endif
