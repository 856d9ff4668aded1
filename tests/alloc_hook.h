/* alloc_hook.h — counts heap allocations in a test executable and can make
 * them fail: it interposes malloc and friends (glibc lets the executable
 * define them; they forward to __libc_*). Set `counting` around the code under
 * test and read `n_calls`. While counting, the fail_at-th counted call (1 = the
 * first; 0 = none) and every call of at least fail_bytes bytes (0 = none)
 * return NULL as a real shortage would (realloc leaves its block alone).
 * Include in exactly one file of a test. Under a sanitizer runtime the hook
 * cannot be installed: ALLOC_HOOK_SANITIZED is defined and the test should skip. */
#ifndef SPECD_ALLOC_HOOK_H
#define SPECD_ALLOC_HOOK_H

#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ALLOC_HOOK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
#define ALLOC_HOOK_SANITIZED 1
#endif
#endif

#ifndef ALLOC_HOOK_SANITIZED
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static volatile int counting;
static volatile long n_calls;
static volatile long fail_at;
static volatile size_t fail_bytes;

/* Counts a call of bytes bytes; whether it must fail. */
static int hook_fails(size_t bytes) {
    if (!counting) return 0;
    n_calls++;
    return n_calls == fail_at || (fail_bytes && bytes >= fail_bytes);
}

void *malloc(size_t n) { return hook_fails(n) ? NULL : __libc_malloc(n); }
void *calloc(size_t a, size_t b) {
    size_t n = b && a > (size_t)-1 / b ? (size_t)-1 : a * b;
    return hook_fails(n) ? NULL : __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) { return hook_fails(n) ? NULL : __libc_realloc(p, n); }
void *aligned_alloc(size_t al, size_t n) { return hook_fails(n) ? NULL : __libc_memalign(al, n); }
void *memalign(size_t al, size_t n) { return hook_fails(n) ? NULL : __libc_memalign(al, n); }
int posix_memalign(void **out, size_t al, size_t n) {
    *out = hook_fails(n) ? NULL : __libc_memalign(al, n);
    return *out ? 0 : 12 /* ENOMEM */;
}
void free(void *p) { __libc_free(p); }
#endif

#endif
