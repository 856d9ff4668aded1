/* train_bpe.h — a byte-level BPE vocabulary trained on text, stored the way
 * llama.cpp reads one: tokenizer.ggml.model "gpt2", pre-tokenizer "gpt-2",
 * the 256 byte tokens in GPT-2's printable byte mapping, then one token per
 * merge (the concatenation of its two parts), then "<|endoftext|>" as BOS,
 * EOS and end of text; merges as "left right" strings in rank order.
 *
 * Training: the text is split by the GPT-2 pre-tokenizer; pieces are counted
 * once each; repeatedly the most frequent adjacent pair (ties: the pair whose
 * ids are lowest) is merged everywhere, until the vocabulary has n_vocab
 * tokens or no pair occurs twice. Deterministic for the same text.
 *
 * Threading: any one thread. */
#ifndef SPECD_TRAIN_BPE_H
#define SPECD_TRAIN_BPE_H

#include "engine/gguf/gguf.h"

#include <stddef.h>

/* Trains on texts[0..n) (lens bytes each) up to n_vocab tokens (>= 258) and
 * sets the tokenizer.* keys in w. Returns the vocabulary size reached, or -1
 * with err (out of memory, n_vocab too small). */
int train_bpe(gguf_writer *w, const char *const *texts, const size_t *lens, int n, int n_vocab, char *err,
              size_t errlen);

#endif
