/* tokenizer.h — text <-> token ids from GGUF tokenizer metadata: SentencePiece-
 * style (tokenizer.ggml.model = "llama") and byte-level BPE ("gpt2", with the
 * pre-tokenizer named by tokenizer.ggml.pre), streaming UTF-8-safe decode,
 * identity.
 *
 * Ownership: tok_create COPIES everything it needs (token strings, scores,
 * types, special ids) and builds its own piece->id hash map, so the gguf_file
 * may be closed right after. A tokenizer is immutable after creation: every
 * function taking `const tokenizer *` may be called from any number of threads
 * at once. tok_encode allocates scratch per call (prompts, not the per-token
 * path); tok_piece, tok_stream_* and tok_decode never allocate. */
#ifndef SPECD_TOKENIZER_H
#define SPECD_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h" /* tok_span */
#include "engine/gguf/gguf.h"

typedef enum {
    TOK_KIND_SPM = 1,  /* "llama": SentencePiece-style score-driven merges + byte fallback */
    TOK_KIND_BPE = 2,  /* "gpt2": byte-level BPE with ranked merges */
} tok_kind;

/* BPE pre-tokenizers (tokenizer.ggml.pre), each a hand-written equivalent of
 * the regex list llama.cpp gives it (\p{L}, \p{N}, \p{P} from unicode_tables,
 * Unicode 14; \s = White_Space), applied pass by pass:
 *   GPT2   ("gpt-2", "mpt", "olmo", "gpt-neox"):
 *          's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   LLAMA3 ("llama-bpe"): (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
 *          \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *          (ASCII case folding) and a pre-token that is itself a vocab token skips the merges;
 *   QWEN2  ("qwen2"): LLAMA3's regex with \p{N} instead of \p{N}{1,3}, merges always;
 *   DEFAULT ("default", or no key — llama.cpp warns that quality suffers):
 *          [\p{P}\$\+<=>\^~\|]+ | gpt-2 | \p{N}+ | [0-9][0-9][0-9];
 *   the others: see tok_pretok.c.
 * Bytes that are not valid UTF-8 count as one non-letter, non-number,
 * non-space, non-punctuation character each, like U+FFFD (so any byte string
 * round-trips; llama.cpp replaces them by U+FFFD in the text it tokenizes, and
 * its lenient decoder reads overlong forms and encoded surrogates as code
 * points, so on those inputs the two can split differently).
 * tests/tokenizer/test_pretok_ref.py checks every name against the regexes. */
typedef enum {
    TOK_PRE_NONE = 0,   /* SPM: no pre-tokenizer */
    TOK_PRE_GPT2 = 1,
    TOK_PRE_LLAMA3 = 2,
    TOK_PRE_QWEN2 = 3,
    TOK_PRE_STARCODER = 4,  /* also refact, smollm, command-r: each digit alone, then gpt-2 */
    TOK_PRE_FALCON = 5,     /* punctuation runs, then gpt-2, then 3-digit groups */
    TOK_PRE_DEEPSEEK_CODER = 6,
    TOK_PRE_DEEPSEEK_LLM = 7,
    TOK_PRE_DEFAULT = 8,    /* punctuation runs, gpt-2, number runs, 3-digit groups */
} tok_pre;

/* Token types, as stored in tokenizer.ggml.token_type. */
typedef enum {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
} tok_type;

typedef struct tokenizer tokenizer;

/* ---- create / destroy ------------------------------------------------- */

/* Builds a tokenizer from f's tokenizer.ggml.* metadata. Returns NULL and a
 * one-line reason in err on a missing/invalid key, an out-of-range special id,
 * an unsupported model kind, or (BPE) an unknown tokenizer.ggml.pre (the
 * message lists the supported values). BPE needs tokenizer.ggml.merges
 * ("left right" strings, rank = position; a repeated pair keeps its first
 * rank). No tokenizer.ggml.pre is "default", as in llama.cpp. BPE defaults: no BOS/EOS/unknown ids, add_bos_token false (true for
 * llama-bpe), add_space_prefix false; the metadata overrides them.
 * The caller owns the result; f may be closed after. */
tokenizer *tok_create(const gguf_file *f, char *err, size_t errlen);
void tok_destroy(tokenizer *t); /* accepts NULL */

/* ---- facts ------------------------------------------------------------ */

tok_kind tok_get_kind(const tokenizer *t);
const char *tok_kind_name(tok_kind k);  /* "llama", "gpt2" */
tok_pre tok_get_pre(const tokenizer *t);
const char *tok_pre_name(tok_pre p);    /* "none", "gpt-2", "llama-bpe", "qwen2", "starcoder", ... */
/* The pre-tokenizer a tokenizer.ggml.pre value selects (name[0..len), no NUL
 * needed), as tok_create reads it; TOK_PRE_NONE for a name specd does not
 * support. */
tok_pre tok_pre_parse(const char *name, size_t len);
/* Writes the supported names to buf (n bytes, NUL-terminated, cut short when
 * it does not fit) as "'default', 'gpt-2', ...", for messages. */
void tok_pre_list(char *buf, size_t n);
int32_t tok_n_merges(const tokenizer *t); /* 0 for SPM */
int32_t tok_n_vocab(const tokenizer *t);
bool tok_valid_id(const tokenizer *t, int32_t id);
/* Special ids; -1 when the vocabulary has none. */
int32_t tok_bos(const tokenizer *t);
int32_t tok_eos(const tokenizer *t);
int32_t tok_unk(const tokenizer *t);
int32_t tok_pad(const tokenizer *t);
bool tok_add_bos(const tokenizer *t);          /* tokenizer.ggml.add_bos_token (default true for SPM) */
bool tok_add_eos(const tokenizer *t);          /* tokenizer.ggml.add_eos_token (default false) */
bool tok_add_space_prefix(const tokenizer *t); /* tokenizer.ggml.add_space_prefix (default true for SPM) */
/* End of generation: eos, eot_token_id, eom_token_id (those present). */
bool tok_is_eog(const tokenizer *t, int32_t id);
/* Token facts; id must be valid (tok_valid_id) or these abort. */
const char *tok_token_str(const tokenizer *t, int32_t id, size_t *len); /* raw vocab string (with "▁"), NUL-terminated; owned by t */
tok_type tok_token_type(const tokenizer *t, int32_t id);
float tok_score(const tokenizer *t, int32_t id);
/* Longest vocab string in bytes (bounds a piece). */
size_t tok_max_token_len(const tokenizer *t);
/* Id of the token whose vocab string is exactly piece[0..len); -1 if none.
 * When a string occurs more than once the highest id wins. */
int32_t tok_find(const tokenizer *t, const char *piece, size_t len);

/* ---- identity ----------------------------------------------------------- */

/* 64-bit FNV-1a over everything that determines encode/decode: kind, every
 * token's string/score/type, special ids and the add_* flags, and for BPE the
 * pre-tokenizer and every merge. Computed at load. */
uint64_t tok_hash(const tokenizer *t);

/* Returns 0 when a and b are identical (kind, vocabulary size, token strings,
 * scores, types, special ids, add_* flags; BPE: pre-tokenizer, merges). Otherwise returns 1 and writes the
 * first difference to msg, naming a "target" and b "draft" (the speculation
 * check), e.g. "token 3: target '<0x00>' vs draft 'the'". msg may be NULL. */
int tok_compare(const tokenizer *a, const tokenizer *b, char *msg, size_t n);

/* ---- encode ------------------------------------------------------------- */

/* Tokenizes text[0..len) (any bytes; NUL is ordinary text; len < 1 GiB, more
 * aborts: bound request sizes before calling).
 * add_special: prepend BOS when the vocabulary's add_bos_token is set and
 *   append EOS when add_eos_token is set (prompts: true).
 * parse_special: control and unknown tokens written literally in the text
 *   (e.g. "</s>") become those tokens; when false they are plain text.
 *   User-defined tokens are always matched as whole tokens (as llama.cpp does).
 * SPM: spaces become U+2581 "▁"; with add_space_prefix a "▁" is prepended to
 * the text and to each text run that follows a special token; merges are
 * greedy by highest score (ties: leftmost); pieces not in the vocabulary fall
 * back to <0xNN> byte tokens (else a one-byte token, else the unknown token,
 * else the byte is dropped). Only normal and user-defined tokens are merge
 * results (control, byte and unused tokens are never produced from text).
 * BPE: each text run is split by the pre-tokenizer (see tok_pre); each piece's
 * bytes are mapped to GPT-2's printable code points, then adjacent symbols are
 * merged lowest rank first (ties: leftmost); no space prefix is added. A final
 * symbol with no token becomes the one-byte tokens of its mapped text's bytes,
 * dropping bytes with none — llama.cpp's rule, which is how a vocabulary that
 * lacks some byte tokens (Falcon's has none for 0x03) encodes such bytes.
 * Returns the number of ids. If that is more than max_out, writes the first
 * max_out and returns -(number needed). out may be NULL when max_out is 0. */
int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
               bool parse_special, int32_t *out, int max_out);

/* A byte range [start, end) of a text: tok_span, public (engine.h). */

/* tok_encode for text in which only some bytes may spell control tokens: a
 * control or unknown token is matched only where its whole text lies inside
 * one of spans[0..n_spans) (sorted by start, not overlapping; out of order
 * aborts; ends past len are clipped). Everything else is tokenized exactly as
 * tok_encode with parse_special = false does (user-defined tokens still match
 * whole anywhere). So a chat prompt whose spans are the template's own markup
 * gives the same ids as tok_encode(parse_special = true) whenever the message
 * content spells no special token, and content that does spell one (e.g.
 * "</s><s>") stays plain text. spans may be NULL when n_spans is 0 (= plain). */
int tok_encode_spans(const tokenizer *t, const char *text, size_t len, bool add_special, const tok_span *spans,
                     int n_spans, int32_t *out, int max_out);

/* The pre-tokenizer alone (BPE; testing and diagnostics): splits
 * text[0..len) (no special-token matching) and writes the end byte offset of
 * each piece to ends. SPM has no pre-tokenizer: one piece (none when len is 0).
 * Returns the number of pieces; if more than max, writes the first max and
 * returns -(number). Allocates scratch per call. */
int tok_split(const tokenizer *t, const char *text, size_t len, size_t *ends, int max);
/* The same for a pre-tokenizer without a vocabulary (TOK_PRE_NONE: one
 * piece, as SPM), e.g. `specd tokenize --splits --pre NAME`. */
int tok_split_pre(tok_pre pre, const char *text, size_t len, size_t *ends, int max);

/* ---- decode ------------------------------------------------------------- */

/* Bytes of one token, exactly as they enter the text. BPE: normal tokens map
 * back through GPT-2's byte mapping to raw bytes (possibly part of a UTF-8
 * sequence), user-defined -> its string, control/unused -> nothing.
 * SPM: "▁" -> ' ', a byte token
 * -> its raw byte (possibly half a UTF-8 sequence), control and unused tokens ->
 * nothing, unknown -> "▅" (U+2585), user-defined -> its string. No leading
 * space is removed. Returns the length; if it exceeds n returns -(length) and
 * writes nothing. No NUL is written. id must be valid. */
int tok_piece(const tokenizer *t, int32_t id, char *buf, size_t n);

enum {
    /* Render control and unknown tokens as their vocab text (e.g. "<s>",
     * "<unk>") instead of nothing / "▅". */
    TOK_DECODE_SPECIAL = 1u << 0,
    /* The ids continue an earlier sequence (e.g. generated after a prompt): do
     * not remove the space that add_space_prefix put at the start of a text. */
    TOK_DECODE_CONTINUATION = 1u << 1,
};

/* Decodes ids to text: the exact inverse of tok_encode for any input text
 * (decode(encode(s)) == s, BOS/EOS render as nothing; with parse_special,
 * decode with TOK_DECODE_SPECIAL). With add_space_prefix the first space of
 * the sequence is removed (unless CONTINUATION), and, after a user-defined
 * token or (with TOK_DECODE_SPECIAL) a control/unknown token, the first space
 * of the text that follows, mirroring the prefix tok_encode adds there.
 * Other tokens' spaces are kept (llama.cpp strips only at the start).
 * Bytes are returned raw (no UTF-8 repair; use tok_stream for that).
 * Returns the length; if it exceeds cap returns -(length) (buf is then
 * clobbered). Writes no NUL. Every id must be valid (tok_valid_id): an
 * invalid id aborts — validate ids that come from outside. */
int tok_decode(const tokenizer *t, const int32_t *ids, int n, char *buf, size_t cap,
               unsigned flags);

/* ---- streaming decode --------------------------------------------------- */

/* Per-sequence streaming state, caller-allocated (plain struct, no malloc).
 * Feeds one id at a time and yields only complete, valid UTF-8: bytes of an
 * incomplete sequence (from byte tokens) are held until complete; a sequence
 * that can no longer complete becomes U+FFFD (one per maximal invalid
 * subpart). For valid UTF-8 text the concatenated output equals tok_decode. */
typedef struct {
    uint8_t pend[4];  /* bytes of an incomplete UTF-8 sequence */
    uint8_t npend;    /* bytes in pend */
    uint8_t need;     /* total length of the sequence being collected (0: none) */
    bool strip;       /* the next ' ' byte is the added space prefix: drop it */
    unsigned flags;   /* TOK_DECODE_* */
} tok_stream;

void tok_stream_init(tok_stream *s, const tokenizer *t, unsigned flags);
/* Bytes one feed can produce at most; size the output buffer with it. */
size_t tok_stream_max_out(const tokenizer *t);
/* Feeds id; writes the bytes that are safe to emit now. Returns their count,
 * or -(tok_stream_max_out) without consuming id when cap is smaller than that.
 * id must be valid. */
int tok_stream_feed(tok_stream *s, const tokenizer *t, int32_t id, char *out, size_t cap);
/* End of sequence: emits U+FFFD for an unfinished sequence (0 or 3 bytes;
 * out needs 3 bytes) and resets the UTF-8 state. */
int tok_stream_flush(tok_stream *s, char *out, size_t cap);

#endif
