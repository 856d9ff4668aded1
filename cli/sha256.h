/* sha256.h — SHA-256 (FIPS 180-4) for checking downloaded model files against
 * the hash the hub reports. Small and dependency-free; not constant-time (it
 * hashes public files, never secrets). */
#ifndef SPECD_CLI_SHA256_H
#define SPECD_CLI_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t len;      /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
/* Writes the digest as 64 lowercase hex digits + NUL into hex[65]. */
void sha256_final_hex(sha256_ctx *c, char hex[65]);
/* Hashes the file at PATH into hex[65]; returns 0, or -1 (errno set) when it
 * cannot be read. progress (may be NULL) is called with bytes done so far. */
int sha256_file(const char *path, char hex[65], void (*progress)(uint64_t done, void *u), void *u);

#endif
