/* gguf_split.h — split GGUFs as llama.cpp's gguf-split writes them
 * (NAME-00001-of-0000N.gguf; the first part carries the metadata, every part
 * split.no / split.count / split.tensors.count): merge the parts into one file
 * the loader maps as usual, or split a file (for tests and for hosts with a
 * file-size limit). Tensor data is streamed from the mappings, never held in
 * memory whole. Both write OUT.tmp and rename it into place. */
#ifndef SPECD_CLI_GGUF_SPLIT_H
#define SPECD_CLI_GGUF_SPLIT_H

#include <stddef.h>

/* Merges n part files (in order) into out. Returns 0, or -1 with err filled
 * (a part missing, out of order, a split.count that disagrees, disk full). */
int gguf_merge_parts(const char *const *parts, int n, const char *out, char *err, size_t errlen);

/* Splits src into n_parts files PREFIX-0000k-of-0000n.gguf. Returns 0 or -1. */
int gguf_split_file(const char *src, int n_parts, const char *prefix, char *err, size_t errlen);

#endif
