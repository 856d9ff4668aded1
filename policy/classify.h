/* classify.h — a cheap content-type guess for a prompt ("code", "structured",
 * "chat") so requests that give no content_type still get a γ rule. Simple
 * features in one pass over at most the first POL_CLASSIFY_SCAN bytes: code
 * keywords, statement punctuation and indentation; JSON/YAML/CSV/XML and
 * markdown-table shapes; requests that ask for code or for a data format.
 * Not a model of language: ambiguous prompts fall back to "chat". */
#ifndef SPECD_POL_CLASSIFY_H
#define SPECD_POL_CLASSIFY_H

#include <stddef.h>

#define POL_CLASSIFY_SCAN 2048

/* Returns a static string: "code", "structured" or "chat". prompt need not be
 * NUL-terminated; NULL or empty gives "chat". Thread-safe, allocation-free,
 * a few microseconds. */
const char *pol_classify(const char *prompt, size_t len);

#endif
