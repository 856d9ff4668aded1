/* rope.cu — rotary position embedding in place; angles in double like the CPU
 * reference, so long positions keep their precision. */
#include "kernels/cuda/ops.h"

__global__ void rope_kernel(float *x, const int32_t *pos, const float *inv_freq, int H, int E, int n_rot, int neox) {
    int m = blockIdx.x, half = n_rot / 2;
    for (int t = threadIdx.x; t < H * half; t += blockDim.x) {
        int h = t / half, i = t % half;
        double s, c;
        sincos((double)pos[m] * inv_freq[i], &s, &c);
        float *v = x + ((size_t)m * H + h) * E;
        int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        float a = v[i0], b = v[i1];
        v[i0] = a * (float)c - b * (float)s;
        v[i1] = a * (float)s + b * (float)c;
    }
}

extern "C" void cu_rope(cudaStream_t st, float *x, const int32_t *pos, const float *inv_freq, int M, int H, int E,
                        int n_rot, int neox) {
    if (M <= 0) return;
    rope_kernel<<<M, 256, 0, st>>>(x, pos, inv_freq, H, E, n_rot, neox);
    CU_CHECK_LAUNCH();
}
