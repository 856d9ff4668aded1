/* errkind.h — the one failure kind an engine error message carries in its
 * text: a memory shortage. Loading reports errors as strings (char *err,
 * size_t errlen); a caller that must treat "did not fit" differently from
 * "bad file" (spec.c drops a draft that does not fit) tests err_is_oom()
 * instead of matching the wording of a particular message. */
#ifndef SPECD_ENGINE_ERRKIND_H
#define SPECD_ENGINE_ERRKIND_H

#include <stdbool.h>
#include <string.h>

/* Every allocation failure of model loading (gguf_read.c's mmap, model.c) and KV
 * pool creation (kv.c) puts this at the very start of err, before the path or
 * anything else, then says what did not fit: "out of memory: m.gguf: the cuda
 * backend cannot hold a 4096 x 32000 q8_0 tensor". No other failure starts
 * with it, so text taken from a file or a path cannot make a bad model read
 * as a shortage. A caller that wraps such an error keeps the prefix first. */
#define SPECD_ERR_OOM "out of memory: "

/* Whether err (not NULL) reports a memory shortage. */
static inline bool err_is_oom(const char *err) {
    return strncmp(err, SPECD_ERR_OOM, sizeof(SPECD_ERR_OOM) - 1) == 0;
}

#endif
