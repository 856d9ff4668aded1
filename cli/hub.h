/* hub.h — models by name: resolves a Hugging Face model reference
 * (REPO[:QUANT] or REPO/FILE.gguf) to a GGUF file in the local cache,
 * downloading it with libcurl when it is not there yet.
 *
 * What it does: lists the repository through the hub API
 * ($HF_ENDPOINT/api/models/REPO/tree/main), picks the file by quant tag the way
 * llama.cpp's -hf does, fetches $HF_ENDPOINT/REPO/resolve/main/FILE into
 * $SPECD_CACHE/REPO/FILE (default ~/.cache/specd) via FILE.part, resuming a
 * partial download with a Range request (also after a dropped connection,
 * a few times), checks the SHA-256 the hub reports for LFS files (listing
 * lfs.oid, or the x-linked-etag header) and refuses a file that does not match.
 * Split GGUFs (NAME-00001-of-0000N.gguf) are fetched part by part and merged
 * into one NAME.gguf. A reference found in the cache resolves without touching
 * the network. HF_TOKEN (or the huggingface-cli token file) is sent as a
 * bearer token to the endpoint only.
 *
 * What it is not: a general hub client (no revisions other than main, no
 * non-GGUF files, no uploads). Single-threaded; progress goes to stderr. */
#ifndef SPECD_CLI_HUB_H
#define SPECD_CLI_HUB_H

#include <stdbool.h>
#include <stddef.h>

/* The pair the no-model start message recommends: Qwen2.5 1.5B verified by a
 * 0.5B draft of the same family (one tokenizer, byte-level BPE "qwen2"); Q8_0
 * because their 896/1536-wide rows send llama.cpp's K-quant mixes to Q5_0,
 * which specd does not compute with. */
#define SPECD_RECOMMENDED_TARGET "Qwen/Qwen2.5-1.5B-Instruct-GGUF:Q8_0"
#define SPECD_RECOMMENDED_DRAFT "Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q8_0"

typedef enum {
    HUB_OK = 0,
    HUB_ERR_USAGE,     /* the reference is malformed */
    HUB_ERR_NOT_FOUND, /* no such repository / no GGUF matching the tag */
    HUB_ERR_AUTH,      /* 401/403: gated or private, HF_TOKEN missing or refused */
    HUB_ERR_NETWORK,   /* could not reach the endpoint / transfer kept failing */
    HUB_ERR_HASH,      /* the downloaded bytes do not match the hub's SHA-256 */
    HUB_ERR_IO,        /* cache directory / disk problem */
    HUB_ERR_OFFLINE,   /* not cached and offline mode forbids the network */
} hub_status;

typedef struct {
    char repo[256];  /* owner/name */
    char file[512];  /* explicit file path inside the repo, or "" */
    char quant[64];  /* quant tag (Q4_K_M, q8_0, ...), or "" for the default choice */
} hub_ref;

enum {
    HUB_OFFLINE = 1 << 0, /* never use the network (also $HF_HUB_OFFLINE=1 / $SPECD_OFFLINE=1) */
    HUB_QUIET = 1 << 1,   /* no progress output */
    HUB_REFRESH = 1 << 2, /* ask the hub even when a matching file is cached */
};

/* Parses "owner/name[:QUANT]" or "owner/name/path/FILE.gguf". */
hub_status hub_parse_ref(const char *spec, hub_ref *r, char *err, size_t errlen);

/* The cache directory ($SPECD_CACHE or ~/.cache/specd), without trailing '/'. */
const char *hub_cache_dir(char *buf, size_t n);

/* Resolves SPEC to a local GGUF path (written into path). On failure returns
 * the status and a one-line reason for a person in err. */
hub_status hub_resolve(const char *spec, unsigned flags, char *path, size_t pathlen, char *err, size_t errlen);

/* Exit status for a CLI: 0 ok, 2 usage, 1 anything else. */
int hub_exit_code(hub_status s);

/* Resolves the common -hf / --hf-draft flags of serve/generate/bench: when
 * *spec is non-NULL, resolves it into buf and points *model at buf. Prints
 * "specd CMD: ..." and returns non-zero on failure. */
int hub_resolve_flag(const char *cmd, const char *spec, char *buf, size_t n, const char **model);

#endif
