# pretok_ref.py — an independent reference for specd's byte-level BPE
# pre-tokenizers: llama.cpp's regex lists run by the `regex` module (Debian's
# python3-regex: \p{L}, \p{N}, \p{P}, lookahead), applied pass by pass as
# llama.cpp's unicode_regex_split does. Shares no code or table with
# engine/tok_pretok.c.
#
# Source: llama.cpp src/llama-vocab.cpp — the `regex_exprs` that the
# llm_tokenizer_bpe constructor sets for each LLAMA_VOCAB_PRE_TYPE, and the
# tokenizer.ggml.pre name -> type mapping in llama_vocab::impl::load;
# src/unicode.cpp — unicode_regex_split (the pass-by-pass semantics) and
# unicode_cpts_from_utf8 (invalid bytes). The regex strings below are those
# texts, written with \u escapes for non-ASCII characters.
#
# How the regexes are run, and why that is llama.cpp's meaning of them:
#  * Passes: the text starts as one fragment; each regex in turn splits every
#    fragment into its leftmost-first, non-overlapping matches and the text
#    between them, and all of those go on to the next regex. A regex sees only
#    its fragment, so (?!\S) and $ stop at the fragment's end.
#  * llama.cpp runs some regexes as hand-written code instead
#    (unicode_regex_split_custom_gpt2 for the gpt-2 regex,
#    unicode_regex_split_custom_llama3 for the llama-bpe one) and the rest
#    with std::regex (ECMAScript) over a "collapsed" text. Reading both, they
#    give the regex's own result for every in-range code point: the gpt-2
#    code's extra "\s+" fallback only ever takes a single white space before a
#    non-space, which the regex leaves as a one-character gap — the same
#    piece; the llama-bpe code lowercases with unicode_tolower, which maps no
#    non-ASCII code point to s/t/r/e/v/m/l/d, so it equals the adapted
#    '[sS]|... regex llama.cpp lists (not the original (?i:) one, which in
#    Python would also match U+017F and U+212A). So the reference is the
#    regex, run by a regex engine.
#  * \s is the Unicode White_Space property on both sides: llama.cpp's
#    unicode_set_whitespace, and std::regex sees every non-ASCII white space
#    as \x0B. The `regex` module's \s is exactly White_Space (checked below,
#    see category_mismatches).
#  * $ (deepseek-llm's \s+$) is ECMAScript's end of input, written \Z here
#    (Python's $ would also match before a final "\n"; no fragment at that
#    pass holds one, since [\r\n] cut them out first, but \Z says it).
#  * Invalid UTF-8: each byte that is not part of a well-formed sequence
#    (Unicode 15 table 3-7) is one U+FFFD. llama.cpp does exactly that for
#    stray continuation bytes, truncated sequences and bytes F8..FF; its
#    decoder (unicode_cpt_from_utf8) also ACCEPTS overlong forms (C0 80 -> U+0000),
#    encoded surrogates (ED A0 80 -> U+D800) and F4 90.. / F5..F7 (> U+10FFFF,
#    which then throws while re-encoding), and it replaces invalid bytes by
#    EF BF BD in the text it tokenizes. specd keeps every byte (any byte string
#    round-trips) and classes each byte of an ill-formed sequence like U+FFFD
#    (neither letter, number, punctuation nor space), which is what this
#    reference computes; for the inputs llama.cpp rejects too, that is also
#    llama.cpp's split.
import unicodedata

try:
    import regex
except ImportError:  # the caller reports it; CI installs python3-regex (tests/deps.sh)
    regex = None

# ---- llama.cpp's regex lists ------------------------------------------------

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CJK = '[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+'  # [一-龥ࠀ-一가-퟿]+
# deepseek-llm's letter list. llama.cpp's source spells U+1F7D, U+1FD3, U+1FDB,
# U+1FBE, U+2126 and U+212A literally (cased letters, like the rest); an
# NFC-normalized copy of that text turns them into U+03CE, U+0390, U+038A,
# U+03B9, U+03A9 and 'K' and two of its ranges run backwards.
DS_LETTERS = (
    '\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af'
    '\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5'
    '\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba'
    '\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45'
    '\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe'
    '\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc'
    '\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139'
    '\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3'
    '\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06'
    '\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3'
    '\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df'
    '\U0001e900-\U0001e943]+')
DS_PUNCT = '\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+'  # \s?[!-/:-~！-／：-～‘-‟　-。]+

# LLAMA_VOCAB_PRE_TYPE -> regex_exprs
PRE_TYPES = {
    'GPT2': [GPT2],  # also MPT, OLMO
    'LLAMA3': [LLAMA3],
    'QWEN2': [QWEN2],
    'STARCODER': [r'\p{N}', GPT2],  # also REFACT, COMMAND_R, SMOLLM
    'FALCON': [r'[\p{P}\$\+<=>\^~\|`]+', GPT2, r'[0-9][0-9][0-9]'],
    'DEEPSEEK_CODER': ['[\r\n]', r'\s?\p{L}+', r'\s?\p{P}+', CJK, r'\p{N}'],
    'DEEPSEEK_LLM': ['[\r\n]', DS_LETTERS, DS_PUNCT, r'\s+$', CJK, r'\p{N}+'],
    'DEFAULT': [r'[\p{P}\$\+<=>\^~\|]+', GPT2, r'\p{N}+', r'[0-9][0-9][0-9]'],
}

# tokenizer.ggml.pre -> type, for every name specd accepts. "gpt-neox" is no
# llama.cpp name (llama.cpp refuses it); specd reads it as the gpt-2 regex,
# which is what the GPT-NeoX tokenizer's ByteLevel pre-tokenizer uses.
NAMES = {
    'default': 'DEFAULT', 'gpt-2': 'GPT2', 'mpt': 'GPT2', 'olmo': 'GPT2', 'gpt-neox': 'GPT2',
    'llama-bpe': 'LLAMA3', 'qwen2': 'QWEN2', 'starcoder': 'STARCODER', 'refact': 'STARCODER',
    'smollm': 'STARCODER', 'command-r': 'STARCODER', 'falcon': 'FALCON',
    'deepseek-llm': 'DEEPSEEK_LLM', 'deepseek-coder': 'DEEPSEEK_CODER',
}

# Deliberately broken variants (the test must catch them): name -> (type, pass
# index, replacement regex).
BROKEN = {
    'falcon-dollar': ('FALCON', 0, r'[\p{P}\+<=>\^~\|`]+'),  # falcon's punctuation class minus '$'
    'gpt2-lookahead': ('GPT2', 0, GPT2.replace(r'\s+(?!\S)', r'\s+')),  # no back-off before a non-space
}


def python_regex(expr):
    """llama.cpp's regex text as a Python `regex` pattern (see the header: a
    final $ is \\Z)."""
    if expr.endswith('$') and not expr.endswith(r'\$'):
        expr = expr[:-1] + r'\Z'
    return regex.compile(expr)


class PretokRef:
    """Splits bytes with one llama.cpp pre-tokenizer type (or a broken variant)."""

    def __init__(self, pre_type, broken=None):
        exprs = list(PRE_TYPES[pre_type])
        if broken:
            btype, k, repl = BROKEN[broken]
            if btype == pre_type:
                exprs[k] = repl
        self.passes = [python_regex(e) for e in exprs]

    def split_cps(self, text):
        """Piece ends (code point indices) of str text."""
        frags = [(0, len(text))]
        for rx in self.passes:
            out = []
            for a, b in frags:
                p = a
                for m in rx.finditer(text[a:b]):
                    s, e = a + m.start(), a + m.end()
                    if s > p:
                        out.append((p, s))
                    out.append((s, e))
                    p = e
                if p < b:
                    out.append((p, b))
            frags = out
        return [b for _, b in frags]

    def split(self, data):
        """Piece ends (byte offsets) of bytes data."""
        text, offs = decode(data)
        return [offs[e] for e in self.split_cps(text)]


def decode(data):
    """(str, byte offset of each code point + the length): well-formed UTF-8
    sequences are their code points; every other byte is one U+FFFD."""
    chars, offs = [], []
    i, n = 0, len(data)
    while i < n:
        b = data[i]
        k = 1 if b < 0x80 else 2 if 0xC2 <= b <= 0xDF else 3 if 0xE0 <= b <= 0xEF else 4 if 0xF0 <= b <= 0xF4 else 0
        offs.append(i)
        try:
            if k == 0 or i + k > n:
                raise UnicodeDecodeError('utf-8', data, i, i + 1, 'ill-formed')
            chars.append(data[i:i + k].decode('utf-8'))  # strict: no overlongs, surrogates, > U+10FFFF
            i += k
        except UnicodeDecodeError:
            chars.append('\ufffd')
            i += 1
    offs.append(n)
    return ''.join(chars), offs


def category_mismatches():
    """Code points whose \\p{L}, \\p{N}, \\p{P} or \\s membership differs between
    the `regex` module (its own Unicode tables) and Python's unicodedata, which
    generated specd's engine/tokenizer/unicode_tables.c (White_Space: the fixed list in
    uni_is_space). Returns the set."""
    space = {0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0x20}
    space |= set(range(0x09, 0x0E)) | set(range(0x2000, 0x200B))
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    every = ''.join(map(chr, cps))
    major = [unicodedata.category(ch)[0] for ch in every]
    bad = set()
    for prop in 'LNPs':
        got = bytearray(len(cps))
        for m in regex.finditer(r'\s+' if prop == 's' else r'\p{%s}+' % prop, every):
            got[m.start():m.end()] = b'\1' * (m.end() - m.start())
        for i, c in enumerate(cps):
            if bool(got[i]) != (c in space if prop == 's' else major[i] == prop):
                bad.add(c)
    return bad
