/* backend.c — backend-independent helpers of the backend interface, and the
 * CUDA entry points of a build without CUDA. */
#include "kernels/backend.h"

#include <stdio.h>

void backend_destroy(backend *be) {
    if (be) be->i->destroy(be);
}

backend *backend_create(backend_kind kind, int device, int threads, char *err, size_t errlen) {
    if (kind == BACKEND_CPU || (kind == BACKEND_AUTO && backend_cuda_devices() == 0))
        return backend_cpu_create(threads);
    return backend_cuda_create(device, err, errlen);
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
