# `specd mkmodel` writes what was asked: shape, metadata, tensor types (matrices retyped, norms F32),
# a synthetic byte-level vocabulary or a copied one, deterministic bytes per seed, and it says the
# weights are random. `--quantize` retypes matrices exactly as the contracts define the conversions.
#
# Contracts relied on (shared contracts): tensor names/ne as in ref_llama.py; Q8_0 quantize
# d = max|w|/127 (stored f16), q = roundf(w * (1/d)) with the f32 d; BF16 = RNE top 16 bits of f32;
# synthetic vocab: <unk>, <s>, </s>, <0x00>..<0xFF>, then merged pieces up to --vocab, with scores.

import os
import tempfile

import numpy as np

import fwdutil
import gguf_reader
from gguf_reader import GGML_F32

TYPE_ID = {"f32": 0, "f16": 1, "q8_0": 8, "bf16": 30}
SHAPE = dict(layers=2, dim=64, heads=4, kv_heads=2, ff=96, vocab=320, ctx=128)


def expected_tensors(dim, nl, n_head, n_kv, hd, ff, vocab, tied):
    t = {"token_embd.weight": [dim, vocab], "output_norm.weight": [dim]}
    if not tied:
        t["output.weight"] = [dim, vocab]
    for L in range(nl):
        b = "blk.%d." % L
        t.update({b + "attn_norm.weight": [dim], b + "attn_q.weight": [dim, n_head * hd],
                  b + "attn_k.weight": [dim, n_kv * hd], b + "attn_v.weight": [dim, n_kv * hd],
                  b + "attn_output.weight": [n_head * hd, dim], b + "ffn_norm.weight": [dim],
                  b + "ffn_gate.weight": [dim, ff], b + "ffn_up.weight": [dim, ff],
                  b + "ffn_down.weight": [ff, dim]})
    return t


def check_shape_and_types(ck, label, g, ty, tied=False, vocab=SHAPE["vocab"]):
    p = "llama."
    meta = dict(arch=g.get("general.architecture"), ctx=g.get(p + "context_length"),
                dim=g.get(p + "embedding_length"), layers=g.get(p + "block_count"),
                ff=g.get(p + "feed_forward_length"), heads=g.get(p + "attention.head_count"),
                kv=g.get(p + "attention.head_count_kv"))
    ck.check(meta == dict(arch="llama", ctx=SHAPE["ctx"], dim=SHAPE["dim"], layers=SHAPE["layers"],
                          ff=SHAPE["ff"], heads=SHAPE["heads"], kv=SHAPE["kv_heads"]),
             "%s: metadata %r" % (label, meta))
    hd = SHAPE["dim"] // SHAPE["heads"]
    want = expected_tensors(SHAPE["dim"], SHAPE["layers"], SHAPE["heads"], SHAPE["kv_heads"], hd,
                            SHAPE["ff"], vocab, tied)
    extra = set(g.tensors) - set(want) - {"rope_freqs.weight"}
    missing = set(want) - set(g.tensors)
    ck.check(not extra and not missing, "%s: tensor set (missing %s, unexpected %s)"
             % (label, sorted(missing), sorted(extra)))
    bad_shape = [n for n in want if n in g.tensors and g.tensors[n].ne != want[n]]
    ck.check(not bad_shape, "%s: tensor shapes as the contract says %s"
             % (label, ["%s %s" % (n, g.tensors[n].ne) for n in bad_shape]))
    bad_type = [n for n, t in g.tensors.items()
                if t.type != (TYPE_ID[ty] if len(t.ne) == 2 else GGML_F32)]
    ck.check(not bad_type, "%s: matrices %s, 1-D tensors f32 %s"
             % (label, ty, ["%s %s" % (n, g.tensors[n].type_name) for n in bad_type]))


def main():
    ck = fwdutil.Checker("test_mkmodel")
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for ty in TYPE_ID:
            path = os.path.join(tmp, "m-%s.gguf" % ty)
            cp = fwdutil.mkmodel(path, type=ty, seed=1, name="mk-%s" % ty, **SHAPE)
            ck.check("random" in (cp.stdout + cp.stderr).lower(),
                     "%s: output says the weights are random: %r" % (ty, (cp.stdout + cp.stderr).strip()[:200]))
            g = gguf_reader.read(path)
            check_shape_and_types(ck, ty, g, ty)
            ck.check(g.get("general.name") == "mk-%s" % ty, "%s: general.name %r" % (ty, g.get("general.name")))
            emb = g.tensor("token_embd.weight")
            ck.check(bool(np.all(np.isfinite(emb)) and np.std(emb) > 0), "%s: token_embd finite and not constant" % ty)
            paths[ty] = path

        # synthetic byte-level vocabulary
        g = gguf_reader.read(paths["f32"])
        toks = g.get("tokenizer.ggml.tokens") or []
        scores = g.get("tokenizer.ggml.scores")
        bytes_ok = len(toks) >= 259 and all(toks[3 + b] == "<0x%02X>" % b for b in range(256))
        ck.check(g.get("tokenizer.ggml.model") == "llama" and len(toks) == SHAPE["vocab"]
                 and toks[:3] == ["<unk>", "<s>", "</s>"] and bytes_ok,
                 "synthetic vocab: model %r, %d tokens, first %r, byte tokens %s"
                 % (g.get("tokenizer.ggml.model"), len(toks), toks[:3], "ok" if bytes_ok else "wrong"))
        ck.check(len(set(toks)) == len(toks), "synthetic vocab: pieces are unique")
        ck.check(scores is not None and len(scores) == len(toks), "synthetic vocab: one score per token")

        # determinism per seed
        again = os.path.join(tmp, "again.gguf")
        fwdutil.mkmodel(again, type="f32", seed=1, name="mk-f32", **SHAPE)
        with open(paths["f32"], "rb") as a, open(again, "rb") as b:
            ck.check(a.read() == b.read(), "same --seed gives identical file bytes")
        other = os.path.join(tmp, "other.gguf")
        fwdutil.mkmodel(other, type="f32", seed=2, name="mk-f32", **SHAPE)
        go = gguf_reader.read(other)
        for n in ("token_embd.weight", "blk.1.ffn_down.weight"):
            ck.check(not np.array_equal(g.tensor(n), go.tensor(n)), "different --seed gives different %s" % n)

        # --quantize: retype every matrix, norms stay F32, values converted exactly
        for ty in ("f16", "bf16", "q8_0"):
            out = os.path.join(tmp, "q-%s.gguf" % ty)
            fwdutil.run(["mkmodel", "-o", out, "--quantize", ty, paths["f32"]])
            gq = gguf_reader.read(out)
            check_shape_and_types(ck, "--quantize %s" % ty, gq, ty)
            ck.check(gq.get("tokenizer.ggml.tokens") == toks, "--quantize %s: tokenizer kept" % ty)
            mism = []
            for n, t in g.tensors.items():
                src = np.frombuffer(g.raw(n), dtype="<f4")
                raw = gq.raw(n)
                if len(t.ne) != 2:
                    same = raw == g.raw(n)
                elif ty == "f16":
                    same = np.array_equal(np.frombuffer(raw, dtype="<u2"), src.astype(np.float16).view(np.uint16))
                elif ty == "bf16":
                    same = np.array_equal(np.frombuffer(raw, dtype="<u2"), gguf_reader.f32_to_bf16_bits(src))
                else:
                    # q = roundf(w * (1/d)) as ggml does; roundf(w / d) differs only at near-ties and is
                    # also accepted, since the contract states both forms.
                    d, q = gguf_reader.quantize_q8_0(src)
                    _, q_div = gguf_reader.quantize_q8_0(src, divide=True)
                    blk = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 34)
                    gd = blk[:, :2].copy().view("<u2").reshape(-1)
                    gqv = blk[:, 2:].copy().view(np.int8)
                    nd = int(np.sum(gd != d.view(np.uint16)))
                    nq = int(np.sum((gqv != q) & (gqv != q_div)))
                    same = nd == 0 and nq == 0
                    if not same:
                        n = "%s (%d/%d scales, %d/%d quants differ, max |dq| %d)" % (
                            n, nd, d.size, nq, q.size, int(np.max(np.abs(gqv.astype(int) - q.astype(int)))))
                if not same:
                    mism.append(n)
            ck.check(not mism, "--quantize %s: values equal the contract's conversion of the f32 source %s"
                     % (ty, mism[:4]))

        # tied head and copied tokenizer
        tied = os.path.join(tmp, "tied.gguf")
        fwdutil.mkmodel(tied, type="f16", seed=1, tied=True, **SHAPE)
        check_shape_and_types(ck, "--tied", gguf_reader.read(tied), "f16", tied=True)
        stories = fwdutil.model_path("stories260K.gguf")
        withtok = os.path.join(tmp, "withtok.gguf")
        opts = dict(SHAPE)
        del opts["vocab"]
        fwdutil.mkmodel(withtok, type="f32", seed=1, tokenizer=stories, **opts)
        gs, gw = gguf_reader.read(stories), gguf_reader.read(withtok)
        check_shape_and_types(ck, "--tokenizer", gw, "f32", vocab=512)
        tk = [k for k in gs.kv if k.startswith("tokenizer.")]
        diff = [k for k in tk if not _eq(gs.get(k), gw.get(k))]
        ck.check(not diff, "--tokenizer: every tokenizer.* key copied (%d keys, differing: %s)" % (len(tk), diff))
    ck.done()


def _eq(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is not None and b is not None and np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


if __name__ == "__main__":
    main()
