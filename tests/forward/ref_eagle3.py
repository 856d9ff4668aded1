# Independent float64 numpy reference of an EAGLE-3 draft head (engine/model/model.h, "eagle3"),
# read from its GGUF with gguf_reader.py; shares only ref_llama's RoPE/attention conventions.
#
# The head, as EAGLE-3 defines it (one llama decoder layer beside the target):
#   f = fc [h_low ; h_mid ; h_high]          target features of a row (3D -> D, no bias), or
#   f = the head's own final residual          for rows it drafts from its own output;
#   e = token_embd[token];  a = [rmsnorm(e) * attn_norm ; rmsnorm(f) * hidden_norm]   (2D)
#   q, k, v = Wq a, Wk a, Wv a  (RoPE as llama's, adjacent pairs);  causal attention over its own cache;
#   x = f + Wo attn;  x += Wdown(silu(Wgate h) * (Wup h)), h = rmsnorm(x) * ffn_norm;
#   logits = Woutput(rmsnorm(x) * output_norm);  x is the row's final residual (the next own feature).
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_reader  # noqa: E402
from ref_llama import Q8_ACT_TYPES, LlamaRef, _act_q8  # noqa: E402


class Eagle3Ref(LlamaRef):
    """Uses LlamaRef's RMSNorm and (adjacent-pair) RoPE; its own weights and layer."""

    neox = False
    pos_scale = 1.0

    @classmethod
    def from_weights(cls, w, dim, n_head, n_kv, eps=1e-5, base=10000.0):
        """A head from float arrays named as in the GGUF (without ".weight"; norms 1-D), e.g. read from a
        published checkpoint by the test that converts it: the reference then never sees specd's file."""
        r = cls.__new__(cls)
        r.dim, r.n_head, r.n_kv = dim, n_head, n_kv
        r.hd = dim // n_head
        r.n_rot, r.eps, r.base = r.hd, eps, base
        r.w = {k: np.asarray(v, np.float64) for k, v in w.items()}
        r.ty = {k: 0 for k in w}
        i = np.arange(r.n_rot // 2, dtype=np.float64)
        r.freqs = r.base ** (-2.0 * i / r.n_rot)
        r.reset()
        return r

    def __init__(self, path, drop=None):
        """drop: a weight name replaced by ones/zeros (tests: the variant a correct forward must not match)."""
        g = gguf_reader.read(path)
        if g.get("general.architecture") != "eagle3":
            raise ValueError("%s is not an eagle3 head" % path)
        p = "eagle3."
        self.dim = int(g.get(p + "embedding_length"))
        self.n_head = int(g.get(p + "attention.head_count"))
        self.n_kv = int(g.get(p + "attention.head_count_kv", self.n_head))
        self.hd = int(g.get(p + "attention.key_length", self.dim // self.n_head))
        self.n_rot = int(g.get(p + "rope.dimension_count", self.hd))
        self.eps = float(g.get(p + "attention.layer_norm_rms_epsilon", 1e-5))
        self.base = float(g.get(p + "rope.freq_base", 10000.0))
        t = g.tensor
        names = ["token_embd", "fc", "blk.0.attn_norm", "blk.0.hidden_norm", "blk.0.attn_q", "blk.0.attn_k",
                 "blk.0.attn_v", "blk.0.attn_output", "blk.0.ffn_norm", "blk.0.ffn_gate", "blk.0.ffn_up",
                 "blk.0.ffn_down", "output_norm", "output"]
        self.w = {n: t(n + ".weight") for n in names}
        self.ty = {n: g.tensors[n + ".weight"].type for n in names}
        for n in ("blk.0.attn_norm", "blk.0.hidden_norm", "blk.0.ffn_norm", "output_norm"):
            self.w[n] = self.w[n].reshape(-1)
        if drop:
            self.w[drop] = np.ones_like(self.w[drop])
        i = np.arange(self.n_rot // 2, dtype=np.float64)
        self.freqs = self.base ** (-2.0 * i / self.n_rot)
        self.reset()

    def reset(self):
        self.K = np.zeros((0, self.n_kv, self.hd))
        self.V = np.zeros((0, self.n_kv, self.hd))

    def _mm(self, x, name, parts=1):
        """x @ W^T; a matrix the kernels take in column parts rounds each part's activations on its own."""
        w, ty = self.w[name], self.ty[name]
        if ty not in Q8_ACT_TYPES:
            return x @ w.T
        k = x.shape[1] // parts
        return sum(_act_q8(x[:, j * k:(j + 1) * k]) @ w[:, j * k:(j + 1) * k].T for j in range(parts))

    def forward(self, tokens, feat, fused):
        """New rows after the cached ones: feat (T, 3D) target layers (fused) or (T, D) own features.
        Returns (logits (T, V), final residual (T, D))."""
        tokens = np.asarray(tokens, dtype=np.int64)
        T, D = len(tokens), self.dim
        f = self._mm(np.asarray(feat, np.float64), "fc", 3) if fused else np.asarray(feat, np.float64)
        e = self.w["token_embd"][tokens]
        a = np.concatenate([self._rmsnorm(e, self.w["blk.0.attn_norm"]), self._rmsnorm(f, self.w["blk.0.hidden_norm"])], axis=1)
        q, k, v = (self._mm(a, n, 2) for n in ("blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v"))
        past = self.K.shape[0]
        pos = np.arange(past, past + T, dtype=np.float64)
        q = self._rope(q.reshape(T, self.n_head, self.hd), pos)
        k = self._rope(k.reshape(T, self.n_kv, self.hd), pos)
        self.K = np.concatenate([self.K, k])
        self.V = np.concatenate([self.V, v.reshape(T, self.n_kv, self.hd)])
        S, group = self.K.shape[0], self.n_head // self.n_kv
        mask = np.arange(S)[None, :] > (past + np.arange(T))[:, None]
        out = np.empty((T, self.n_head, self.hd))
        for h in range(self.n_head):
            sc = (q[:, h, :] @ self.K[:, h // group, :].T) / math.sqrt(self.hd)
            sc = np.where(mask, -np.inf, sc)
            p = np.exp(sc - sc.max(axis=1, keepdims=True))
            out[:, h, :] = (p / p.sum(axis=1, keepdims=True)) @ self.V[:, h // group, :]
        x = f + self._mm(out.reshape(T, -1), "blk.0.attn_output")
        h = self._rmsnorm(x, self.w["blk.0.ffn_norm"])
        gt, up = self._mm(h, "blk.0.ffn_gate"), self._mm(h, "blk.0.ffn_up")
        x = x + self._mm(gt / (1.0 + np.exp(-gt)) * up, "blk.0.ffn_down")
        return self._mm(self._rmsnorm(x, self.w["output_norm"]), "output"), x

    def run_two(self, tok, t1, ft, fo):
        """From an empty cache: rows [0, t1) fused from the target's layers ft, the rest from own features fo,
        in two calls (the drafting order). Returns (logits, final residual), all rows stacked."""
        self.reset()
        l1, h1 = self.forward(tok[:t1], ft, True)
        l2, h2 = self.forward(tok[t1:], fo, False)
        return np.vstack([l1, l2]), np.vstack([h1, h2])
