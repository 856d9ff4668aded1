# Minimal numpy-only GGUF (v2/v3) reader for the forward-pass tests: metadata + dequantized tensors.
# Independent of the C engine on purpose; it is the reference side of the comparison.
#
# Contracts relied on (from the shared contracts):
#   GGUF: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv; kv = string key, u32 type, value;
#   tensor info = string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset (relative to the
#   data section, which starts at the next multiple of general.alignment, default 32).
#   Tensor types used by specd: F32 (0), F16 (1), Q8_0 (8), BF16 (30).
#   Q8_0 block: 32 weights = f16 scale d + 32 int8 q; w = d*q.
#   BF16: top 16 bits of an f32.
#   Q4_0 (2), 18 bytes / 32: f16 d, 16 bytes; byte l = weight l (low nibble), l+16 (high); w = d*(q-8).
#   Q4_K (12), 144 bytes / 256: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins for 8 sub-blocks of 32,
#   128 bytes of nibbles (4 groups of 32 bytes: sub-block 2g low nibbles, 2g+1 high); w = d*sc*q - dmin*m.
#   Q5_K (13), 176 bytes / 256: as Q4_K with qh[32] after the scales; bit j of qh[l] is bit 4 of weight l
#   of sub-block j.
#   Q6_K (14), 210 bytes / 256: ql[128], qh[64], int8 scales[16] (one per 16 weights), f16 d;
#   w = d*scale*(q-32); see _dequant_q6_k for the bit placement.
#   ggml order: ne[0] is the contiguous dimension, so a tensor with ne=[K, N] is a numpy array [N, K].

import mmap
import struct

import numpy as np

GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
GGML_I32 = 26
GGML_Q4_0, GGML_Q4_K, GGML_Q5_K, GGML_Q6_K = 2, 12, 13, 14
TYPE_NAMES = {GGML_F32: "f32", GGML_F16: "f16", GGML_Q8_0: "q8_0", GGML_BF16: "bf16",
              GGML_Q4_0: "q4_0", GGML_Q4_K: "q4_k", GGML_Q5_K: "q5_k", GGML_Q6_K: "q6_k"}
# block (weights, bytes) of the block-quantized types
BLOCKS = {GGML_Q8_0: (32, 34), GGML_Q4_0: (32, 18), GGML_Q4_K: (256, 144), GGML_Q5_K: (256, 176),
          GGML_Q6_K: (256, 210)}


def _f16(col):
    """[nb, 2] uint8 -> [nb, 1] float64."""
    return col.copy().view("<f2").astype(np.float64)


def _kq_scales(sc):
    """[nb, 12] packed bytes -> (scale, min), each [nb, 8] of 6-bit ints.
    Sub-blocks 0-3: low 6 bits of bytes 0-3 (scale) and 4-7 (min). Sub-blocks 4-7: low 4 bits from bytes
    8-11 (scale: low nibble, min: high nibble), top 2 bits from the top of bytes 0-3 (scale) / 4-7 (min)."""
    sc = sc.astype(np.int64)
    s = np.zeros((sc.shape[0], 8), dtype=np.int64)
    m = np.zeros_like(s)
    s[:, :4] = sc[:, 0:4] & 63
    m[:, :4] = sc[:, 4:8] & 63
    s[:, 4:] = (sc[:, 8:12] & 15) | ((sc[:, 0:4] >> 6) << 4)
    m[:, 4:] = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return s, m


def _kq_nibbles(qs):
    """[nb, 128] -> [nb, 8, 32]: sub-block j = group j//2, low nibble if j even else high."""
    g = qs.reshape(-1, 4, 32).astype(np.int64)
    return np.stack([g & 15, g >> 4], axis=2).reshape(-1, 8, 32)


def _dequant_q6_k(blocks):
    ql = blocks[:, 0:128].astype(np.int64).reshape(-1, 2, 64)   # [nb, half, 64]
    qh = blocks[:, 128:192].astype(np.int64).reshape(-1, 2, 32)  # [nb, half, 32]
    sc = blocks[:, 192:208].copy().view(np.int8).astype(np.float64).reshape(-1, 16)
    d = _f16(blocks[:, 208:210])
    q = np.zeros((blocks.shape[0], 2, 4, 32), dtype=np.int64)  # [nb, half, sub-block s, l]
    for s_ in range(4):
        lo = (ql[:, :, 32 * (s_ & 1):32 * (s_ & 1) + 32] >> (4 * (s_ >> 1))) & 15
        hi = (qh >> (2 * s_)) & 3
        q[:, :, s_, :] = lo | (hi << 4)
    w = (q.reshape(-1, 256) - 32).astype(np.float64)
    return (d * np.repeat(sc, 16, axis=1) * w).reshape(-1)

# GGUF metadata value types
_SCALARS = {
    0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4",
    6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8", 12: "<f8",
}
_T_STRING, _T_ARRAY, _T_BOOL = 8, 9, 7


def _size(f):
    f.seek(0, 2)
    n = f.tell()
    f.seek(0)
    return n


class GGUFError(Exception):
    pass


class Tensor:
    """One tensor: name, ne (ggml order), ggml type, absolute byte offset in the file."""

    def __init__(self, name, ne, ggml_type, offset):
        self.name = name
        self.ne = list(ne)
        self.type = ggml_type
        self.offset = offset

    @property
    def type_name(self):
        return TYPE_NAMES.get(self.type, "type%d" % self.type)

    def n_elements(self):
        n = 1
        for d in self.ne:
            n *= d
        return n

    def n_bytes(self):
        n = self.n_elements()
        if self.type == GGML_F32:
            return 4 * n
        if self.type in (GGML_F16, GGML_BF16):
            return 2 * n
        if self.type == GGML_I32:
            return 4 * n
        if self.type in BLOCKS:
            bw, bb = BLOCKS[self.type]
            if self.ne[0] % bw:
                raise GGUFError("%s: %s row length %d not a multiple of %d" %
                                (self.name, TYPE_NAMES[self.type].upper(), self.ne[0], bw))
            return n // bw * bb
        raise GGUFError("%s: unsupported tensor type %d" % (self.name, self.type))


class GGUFFile:
    """Parsed GGUF file. `kv` maps key -> python value (arrays become lists or numpy arrays)."""

    def __init__(self, path):
        # mmap, so that a large (widened) model costs nothing until a tensor is asked for
        with open(path, "rb") as f:
            self.buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if _size(f) else b""
        self.pos = 0
        magic = self.buf[:4]
        if magic != b"GGUF":
            raise GGUFError("bad magic %r" % magic)
        self.pos = 4
        self.version = self._u32()
        if self.version not in (2, 3):
            raise GGUFError("unsupported GGUF version %d" % self.version)
        n_tensors = self._u64()
        n_kv = self._u64()
        self.kv = {}
        self.kv_types = {}
        for _ in range(n_kv):
            key = self._str()
            t = self._u32()
            self.kv_types[key] = t
            self.kv[key] = self._value(t)
        self.kv_end = self.pos
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            n_dims = self._u32()
            ne = [self._u64() for _ in range(n_dims)]
            t = self._u32()
            off = self._u64()
            infos.append((name, ne, t, off))
        self.infos_end = self.pos
        self.n_kv = n_kv
        self.alignment = align = int(self.kv.get("general.alignment", 32))
        data_start = (self.pos + align - 1) // align * align
        self.data_start = data_start
        self.tensors = {}
        self.tensor_order = []
        for name, ne, t, off in infos:
            tt = Tensor(name, ne, t, data_start + off)
            if tt.offset + tt.n_bytes() > len(self.buf):
                raise GGUFError("tensor %s extends past end of file" % name)
            self.tensors[name] = tt
            self.tensor_order.append(name)

    # --- primitive readers ---
    def _take(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError("truncated file at offset %d" % self.pos)
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def _u32(self):
        return struct.unpack("<I", self._take(4))[0]

    def _u64(self):
        return struct.unpack("<Q", self._take(8))[0]

    def _str(self):
        n = self._u64()
        return self._take(n).decode("utf-8", errors="surrogateescape")

    def _value(self, t):
        if t in _SCALARS:
            dt = np.dtype(_SCALARS[t])
            v = np.frombuffer(self._take(dt.itemsize), dtype=dt)[0].item()
            return bool(v) if t == _T_BOOL else v
        if t == _T_STRING:
            return self._str()
        if t == _T_ARRAY:
            et = self._u32()
            n = self._u64()
            if et == _T_STRING:
                return [self._str() for _ in range(n)]
            if et in _SCALARS:
                dt = np.dtype(_SCALARS[et])
                arr = np.frombuffer(self._take(dt.itemsize * n), dtype=dt).copy()
                return arr.astype(bool) if et == _T_BOOL else arr
            if et == _T_ARRAY:
                return [self._value(_T_ARRAY) for _ in range(n)]
            raise GGUFError("unknown array element type %d" % et)
        raise GGUFError("unknown metadata value type %d" % t)

    # --- tensor access ---
    def raw(self, name):
        t = self.tensors[name]
        return self.buf[t.offset:t.offset + t.n_bytes()]

    def tensor(self, name):
        """Dequantized tensor as float64 numpy array, shape reversed from ne (row-major [.., ne1, ne0])."""
        t = self.tensors[name]
        b = self.raw(name)
        shape = tuple(reversed(t.ne))
        if t.type == GGML_F32:
            a = np.frombuffer(b, dtype="<f4").astype(np.float64)
        elif t.type == GGML_F16:
            a = np.frombuffer(b, dtype="<f2").astype(np.float64)
        elif t.type == GGML_BF16:
            u = np.frombuffer(b, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32).astype(np.float64)
        elif t.type == GGML_I32:
            a = np.frombuffer(b, dtype="<i4").astype(np.float64)
        elif t.type == GGML_Q8_0:
            blocks = np.frombuffer(b, dtype=np.uint8).reshape(-1, 34)
            d = blocks[:, :2].copy().view("<f2").astype(np.float64)  # [nb, 1]
            q = blocks[:, 2:].copy().view(np.int8).astype(np.float64)  # [nb, 32]
            a = (d * q).reshape(-1)
        elif t.type == GGML_Q4_0:
            blocks = np.frombuffer(b, dtype=np.uint8).reshape(-1, 18)
            d = _f16(blocks[:, :2])
            qs = blocks[:, 2:].astype(np.int64)
            q = np.concatenate([qs & 15, qs >> 4], axis=1)  # [nb, 32]
            a = (d * (q - 8)).reshape(-1)
        elif t.type in (GGML_Q4_K, GGML_Q5_K):
            bb = BLOCKS[t.type][1]
            blocks = np.frombuffer(b, dtype=np.uint8).reshape(-1, bb)
            d, dmin = _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])
            sc, mn = _kq_scales(blocks[:, 4:16])
            if t.type == GGML_Q4_K:
                q = _kq_nibbles(blocks[:, 16:144])
            else:
                qh = blocks[:, 16:48].astype(np.int64)  # [nb, 32]
                q = _kq_nibbles(blocks[:, 48:176])
                q = q | (((qh[:, None, :] >> np.arange(8)[None, :, None]) & 1) << 4)
            a = (d[:, :, None] * sc[:, :, None] * q - dmin[:, :, None] * mn[:, :, None]).reshape(-1)
        elif t.type == GGML_Q6_K:
            a = _dequant_q6_k(np.frombuffer(b, dtype=np.uint8).reshape(-1, 210))
        else:
            raise GGUFError("%s: unsupported tensor type %d" % (name, t.type))
        return a.reshape(shape)

    def get(self, key, default=None):
        return self.kv.get(key, default)


def read(path):
    return GGUFFile(path)


# --- reference quantizers (used by the tests to check mkmodel's output) ---

def f32_to_bf16_bits(x):
    """Round-to-nearest-even f32 -> bf16 bit pattern (uint16)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return r.astype(np.uint16)


def quantize_q8_0(w, divide=False):
    """Quantize a float32 array (last dim multiple of 32) the ggml way; returns (d_f16, q_int8).
    q = roundf(w * (1/d)) with the f32 d, or roundf(w / d) with divide=True."""
    w = np.asarray(w, dtype=np.float32).reshape(-1, 32)
    amax = np.max(np.abs(w), axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        if divide:
            v = np.where(d[:, None] != 0, w / d[:, None], np.float32(0)).astype(np.float32)
        else:
            idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
            v = (w * idv[:, None]).astype(np.float32)
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # roundf: half away from zero
    return d.astype(np.float16), q


# --- metadata editing (tests build variants of real models, e.g. with rope scaling keys) ---

def _enc_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def encode_kv(key, value):
    """One metadata entry: str -> string, float -> f32, bool -> bool, int -> u32 (i32 if negative)."""
    if isinstance(value, str):
        v = struct.pack("<I", _T_STRING) + _enc_str(value)
    elif isinstance(value, bool):
        v = struct.pack("<IB", _T_BOOL, int(value))
    elif isinstance(value, float):
        v = struct.pack("<If", 6, value)
    elif isinstance(value, int):
        v = struct.pack("<II", 4, value) if value >= 0 else struct.pack("<Ii", 5, value)
    else:
        raise TypeError("unsupported metadata value %r" % (value,))
    return _enc_str(key) + v


def copy_with_kv(src, dst, items):
    """Copy GGUF src to dst with the metadata entries in dict `items` appended (keys must be new);
    tensor infos and data are kept byte for byte (data realigned)."""
    g = GGUFFile(src)
    for k in items:
        if k in g.kv:
            raise GGUFError("key %s already present" % k)
    head = bytearray(g.buf[:g.kv_end])
    struct.pack_into("<Q", head, 16, g.n_kv + len(items))
    for k, v in items.items():
        head += encode_kv(k, v)
    head += g.buf[g.kv_end:g.infos_end]
    head += b"\0" * ((-len(head)) % g.alignment)
    with open(dst, "wb") as f:
        f.write(head)
        f.write(g.buf[g.data_start:])
