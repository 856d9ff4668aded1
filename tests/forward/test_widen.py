# `specd mkmodel --widen` is function-preserving: the widened model's logits equal the source's
# within 1e-4 relative, and the file really has the larger shape (read back with gguf_reader.py).
# Variants: the benchmark target (dim 768, ff 2048, 12 layers, head dim 64: heads regrouped with
# RoPE pairs moved), more heads at the same head dim, and an intermediate head dim.
#
# Contract: specd mkmodel -o OUT --widen SRC [--dim --heads --kv-heads --head-dim --ff --layers ...]

import os
import tempfile

import numpy as np

import fwdutil
import gguf_reader
from ref_llama import LlamaRef

TOL = 1e-4
VARIANTS = [
    ("d768-ff2048-l12-hd64", dict(dim=768, ff=2048, layers=12, head_dim=64)),
    ("d128-h16-ff256-l7", dict(dim=128, heads=16, ff=256, layers=7)),
    ("d256-hd16-ff512-l6", dict(dim=256, head_dim=16, ff=512, layers=6)),
]


def main():
    ck = fwdutil.Checker("test_widen")
    src = fwdutil.model_path("stories260K.gguf")
    sref = LlamaRef(src)
    tokens = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 17, 480]
    r = sref.logits(tokens)
    with tempfile.TemporaryDirectory() as tmp:
        base = fwdutil.eval_logits(src, tokens, sref.n_vocab, tmp, tag="src")
        ck.compare("source eval vs reference", base, r, TOL)
        for name, opts in VARIANTS:
            out = os.path.join(tmp, name + ".gguf")
            fwdutil.mkmodel(out, widen=src, **opts)
            g = gguf_reader.read(out)
            p = "llama."
            dim = int(g.get(p + "embedding_length"))
            n_head = int(g.get(p + "attention.head_count"))
            n_kv = int(g.get(p + "attention.head_count_kv", n_head))
            hd = int(g.get(p + "attention.key_length", dim // n_head))
            ff = int(g.get(p + "feed_forward_length"))
            nl = int(g.get(p + "block_count"))
            want_hd = opts.get("head_dim", sref.hd)
            shape_ok = (dim == opts["dim"] and ff == opts["ff"] and nl == opts["layers"] and hd == want_hd
                        and ("heads" not in opts or n_head == opts["heads"]))
            ck.check(shape_ok, "%s: metadata dim %d ff %d layers %d heads %d/%d head_dim %d"
                     % (name, dim, ff, nl, n_head, n_kv, hd))
            tq = g.tensors.get("blk.%d.attn_q.weight" % (nl - 1))
            tk = g.tensors.get("blk.0.attn_k.weight")
            td = g.tensors.get("blk.0.ffn_down.weight")
            te = g.tensors.get("token_embd.weight")
            ck.check(tq is not None and tq.ne == [dim, n_head * hd] and tk.ne == [dim, n_kv * hd]
                     and td.ne == [ff, dim] and te.ne == [dim, sref.n_vocab],
                     "%s: tensor shapes match the metadata (attn_q %s, attn_k %s, ffn_down %s, token_embd %s)"
                     % (name, tq and tq.ne, tk and tk.ne, td and td.ne, te and te.ne))
            ck.check(g.get("tokenizer.ggml.tokens") == sref.g.get("tokenizer.ggml.tokens"),
                     "%s: tokenizer copied from the source" % name)
            w = fwdutil.eval_logits(out, tokens, sref.n_vocab, tmp, tag=name)
            ck.compare("%s: widened eval vs source eval" % name, w, base, TOL)
            ck.compare("%s: widened eval vs source reference" % name, w, r, TOL)
            ck.check(int(np.argmax(w[-1])) == int(np.argmax(r[-1])), "%s: same greedy pick at the last position" % name)
            del g
            os.remove(out)
    ck.done()


if __name__ == "__main__":
    main()
