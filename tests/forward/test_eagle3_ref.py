#!/usr/bin/env python3
# The C forward of EAGLE-3 draft heads (engine/model/model.c, arch eagle3) against the float64
# reference ref_eagle3.py, on heads written by `specd mkmodel --arch eagle3`: fused target
# features (fc over three layers) in one call, then the head's own features in a second call on
# the same cache; logits and the final residual (the next own feature) of every row. A reference
# that drops a norm or reads the features unfused must NOT match (the comparison has the power
# to see those mistakes), and eagle3_dump checks that a call's rows do not change when batched.
#   test_eagle3_ref.py EAGLE3_DUMP
import os
import sys
import tempfile

import numpy as np

import fwdutil
from ref_eagle3 import Eagle3Ref

T1, T2 = 11, 6
CASES = [  # type, dim, heads, kv heads, ff, vocab, tolerance on logits
    ("f32", 64, 8, 4, 172, 512, 1e-4),
    ("f16", 64, 8, 4, 172, 512, 1e-4),
    ("q8_0", 64, 4, 2, 128, 512, 2e-2),
]


def main():
    dump = sys.argv[1]
    ck = fwdutil.Checker("fwd_eagle3")
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        for ty, D, H, KV, FF, V, tol in CASES:
            head = os.path.join(tmp, "head-%s.gguf" % ty)
            fwdutil.mkmodel(head, arch="eagle3", dim=D, heads=H, kv_heads=KV, ff=FF, vocab=V, type=ty, seed=5)
            tok = rng.integers(0, V, T1 + T2).astype(np.int32)
            ft = (rng.standard_normal((T1, 3 * D)) * 2).astype(np.float32)
            fo = rng.standard_normal((T2, D)).astype(np.float32)
            cp, a = fwdutil.eagle3_dump(dump, head, tok, ft, fo, tmp)
            ck.check(cp.returncode == 0, "%s: eagle3_dump ran (batched rows equal): %s" % (ty, cp.stderr.strip()))
            if cp.returncode:
                continue
            lg, hid = a[:(T1 + T2) * V].reshape(-1, V), a[(T1 + T2) * V:].reshape(-1, D)

            def ref_run(**kw):
                return Eagle3Ref(head, **kw).run_two(tok, T1, ft, fo)

            rl, rh = ref_run()
            el, eh = fwdutil.rel_err_rows(lg, rl).max(), fwdutil.rel_err_rows(hid, rh).max()
            ck.check(el < tol and eh < tol, "%s: logits max rel err %.2e, final residual %.2e (< %g)" % (ty, el, eh, tol))
            for drop in ("blk.0.hidden_norm", "blk.0.attn_norm"):
                bl, _ = ref_run(drop=drop)
                bad = fwdutil.rel_err_rows(lg, bl).max()
                ck.check(bad > 10 * tol, "%s: a forward without %s differs visibly (%.2e)" % (ty, drop, bad))
            # the features unfused (the first D of the three layers as if own): must differ
            r = Eagle3Ref(head)
            ul, _ = r.forward(tok[:T1], ft[:, :D], False)
            bad = fwdutil.rel_err_rows(lg[:T1], ul).max()
            ck.check(bad > 10 * tol, "%s: fc matters (%.2e without it)" % (ty, bad))
    ck.done()


if __name__ == "__main__":
    main()
