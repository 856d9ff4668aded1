/* jinja.h — a Jinja2 renderer for chat templates: the subset that real
 * tokenizer.chat_template strings use (if/elif/else, for with loop.* and
 * else, set incl. namespaces and block sets, macros, filter blocks,
 * break/continue; Python-like expressions with filters, tests, slicing and
 * the str/dict methods templates call), with whitespace control as Hugging
 * Face configures jinja2: trim_blocks, lstrip_blocks, loopcontrols, no
 * autoescape, the template's single trailing newline dropped.
 *
 * Not a general Jinja: no inheritance/include/import, no call blocks, no
 * autoescape; ASCII-only case mapping. Every byte of the output carries its
 * provenance: markup (the template's literals, and values the caller defines
 * as markup) or data (values the caller defines as data, e.g. message
 * content). Data stays data through concatenation, slicing, filters and
 * formatting, so a caller can let only markup spell special tokens.
 *
 * A compiled template is immutable and may be rendered from any thread at
 * once; a render (jinja_render) belongs to one thread. Rendering is bounded:
 * output bytes, evaluation steps, memory and recursion depth. */
#ifndef SPECD_JINJA_H
#define SPECD_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct jinja_template jinja_template;
typedef struct jinja_render jinja_render;
typedef struct jinja_value jinja_value;

/* Compiles src[0..len). On a syntax error (or an unknown filter/test name)
 * returns NULL and writes "line N: reason" to err. The result owns a copy of
 * everything it needs; free with jinja_destroy (accepts NULL). */
jinja_template *jinja_compile(const char *src, size_t len, char *err, size_t errlen);
void jinja_destroy(jinja_template *t);

typedef struct {
    size_t max_output;   /* bytes of output (0: 1 MiB) */
    size_t max_memory;   /* bytes of the render's arena (0: 64 MiB) */
    long max_steps;      /* evaluation steps (0: 5,000,000) */
    int max_depth;       /* macro call depth (0: 64) */
} jinja_limits;

/* A render of t: define the variables, run once, read the output, end.
 * t may be NULL for a render used only to build and inspect values.
 * Values made with the calls below live in the render's arena and die with
 * it. Never NULL (aborts on out-of-memory). */
jinja_render *jinja_render_begin(const jinja_template *t, const jinja_limits *lim);
void jinja_render_end(jinja_render *r); /* accepts NULL */

/* JSON text -> value (objects keep key order; numbers with '.', 'e' or 'E'
 * are floats). Every string in it is data when data is true. NULL when the
 * text is not JSON (err says where). */
jinja_value *jinja_from_json(jinja_render *r, const char *json, size_t n, bool data, char *err, size_t errlen);
jinja_value *jinja_string(jinja_render *r, const char *s, size_t n, bool data);
jinja_value *jinja_bool(jinja_render *r, bool b);
/* Member of a dict value (NULL when absent or d is not a dict). */
jinja_value *jinja_dict_get(const jinja_value *d, const char *key);
/* Sets (replaces or appends) key in dict d; false when d is not a dict. */
bool jinja_dict_set(jinja_render *r, jinja_value *d, const char *key, jinja_value *v);
/* The string of a string value (NULL otherwise); *n its length. */
const char *jinja_string_of(const jinja_value *v, size_t *n);
/* A list value's length and members (-1 / NULL when v is not a list). */
int jinja_list_len(const jinja_value *v);
jinja_value *jinja_list_at(const jinja_value *v, int i);

/* json.dumps(v, indent) (indent < 0: none) as a string value with v's
 * provenance; NULL when v holds something JSON cannot spell. */
jinja_value *jinja_to_json(jinja_render *r, const jinja_value *v, int indent);

/* Defines a global variable for the render (before jinja_run). */
void jinja_define(jinja_render *r, const char *name, jinja_value *v);

/* Renders. Returns 0, or -1 with "line N: reason" in err (a template's
 * raise_exception gives its own message after the line). Call once. */
int jinja_run(jinja_render *r, char *err, size_t errlen);
/* The output of a successful run: *len bytes, and per byte 1 = data, 0 =
 * markup (valid until jinja_render_end). */
const char *jinja_output(const jinja_render *r, size_t *len, const uint8_t **data);

#endif
