/* backend.c — backend-independent helpers of the backend interface. */
#include "kernels/backend.h"

void backend_destroy(backend *be) {
    if (be) be->i->destroy(be);
}
