# spm_ref.py — a deliberately naive, independent SentencePiece-style (SPM)
# encoder in Python, used to cross-check specd's C tokenizer. Not fast.
import struct

_SCALAR = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?',
           10: '<Q', 11: '<q', 12: '<d'}


def read_gguf_kv(path):
    """Returns the metadata of a GGUF file as {key: value} (arrays as lists)."""
    b = open(path, 'rb').read()
    assert b[:4] == b'GGUF', path
    o = 4
    _ver, _nt, nkv = struct.unpack_from('<IQQ', b, o)
    o += 20

    def rstr():
        nonlocal o
        n, = struct.unpack_from('<Q', b, o)
        o += 8
        s = b[o:o + n]
        o += n
        return s

    def val(t):
        nonlocal o
        if t == 8:
            return rstr()
        if t == 9:
            at, n = struct.unpack_from('<IQ', b, o)
            o += 12
            return [val(at) for _ in range(n)]
        fmt = _SCALAR[t]
        v, = struct.unpack_from(fmt, b, o)
        o += struct.calcsize(fmt)
        return v

    kv = {}
    for _ in range(nkv):
        k = rstr().decode()
        t, = struct.unpack_from('<I', b, o)
        o += 4
        kv[k] = val(t)
    return kv


class SpmRef:
    """SPM encode: escape spaces to U+2581, add a space prefix, split into
    UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is
    the highest-scoring normal token (ties: leftmost), then map pieces to ids
    with <0xNN> byte fallback. Special tokens are not parsed."""

    def __init__(self, path):
        kv = read_gguf_kv(path)
        assert kv['tokenizer.ggml.model'] == b'llama'
        self.tokens = kv['tokenizer.ggml.tokens']
        self.scores = kv.get('tokenizer.ggml.scores', [0.0] * len(self.tokens))
        self.types = kv.get('tokenizer.ggml.token_type', [1] * len(self.tokens))
        self.bos = kv.get('tokenizer.ggml.bos_token_id', 1)
        self.add_bos = kv.get('tokenizer.ggml.add_bos_token', True)
        self.add_prefix = kv.get('tokenizer.ggml.add_space_prefix', True)
        self.normal = {}
        self.byte = {}
        for i, (s, ty) in enumerate(zip(self.tokens, self.types)):
            if ty in (0, 1, 4):
                self.normal[s] = i
            elif ty == 6:
                self.byte[int(s[3:5], 16)] = i

    @staticmethod
    def _chars(b):
        out, i = [], 0
        while i < len(b):
            c = b[i]
            n = 1 if c < 0xC0 else 2 if c < 0xE0 else 3 if c < 0xF0 else 4
            out.append(b[i:i + n])
            i += n
        return out

    def encode(self, text, add_bos=True):
        ids = [self.bos] if add_bos and self.add_bos else []
        if not text:
            return ids
        b = text.encode('utf-8') if isinstance(text, str) else text
        if self.add_prefix:
            b = b' ' + b
        syms = self._chars(b.replace(b' ', '\u2581'.encode()))
        while True:
            best = None
            for i in range(len(syms) - 1):
                tid = self.normal.get(syms[i] + syms[i + 1])
                if tid is not None and (best is None or self.scores[tid] > best[0]):
                    best = (self.scores[tid], i)
            if best is None:
                break
            i = best[1]
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        for s in syms:
            if s in self.normal:
                ids.append(self.normal[s])
            else:
                ids.extend(self.byte[c] for c in s)
        return ids
