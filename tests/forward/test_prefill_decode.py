# Prefill-then-decode equals one long prefill: `specd eval --split N` (N tokens in one call, then one
# token per call) must give the same logits as a single prefill call, within 1e-5 relative, including
# sequences longer than one 16-token KV block so paging is exercised. The full prefill is also checked
# against the float64 reference (1e-4) so that "equal" cannot mean "equally wrong".
#
# Contracts: see fwdutil.py (eval --split semantics).

import os
import tempfile

import numpy as np

import fwdutil
from ref_llama import LlamaRef

TOL_SPLIT = 1e-5
TOL_REF = 1e-4


def run_model(ck, label, path, tokens, splits, tmp):
    m = LlamaRef(path)
    full = fwdutil.eval_logits(path, tokens, m.n_vocab, tmp, tag="full")
    ck.compare_model("%s: full prefill vs reference (%d tokens)" % (label, len(tokens)), full, m.logits(tokens),
                     TOL_REF, m)
    for n in splits:
        s = fwdutil.eval_logits(path, tokens, m.n_vocab, tmp, split=n, tag="split%d" % n)
        ck.compare("%s: --split %d vs full prefill" % (label, n), s, full, TOL_SPLIT)


def main():
    ck = fwdutil.Checker("test_prefill_decode")
    rng = np.random.default_rng(99)
    with tempfile.TemporaryDirectory() as tmp:
        stories = fwdutil.model_path("stories260K.gguf")
        story = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401,
                 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358,
                 394, 261, 370, 432]
        run_model(ck, "stories260K", stories, story, [1, 5, 15, 16, 17, 32, 39], tmp)
        long_seq = [1] + rng.integers(3, 512, size=69).tolist()
        run_model(ck, "stories260K-70", stories, long_seq, [1, 33], tmp)

        for ty in ("f16", "q8_0"):
            path = os.path.join(tmp, "gqa-%s.gguf" % ty)
            fwdutil.mkmodel(path, dim=128, layers=2, heads=8, kv_heads=2, ff=256, ctx=128, type=ty, seed=3)
            n_vocab = LlamaRef(path).n_vocab
            toks = rng.integers(0, n_vocab, size=40).tolist()
            run_model(ck, "gqa-%s" % ty, path, toks, [1, 16, 33], tmp)

        # qwen2 (biases, NeoX rope), qwen3 (per-head q/k norms) and mistral (sliding window 8: decode steps past the window and
        # across KV block boundaries must still equal the prefill)
        for arch in ("qwen2", "qwen3", "mistral"):
            path = os.path.join(tmp, "%s.gguf" % arch)
            fwdutil.mkmodel(path, arch=arch, dim=128, layers=2, heads=4, kv_heads=2, head_dim=32, ff=256, ctx=128,
                            seed=4)
            n_vocab = LlamaRef(path).n_vocab
            toks = rng.integers(0, n_vocab, size=36).tolist()
            run_model(ck, arch, path, toks, [1, 7, 9, 16, 17], tmp)
    ck.done()


if __name__ == "__main__":
    main()
