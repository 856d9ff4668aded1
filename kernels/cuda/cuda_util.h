/* cuda_util.h — what every CUDA file of specd shares: checked calls that report
 * file:line, the ggml type ids (kernels/ggml_type.h), and the device-side
 * sequence descriptor of a batched attention/kv_write call. C and CUDA C++. */
#ifndef SPECD_CUDA_UTIL_H
#define SPECD_CUDA_UTIL_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/ggml_type.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA kernels take GGML_TYPE_F32/F16/BF16/Q8_0 (kernels/ggml_type.h).
 * Q8_0 weights are stored split on the device: N*K int8 quants, then N*K/32
 * f16 scales; other types are dequantized to F16 on the host by weight(). */

/* One sequence of a batched step, as the kernels read it (staged by the
 * backend from attn_seq into device memory). */
typedef struct {
    int row0, n_new, n_past, window;
    const int32_t *blocks;  /* device copy of the block table */
    const uint8_t *mask;    /* device copy of the (n_new, n_new) mask, or NULL (causal) */
} cu_seq;

/* Aborts with file:line and the CUDA error string: a failing kernel launch or
 * copy on the step path means a broken device or a specd bug. */
void cu_die(const char *file, int line, const char *what, const char *msg);

#define CU_CHECK(call)                                                                                       \
    do {                                                                                                     \
        cudaError_t cu_e_ = (call);                                                                          \
        if (cu_e_ != cudaSuccess) cu_die(__FILE__, __LINE__, #call, cudaGetErrorString(cu_e_));              \
    } while (0)

/* After a launch: the launch configuration error, if any. */
#define CU_CHECK_LAUNCH() CU_CHECK(cudaGetLastError())

#ifdef __cplusplus
}
#endif

#endif
