# Forward pass vs the independent float64 reference: `specd eval` logits must match ref_llama.py
# within 1e-4 relative (max|c - r| / max|r| per position row) for a real model and random models
# of several shapes and every weight type (the reference dequantizes the very same stored weights),
# and qwen2 / qwen3 (per-head q/k norms) / mistral (sliding window) random models.
#
# Contracts: see fwdutil.py (CLI) and ref_llama.py (model conventions).

import os
import tempfile

import numpy as np

import fwdutil
import gguf_reader
from ref_llama import LlamaRef

TOL = 1e-4
TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0"]
# K-quant rows are whole 256-weight super-blocks: they get their own shape (all of D, FF, H*hd = 256k)
KQ_TYPES = ["q4_k", "q5_k", "q6_k"]
KQ_SHAPE = dict(dim=256, layers=2, heads=4, kv_heads=2, ff=512, ctx=128)
# measured max row-relative logit error of each quantized model vs the F32 model it was quantized from
# (seed 7, 20 random tokens; random models amplify weight noise): q8_0 0.031, q4_0 0.57, q4_k 0.49,
# q5_k 0.31, q6_k 0.12. Bounds are the measurements with ~1.5x headroom.
VS_F32_MAX = {"q8_0": 0.05, "q4_0": 0.85, "q4_k": 0.75, "q5_k": 0.45, "q6_k": 0.18}
SHAPES = [
    # name, mkmodel options
    ("d64-l2-h4-kv4", dict(dim=64, layers=2, heads=4, kv_heads=4, ff=160, ctx=128)),
    ("d128-l3-h8-kv2-ff344-v300", dict(dim=128, layers=3, heads=8, kv_heads=2, ff=344, vocab=300, ctx=128)),
    ("d128-l2-h4-kv1-hd32", dict(dim=128, layers=2, heads=4, kv_heads=1, head_dim=32, ff=256, ctx=128)),
    ("d96-l2-h4-kv2-hd32", dict(dim=96, layers=2, heads=4, kv_heads=2, head_dim=32, ff=192, ctx=128)),
]


def check_model(ck, path, label, tokens, tmp, threads=None, ref=None):
    ref = ref or LlamaRef(path)
    r = ref.logits(tokens)
    c = fwdutil.eval_logits(path, tokens, ref.n_vocab, tmp, threads=threads, tag=label.replace("/", "_"))
    ck.compare_model("%s (%d tokens%s)" % (label, len(tokens), ", -t %d" % threads if threads else ""), c, r, TOL,
                     ref)
    return c, r


def main():
    ck = fwdutil.Checker("test_forward_ref")
    rng = np.random.default_rng(1234)
    with tempfile.TemporaryDirectory() as tmp:
        # real model: BOS + the start of its own greedy story, plus a few arbitrary tokens
        stories = fwdutil.model_path("stories260K.gguf")
        ref = LlamaRef(stories)
        toks = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 5, 77, 300, 511]
        c1, _ = check_model(ck, stories, "stories260K", toks, tmp, threads=1, ref=ref)
        c2, _ = check_model(ck, stories, "stories260K", toks, tmp, threads=2, ref=ref)
        e12 = float(np.max(fwdutil.rel_err_rows(c1, c2)))
        ck.check(e12 <= 1e-6, "stories260K -t 1 vs -t 2: %s (max rel diff %.3e)"
                 % ("identical" if e12 == 0 else "differ", e12))

        # random models, every shape x every weight type
        for sname, opts in SHAPES:
            for ty in TYPES:
                label = "%s/%s" % (sname, ty)
                path = os.path.join(tmp, "%s-%s.gguf" % (sname, ty))
                try:
                    fwdutil.mkmodel(path, type=ty, seed=7, **opts)
                except RuntimeError as e:
                    # Q8_0 cannot store rows whose length is not a multiple of 32 (ff 344): a clear
                    # refusal is acceptable, a silent wrong model is not.
                    if ty in ("q8_0", "q4_0") and opts.get("ff", 0) % 32:
                        ck.check(ty in str(e).lower() or "32" in str(e),
                                 "%s: mkmodel refused (ff %% 32 != 0) with a message naming the cause"
                                 % label)
                        continue
                    raise
                m = LlamaRef(path)
                toks = rng.integers(0, m.n_vocab, size=20).tolist()
                if ty == "q8_0" and sname.startswith("d128-l2"):
                    c1, _ = check_model(ck, path, label, toks, tmp, threads=1, ref=m)
                    c2, _ = check_model(ck, path, label, toks, tmp, threads=2, ref=m)
                    e12 = float(np.max(fwdutil.rel_err_rows(c1, c2)))
                    ck.check(e12 <= 1e-6, "%s -t 1 vs -t 2: %s (max rel diff %.3e)"
                             % (label, "identical" if e12 == 0 else "differ", e12))
                else:
                    check_model(ck, path, label, toks, tmp, ref=m)

        # K-quants (and Q4_0/Q8_0 for the F32 comparison) on a 256-multiple shape: C vs the numpy
        # reference of the same stored bytes, and the quantized model's logits vs the F32 model's
        base = os.path.join(tmp, "kq-f32.gguf")
        fwdutil.mkmodel(base, type="f32", seed=7, **KQ_SHAPE)
        mf = LlamaRef(base)
        toks = rng.integers(0, mf.n_vocab, size=20).tolist()
        cf, _ = check_model(ck, base, "kq-shape/f32", toks, tmp, ref=mf)
        for ty in ["q8_0", "q4_0"] + KQ_TYPES:
            path = os.path.join(tmp, "kq-%s.gguf" % ty)
            fwdutil.mkmodel(path, type=ty, seed=7, **KQ_SHAPE)
            m = LlamaRef(path)
            ck.check(all(m.g.tensors[n].type == m.g.tensors["token_embd.weight"].type for n in m.g.tensors
                          if len(m.g.tensors[n].ne) == 2) and
                     gguf_reader.TYPE_NAMES[m.g.tensors["token_embd.weight"].type] == ty,
                     "kq-shape/%s: every matrix stored as %s" % (ty, ty))
            c, _ = check_model(ck, path, "kq-shape/%s" % ty, toks, tmp, ref=m)
            ev = float(np.max(fwdutil.rel_err_rows(c, cf)))
            ck.check(ev < VS_F32_MAX[ty], "kq-shape/%s vs the f32 model: max row-relative logit error %.4f "
                     "(bound %g)" % (ty, ev, VS_F32_MAX[ty]))

        # Llama-3 rope scaling (with a non-default base and eps): the scaling must visibly matter
        path = os.path.join(tmp, "rope-llama3.gguf")
        fwdutil.mkmodel(path, dim=128, layers=2, heads=4, kv_heads=2, head_dim=32, ff=256, ctx=256,
                        rope_scaling="llama3", rope_base=500000, eps=1e-6, seed=11)
        m = LlamaRef(path)
        ck.check("rope_freqs.weight" in m.g.tensors or m.g.get("llama.rope.scaling.type") == "llama3",
                 "rope-llama3: model carries llama3 scaling (rope_freqs.weight or llama.rope.scaling.type)")
        ck.check(abs(m.base - 500000) < 1e-3 and abs(m.eps - 1e-6) < 1e-12,
                 "rope-llama3: freq_base %g eps %g written" % (m.base, m.eps))
        toks = rng.integers(0, m.n_vocab, size=60).tolist()
        r = m.logits(toks)
        scaled = m.freqs.copy()
        m.freqs = m.base ** (-2.0 * np.arange(m.n_rot // 2) / m.n_rot)
        r_plain = m.logits(toks)
        m.freqs = scaled
        sens = float(np.max(fwdutil.rel_err_rows(r_plain, r)))
        ck.check(sens > 10 * TOL, "rope-llama3: unscaled rope would differ by %.3e (test is sensitive)" % sens)
        c = fwdutil.eval_logits(path, toks, m.n_vocab, tmp, tag="rope")
        ck.compare("rope-llama3 (60 tokens)", c, r, TOL)

        # architectures: qwen2 (QKV biases, NeoX RoPE, freq_base 1e6) and mistral (sliding window 8),
        # each with GQA, plus a quantized and a tied variant; each feature must visibly matter
        for label, opts in [
            ("qwen2-f32", dict(arch="qwen2", type="f32")),
            ("qwen2-q8_0-tied", dict(arch="qwen2", type="q8_0", tied=True)),
            ("qwen3-f32", dict(arch="qwen3", type="f32")),
            ("qwen3-q8_0-tied", dict(arch="qwen3", type="q8_0", tied=True)),
            ("qwen3-f16-hd64", dict(arch="qwen3", type="f16", head_dim=64)),
            ("mistral-f32", dict(arch="mistral", type="f32")),
            ("mistral-w5-q4_0", dict(arch="mistral", type="q4_0", sliding_window=5)),
        ]:
            path = os.path.join(tmp, "%s.gguf" % label)
            shape = dict(dim=128, layers=2, heads=4, kv_heads=2, head_dim=32, ff=256, ctx=128, seed=13)
            shape.update(opts)  # qwen3-f16-hd64: heads * head dim 256 != dim 128, as in real Qwen3
            fwdutil.mkmodel(path, **shape)
            m = LlamaRef(path)
            toks = rng.integers(0, m.n_vocab, size=24).tolist()
            r = m.logits(toks)
            if opts["arch"] == "qwen2":
                ck.check(m.arch == "qwen2" and m.neox and abs(m.base - 1e6) < 1 and m.layers[0]["bq"] is not None,
                         "%s: qwen2 metadata, NeoX rope, freq_base %g, biases present" % (label, m.base))
                m.neox = False
                sens = float(np.max(fwdutil.rel_err_rows(m.logits(toks), r)))
                m.neox = True
                ck.check(sens > 10 * TOL, "%s: adjacent-pair rope would differ by %.3e" % (label, sens))
                saved = [(w["bq"], w["bk"], w["bv"]) for w in m.layers]
                for w in m.layers:
                    w["bq"] = w["bk"] = w["bv"] = None
                sens = float(np.max(fwdutil.rel_err_rows(m.logits(toks), r)))
                for w, sv in zip(m.layers, saved):
                    w["bq"], w["bk"], w["bv"] = sv
                ck.check(sens > 10 * TOL, "%s: dropping the biases would differ by %.3e" % (label, sens))
            elif opts["arch"] == "qwen3":
                lw = m.layers[0]
                ck.check(m.arch == "qwen3" and m.neox and abs(m.base - 1e6) < 1 and lw["bq"] is None and
                         lw["q_norm"] is not None and lw["q_norm"].shape == (m.hd,) and
                         lw["k_norm"] is not None and lw["k_norm"].shape == (m.hd,),
                         "%s: qwen3 metadata, NeoX rope, freq_base %g, no biases, q/k norms of head dim %d"
                         % (label, m.base, m.hd))
                for key in ("q_norm", "k_norm"):
                    saved = [w[key] for w in m.layers]
                    for w in m.layers:
                        w[key] = None
                    sens = float(np.max(fwdutil.rel_err_rows(m.logits(toks), r)))
                    for w, sv in zip(m.layers, saved):
                        w[key] = sv
                    ck.check(sens > 10 * TOL, "%s: dropping %s would differ by %.3e" % (label, key, sens))
                # the same weight for every head, applied per head (not over the whole row)
                saved = [w["q_norm"] for w in m.layers]
                for w in m.layers:
                    w["q_norm"] = np.ones_like(w["q_norm"])
                sens = float(np.max(fwdutil.rel_err_rows(m.logits(toks), r)))
                for w, sv in zip(m.layers, saved):
                    w["q_norm"] = sv
                ck.check(sens > 10 * TOL, "%s: unit q_norm weights would differ by %.3e" % (label, sens))
            else:
                want = opts.get("sliding_window", 8)
                ck.check(m.window == want, "%s: sliding window %d in metadata (want %d)" % (label, m.window, want))
                m.window = 0
                sens = float(np.max(fwdutil.rel_err_rows(m.logits(toks), r)))
                m.window = want
                ck.check(sens > 10 * TOL, "%s: full attention would differ by %.3e" % (label, sens))
                r = m.logits(toks)
            c = fwdutil.eval_logits(path, toks, m.n_vocab, tmp, tag=label)
            ck.compare("%s (24 tokens)" % label, c, r, TOL)

        # tied output head (no output.weight)
        for ty in ("f32", "q8_0"):
            path = os.path.join(tmp, "tied-%s.gguf" % ty)
            fwdutil.mkmodel(path, dim=64, layers=2, heads=4, kv_heads=2, ff=128, ctx=64, tied=True,
                            type=ty, seed=5)
            m = LlamaRef(path)
            ck.check("output.weight" not in m.g.tensors, "tied-%s: no output.weight tensor" % ty)
            toks = rng.integers(0, m.n_vocab, size=20).tolist()
            check_model(ck, path, "tied-%s" % ty, toks, tmp, ref=m)
    ck.done()


if __name__ == "__main__":
    main()
