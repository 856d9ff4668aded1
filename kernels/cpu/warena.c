/* warena.c — see warena.h. Chunks are bump-allocated; each counts the blocks
 * still live in it and is unmapped when the count drops to zero (a model
 * unloaded by a hot reload gives its memory back). */
#include "kernels/cpu/warena.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define WA_PAGE ((size_t)2 << 20)    /* x86-64 huge page */
#define WA_CHUNK ((size_t)64 << 20) /* chunk size unless one block needs more */

typedef struct chunk {
    struct chunk *next;
    uint8_t *base;
    size_t size, used;
    long live; /* blocks allocated and not yet freed */
} chunk;

struct warena {
    pthread_mutex_t mu;
    chunk *head; /* head is the chunk being filled */
    size_t mapped;
};

warena *warena_create(void) {
    warena *a = calloc(1, sizeof(*a));
    if (a) pthread_mutex_init(&a->mu, NULL);
    return a;
}

/* size bytes (a multiple of WA_PAGE) at a WA_PAGE-aligned address: map one
 * page more and trim both ends. */
static uint8_t *map_aligned(size_t size) {
    uint8_t *p = mmap(NULL, size + WA_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    uintptr_t a = ((uintptr_t)p + WA_PAGE - 1) & ~(uintptr_t)(WA_PAGE - 1);
    size_t head = (size_t)(a - (uintptr_t)p);
    if (head) munmap(p, head);
    if (WA_PAGE - head) munmap((uint8_t *)a + size, WA_PAGE - head);
#ifdef MADV_HUGEPAGE
    madvise((void *)a, size, MADV_HUGEPAGE); /* advice only: 4 KiB pages still work */
#endif
    return (uint8_t *)a;
}

void *warena_alloc(warena *a, size_t bytes) {
    if (!a || bytes == 0 || bytes > SIZE_MAX / 2) return NULL;
    bytes = (bytes + 63) & ~(size_t)63;
    pthread_mutex_lock(&a->mu);
    chunk *c = a->head;
    if (!c || c->size - c->used < bytes) {
        size_t size = bytes > WA_CHUNK ? (bytes + WA_PAGE - 1) & ~(WA_PAGE - 1) : WA_CHUNK;
        c = malloc(sizeof(*c));
        uint8_t *base = c ? map_aligned(size) : NULL;
        if (!base) {
            free(c);
            pthread_mutex_unlock(&a->mu);
            return NULL;
        }
        *c = (chunk){a->head, base, size, 0, 0};
        a->head = c;
        a->mapped += size;
    }
    void *p = c->base + c->used;
    c->used += bytes;
    c->live++;
    pthread_mutex_unlock(&a->mu);
    return p;
}

void warena_free(warena *a, void *p) {
    if (!a || !p) return;
    pthread_mutex_lock(&a->mu);
    for (chunk **pc = &a->head; *pc; pc = &(*pc)->next) {
        chunk *c = *pc;
        if ((uint8_t *)p < c->base || (uint8_t *)p >= c->base + c->size) continue;
        if (--c->live == 0) {
            *pc = c->next;
            munmap(c->base, c->size);
            a->mapped -= c->size;
            free(c);
        }
        break;
    }
    pthread_mutex_unlock(&a->mu);
}

size_t warena_mapped(warena *a) {
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    size_t m = a->mapped;
    pthread_mutex_unlock(&a->mu);
    return m;
}

void warena_destroy(warena *a) {
    if (!a) return;
    for (chunk *c = a->head, *n; c; c = n) {
        n = c->next;
        munmap(c->base, c->size);
        free(c);
    }
    pthread_mutex_destroy(&a->mu);
    free(a);
}
