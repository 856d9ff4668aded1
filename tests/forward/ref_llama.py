# Independent float64 numpy reference of the llama forward pass, used to check specd's C engine.
# Not fast and not shared with the engine: it reads the GGUF itself (gguf_reader.py) and dequantizes.
#
# Contract relied on (shared contracts, "Llama model conventions"):
#   x = embd[token]; per layer: h = rmsnorm(x)*attn_norm, rmsnorm(x) = x / sqrt(mean(x^2) + eps);
#   q = Wq h, k = Wk h, v = Wv h; RoPE "normal" (ggml mode 0): ADJACENT pairs (x[2i], x[2i+1]),
#   i < n_rot/2, rotated by pos * base^(-2i/n_rot) (dims >= n_rot untouched); llama3 scaling divides
#   freq_i by rope_freqs.weight[i] (or factors computed from llama.rope.scaling.*); linear scaling
#   divides positions by the factor. Head h uses kv head h / (n_head/n_kv); scores q.k/sqrt(hd);
#   causal softmax incl. self; x += Wo concat(heads); h = rmsnorm(x)*ffn_norm;
#   x += Wdown(silu(Wgate h) * (Wup h)); logits = Woutput(rmsnorm(x)*output_norm),
#   Woutput = token_embd when output.weight is absent. A matrix with ne=[K, N] computes y[N] = W x[K].
#   Integer-dot weight types (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K; shared contracts, "CPU kernels"): the
#   activations a matrix multiplies are first rounded per 32 values as float32 math does it:
#   d = amax/127, q = nearest-even(x * (1/d)), x' = d*q (x' = 0 where amax = 0); see _act_q8.
# Architectures (metadata keys under "<arch>."):
#   qwen2: q/k/v += blk.L.attn_{q,k,v}.bias after the matmuls; RoPE "NeoX" (ggml mode 2): pairs
#          (x[i], x[i + n_rot/2]), same frequencies; default freq_base 10000 unless the metadata says.
#   qwen3: no biases; every head's q and k (hd values) is RMS-normed on its own and scaled by
#          blk.L.attn_q_norm.weight / attn_k_norm.weight (hd), after the projection and BEFORE RoPE
#          (llama.cpp's llm_build_qwen3); RoPE NeoX like qwen2.
#   mistral / llama with <arch>.attention.sliding_window = W: query at position P sees keys at
#          positions P-W+1 .. P only.
#
# Run directly: /usr/bin/python3 ref_llama.py MODEL.gguf [-n 60] [--tokens "1 2 3"]
# greedily generates from BOS and prints tokens and text (a self-check of this reference).

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_reader  # noqa: E402


Q8_ACT_TYPES = (8, 2, 12, 13, 14)  # Q8_0, Q4_0, Q4_K, Q5_K, Q6_K


def _act_q8(x):
    """Activations as the integer-dot kernels see them (float32 rounding, then exact)."""
    x32 = np.asarray(x, dtype=np.float32)
    b = x32.reshape(x32.shape[0], -1, 32)
    amax = np.abs(b).max(axis=2, keepdims=True)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    q = np.rint(np.clip(b * inv, -127, 127))
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(x32.shape)


def llama3_factors(n_rot, base, factor, low_freq_factor, high_freq_factor, orig_ctx):
    """Per-pair divisors of the rotation frequency, as Llama 3.1 computes its scaled frequencies."""
    low_wavelen = orig_ctx / low_freq_factor
    high_wavelen = orig_ctx / high_freq_factor
    out = np.ones(n_rot // 2)
    for i in range(n_rot // 2):
        freq = base ** (-2.0 * i / n_rot)
        wavelen = 2.0 * math.pi / freq
        if wavelen < high_wavelen:
            new = freq
        elif wavelen > low_wavelen:
            new = freq / factor
        else:
            smooth = (orig_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            new = (1.0 - smooth) * freq / factor + smooth * freq
        out[i] = freq / new
    return out


class LlamaRef:
    """A llama model loaded into float64 numpy arrays; single-sequence forward with a KV cache."""

    def __init__(self, path):
        g = gguf_reader.read(path)
        self.g = g
        arch = g.get("general.architecture")
        if arch not in ("llama", "mistral", "qwen2", "qwen3"):
            raise ValueError("%s: architecture %r is not llama, mistral, qwen2 or qwen3" % (path, arch))
        self.arch = arch
        p = arch + "."
        self.neox = arch in ("qwen2", "qwen3")
        self.window = 0 if self.neox else int(g.get(p + "attention.sliding_window", 0))
        self.dim = int(g.get(p + "embedding_length"))
        self.n_layers = int(g.get(p + "block_count"))
        self.ff = int(g.get(p + "feed_forward_length"))
        self.n_head = int(g.get(p + "attention.head_count"))
        self.n_kv = int(g.get(p + "attention.head_count_kv", self.n_head))
        self.hd = int(g.get(p + "attention.key_length", self.dim // self.n_head))
        self.n_rot = int(g.get(p + "rope.dimension_count", self.hd))
        self.eps = float(g.get(p + "attention.layer_norm_rms_epsilon", 1e-5))
        self.base = float(g.get(p + "rope.freq_base", 10000.0))
        self.ctx = int(g.get(p + "context_length", 2048))

        t = g.tensor
        self.embd = t("token_embd.weight")  # [vocab, dim]
        self.n_vocab = self.embd.shape[0]
        self.out_norm = t("output_norm.weight")
        self.output = t("output.weight") if "output.weight" in g.tensors else self.embd
        self.output_t = g.tensors["output.weight" if "output.weight" in g.tensors else "token_embd.weight"].type
        self.layers = []
        for L in range(self.n_layers):
            b = "blk.%d." % L
            self.layers.append(dict(
                attn_norm=t(b + "attn_norm.weight"),
                wq=t(b + "attn_q.weight"),  # [n_head*hd, dim]
                wk=t(b + "attn_k.weight"),  # [n_kv*hd, dim]
                wv=t(b + "attn_v.weight"),  # [n_kv*hd, dim]
                bq=t(b + "attn_q.bias").reshape(-1) if b + "attn_q.bias" in g.tensors else None,
                bk=t(b + "attn_k.bias").reshape(-1) if b + "attn_k.bias" in g.tensors else None,
                bv=t(b + "attn_v.bias").reshape(-1) if b + "attn_v.bias" in g.tensors else None,
                q_norm=t(b + "attn_q_norm.weight").reshape(-1) if b + "attn_q_norm.weight" in g.tensors else None,
                k_norm=t(b + "attn_k_norm.weight").reshape(-1) if b + "attn_k_norm.weight" in g.tensors else None,
                wo=t(b + "attn_output.weight"),  # [dim, n_head*hd]
                ffn_norm=t(b + "ffn_norm.weight"),
                wg=t(b + "ffn_gate.weight"),  # [ff, dim]
                wu=t(b + "ffn_up.weight"),  # [ff, dim]
                wd=t(b + "ffn_down.weight"),  # [dim, ff]
            ))
            for key, nm in (("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v"), ("wo", "attn_output"),
                            ("wg", "ffn_gate"), ("wu", "ffn_up"), ("wd", "ffn_down")):
                self.layers[-1][key + "_t"] = g.tensors[b + nm + ".weight"].type

        # True when some matrix goes through the integer-dot kernels (activation rounding)
        self.q8_act = self.output_t in Q8_ACT_TYPES or any(
            lw[k] in Q8_ACT_TYPES for lw in self.layers for k in lw if k.endswith("_t"))

        # rotation frequencies per pair, and position scale
        i = np.arange(self.n_rot // 2, dtype=np.float64)
        self.freqs = self.base ** (-2.0 * i / self.n_rot)
        self.pos_scale = 1.0
        stype = g.get(p + "rope.scaling.type")
        if "rope_freqs.weight" in g.tensors:
            self.freqs = self.freqs / t("rope_freqs.weight").reshape(-1)[: self.n_rot // 2]
        elif stype == "llama3":
            self.freqs = self.freqs / llama3_factors(
                self.n_rot, self.base,
                float(g.get(p + "rope.scaling.factor", 8.0)),
                float(g.get(p + "rope.scaling.low_freq_factor", 1.0)),
                float(g.get(p + "rope.scaling.high_freq_factor", 4.0)),
                float(g.get(p + "rope.scaling.original_context_length", 8192)))
        if stype == "linear":
            self.pos_scale = 1.0 / float(g.get(p + "rope.scaling.factor", 1.0))

        tokens = g.get("tokenizer.ggml.tokens")
        self.vocab = tokens if tokens is not None else None
        self.bos = int(g.get("tokenizer.ggml.bos_token_id", 1))
        self.eos = int(g.get("tokenizer.ggml.eos_token_id", 2))
        self.reset()

    @staticmethod
    def _mm(x, w, wtype):
        """x @ W^T, with the kernels' activation rounding when the weight's type has it."""
        if wtype in Q8_ACT_TYPES:
            x = _act_q8(x)
        return x @ w.T

    def reset(self):
        self.k_cache = [np.zeros((0, self.n_kv, self.hd)) for _ in range(self.n_layers)]
        self.v_cache = [np.zeros((0, self.n_kv, self.hd)) for _ in range(self.n_layers)]
        self.n_past = 0

    def _rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos):
        """x: [T, heads, hd]; rotate adjacent pairs of the first n_rot dims; pos: [T]."""
        ang = (pos[:, None] * self.pos_scale) * self.freqs[None, :]  # [T, n_rot/2]
        c = np.cos(ang)[:, None, :]
        s = np.sin(ang)[:, None, :]
        x = x.copy()
        if self.neox:
            half = self.n_rot // 2
            x0 = x[:, :, 0:half].copy()
            x1 = x[:, :, half:self.n_rot].copy()
            x[:, :, 0:half] = x0 * c - x1 * s
            x[:, :, half:self.n_rot] = x0 * s + x1 * c
            return x
        x0 = x[:, :, 0:self.n_rot:2].copy()
        x1 = x[:, :, 1:self.n_rot:2].copy()
        x[:, :, 0:self.n_rot:2] = x0 * c - x1 * s
        x[:, :, 1:self.n_rot:2] = x0 * s + x1 * c
        return x

    def forward(self, tokens):
        """Evaluate new tokens after the cached ones; returns logits [T, n_vocab] (float64)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        T = len(tokens)
        pos = np.arange(self.n_past, self.n_past + T, dtype=np.float64)
        x = self.embd[tokens]  # [T, dim]
        group = self.n_head // self.n_kv
        scale = 1.0 / math.sqrt(self.hd)
        for L, w in enumerate(self.layers):
            h = self._rmsnorm(x, w["attn_norm"])
            q, k, v = (self._mm(h, w[n], w[n + "_t"]) for n in ("wq", "wk", "wv"))
            if w["bq"] is not None:
                q = q + w["bq"]
            if w["bk"] is not None:
                k = k + w["bk"]
            if w["bv"] is not None:
                v = v + w["bv"]
            q = q.reshape(T, self.n_head, self.hd)
            k = k.reshape(T, self.n_kv, self.hd)
            v = v.reshape(T, self.n_kv, self.hd)
            if w["q_norm"] is not None:
                q = self._rmsnorm(q, w["q_norm"])  # per head: the last axis is one head's hd values
            if w["k_norm"] is not None:
                k = self._rmsnorm(k, w["k_norm"])
            q = self._rope(q, pos)
            k = self._rope(k, pos)
            K = np.concatenate([self.k_cache[L], k], axis=0)  # [S, n_kv, hd]
            V = np.concatenate([self.v_cache[L], v], axis=0)
            self.k_cache[L], self.v_cache[L] = K, V
            S = K.shape[0]
            out = np.empty((T, self.n_head, self.hd))
            # causal: query t (absolute n_past+t) sees keys 0..n_past+t
            qpos = (self.n_past + np.arange(T))[:, None]
            mask = np.arange(S)[None, :] > qpos  # [T, S]
            if self.window > 0:
                mask = mask | (np.arange(S)[None, :] <= qpos - self.window)
            for hh in range(self.n_head):
                kv = hh // group
                sc = (q[:, hh, :] @ K[:, kv, :].T) * scale  # [T, S]
                sc = np.where(mask, -np.inf, sc)
                sc = sc - sc.max(axis=1, keepdims=True)
                p = np.exp(sc)
                p /= p.sum(axis=1, keepdims=True)
                out[:, hh, :] = p @ V[:, kv, :]
            x = x + self._mm(out.reshape(T, -1), w["wo"], w["wo_t"])
            h = self._rmsnorm(x, w["ffn_norm"])
            g = self._mm(h, w["wg"], w["wg_t"])
            u = self._mm(h, w["wu"], w["wu_t"])
            x = x + self._mm((g / (1.0 + np.exp(-g))) * u, w["wd"], w["wd_t"])
        self.n_past += T
        return self._mm(self._rmsnorm(x, self.out_norm), self.output, self.output_t)

    def logits(self, tokens):
        """Logits for every position of `tokens` evaluated from an empty cache."""
        self.reset()
        return self.forward(tokens)

    def greedy(self, prompt, n):
        """Greedy generation of n tokens after prompt (list of ids, usually [bos]); returns new ids."""
        self.reset()
        lg = self.forward(prompt)[-1]
        out = []
        for _ in range(n):
            t = int(np.argmax(lg))
            out.append(t)
            if len(out) == n:
                break
            lg = self.forward([t])[-1]
        return out

    def decode(self, ids):
        """SentencePiece-style detokenization: '▁' -> ' ', <0xNN> -> byte; control tokens dropped."""
        if self.vocab is None:
            raise ValueError("model has no vocabulary")
        ttype = self.g.get("tokenizer.ggml.token_type")
        bs = bytearray()
        for i in ids:
            piece = self.vocab[i]
            if ttype is not None and int(ttype[i]) == 3:  # control
                continue
            if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
                bs.append(int(piece[3:5], 16))
            else:
                bs += piece.replace("\u2581", " ").encode("utf-8", errors="surrogateescape")
        return bs.decode("utf-8", errors="replace")


def main():
    ap = argparse.ArgumentParser(description="float64 numpy llama reference")
    ap.add_argument("model")
    ap.add_argument("-n", type=int, default=60, help="tokens to generate greedily from BOS")
    ap.add_argument("--tokens", help="space-separated ids: print logits summary instead")
    args = ap.parse_args()
    m = LlamaRef(args.model)
    print("dim %d layers %d heads %d/%d hd %d n_rot %d ff %d vocab %d eps %g base %g"
          % (m.dim, m.n_layers, m.n_head, m.n_kv, m.hd, m.n_rot, m.ff, m.n_vocab, m.eps, m.base))
    if args.tokens:
        ids = [int(s) for s in args.tokens.split()]
        lg = m.logits(ids)
        for t, row in enumerate(lg):
            print("pos %d argmax %d max %.6f" % (t, int(np.argmax(row)), float(row.max())))
        return
    ids = m.greedy([m.bos], args.n)
    print("tokens:", " ".join(map(str, ids)))
    print("text:", m.decode(ids))


if __name__ == "__main__":
    main()
