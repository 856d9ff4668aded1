/* test_blas_load.c — cuBLAS is opened on demand, not linked (issue 42: every
 * specd process paid ~0.4 s of CPU loading libcublasLt before main()): at start
 * no libcublas is mapped; backend_cuda_blas_load() opens it and finds the
 * functions cuda_backend.c calls; a second call answers the same. Needs the
 * CUDA libraries, not a GPU. */
#include "kernels/cuda/cuda_backend.h"

#include <stdio.h>
#include <string.h>

static int mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    if (!f) return -1;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, name)) found = 1;
    fclose(f);
    return found;
}

int main(void) {
    int fails = 0;
    int before = mapped("libcublas");
    printf("%s libcublas not mapped at start (%d)\n", before == 0 ? "ok  " : "FAIL", before);
    fails += before != 0;
    const char *err = backend_cuda_blas_load();
    printf("%s backend_cuda_blas_load: %s\n", err ? "FAIL" : "ok  ", err ? err : "cuBLAS opened, its functions found");
    fails += err != NULL;
    int after = mapped("libcublas");
    printf("%s libcublas mapped after the load (%d)\n", after == 1 ? "ok  " : "FAIL", after);
    fails += after != 1;
    const char *again = backend_cuda_blas_load();
    printf("%s a second load answers the same\n", again == err ? "ok  " : "FAIL");
    fails += again != err;
    return fails ? 1 : 0;
}
