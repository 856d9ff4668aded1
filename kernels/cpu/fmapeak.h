/* fmapeak.h — measures the CPU's floating-point multiply-add peak per SIMD
 * level with the CPU backend's threads: the denominator of the compute
 * roofline in `specd bench --kernels` (membw.h is the memory one). */
#ifndef SPECD_CPU_FMAPEAK_H
#define SPECD_CPU_FMAPEAK_H

#include "kernels/cpu/simd.h"

/* GFLOP/s (a fused multiply-add counts 2) of n_threads threads running
 * independent FMA chains at level lvl: AVX-512 16 lanes, AVX2 8, NEON 4;
 * generic: whatever the compiler makes of portable C (SSE2 mul + add on
 * x86-64). Best of `reps` runs of about 20 ms each. */
double fmapeak_measure(simd_level lvl, int n_threads, int reps);

#endif
