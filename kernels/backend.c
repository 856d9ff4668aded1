/* backend.c — backend-independent helpers of the backend interface, and the
 * CUDA entry points of a build without CUDA. */
#include "kernels/backend.h"

#include <stdio.h>

void backend_destroy(backend *be) {
    if (be) be->i->destroy(be);
}

void backend_describe(backend *be, char *buf, size_t n) {
    if (!n) return;
    if (be->i->describe) be->i->describe(be, buf, n);
    else snprintf(buf, n, "%s", be->i->name);
}

backend *backend_create(backend_kind kind, int device, int threads, char *err, size_t errlen) {
    if (kind == BACKEND_CPU || (kind == BACKEND_AUTO && backend_cuda_devices() == 0))
        return backend_cpu_create(threads);
    return backend_cuda_create(device, err, errlen);
}

void backend_profile_table(FILE *out, const char *const *names, const double *ms, const long long *calls, int n) {
    double tot = 0;
    for (int i = 0; i < n; i++) tot += ms[i];
    fprintf(out, "  %-10s %8s %10s %9s %6s\n", "op", "calls", "total_ms", "mean_us", "share");
    for (int i = 0; i < n; i++)
        if (calls[i])
            fprintf(out, "  %-10s %8lld %10.3f %9.2f %5.1f%%\n", names[i], calls[i], ms[i], 1e3 * ms[i] / calls[i],
                    tot > 0 ? 100 * ms[i] / tot : 0);
}

#ifndef SPECD_CUDA
backend *backend_cuda_create(int device, char *err, size_t errlen) {
    snprintf(err, errlen, "this specd was built without CUDA (rebuild with meson -Dcuda=enabled and the CUDA Toolkit "
                          "at /usr/local/cuda)");
    return NULL;
}
int backend_cuda_built(void) { return 0; }
int backend_cuda_devices(void) { return 0; }
#endif
