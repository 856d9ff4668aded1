# RoPE scaling given only by metadata: copies of stories260K with llama.rope.scaling.* keys added
# (linear: positions divided by the factor; llama3 without a rope_freqs.weight tensor: factors
# computed as Llama 3.1 does) must give `specd eval` logits within 1e-4 relative of the reference.
# Each case first checks that the scaling changes the reference logits, so the test can fail.
#
# Contract: optional llama.rope.scaling.type ("linear"|"llama3"), llama.rope.scaling.factor,
# llama.rope.scaling.low_freq_factor / high_freq_factor / original_context_length.

import os
import tempfile

import numpy as np

import fwdutil
import gguf_reader
from ref_llama import LlamaRef

TOL = 1e-4
CASES = [
    ("linear-x4", {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}),
    # original context 128: with head dim 8 the pairs fall in all three llama3 regions (1, smooth, 8)
    ("llama3-meta", {"llama.rope.scaling.type": "llama3", "llama.rope.scaling.factor": 8.0,
                     "llama.rope.scaling.low_freq_factor": 1.0, "llama.rope.scaling.high_freq_factor": 4.0,
                     "llama.rope.scaling.original_context_length": 128}),
]


def main():
    ck = fwdutil.Checker("test_rope_scaling")
    src = fwdutil.model_path("stories260K.gguf")
    plain = LlamaRef(src)
    tokens = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401,
              396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295]
    r_plain = plain.logits(tokens)
    with tempfile.TemporaryDirectory() as tmp:
        for name, kv in CASES:
            path = os.path.join(tmp, name + ".gguf")
            gguf_reader.copy_with_kv(src, path, kv)
            m = LlamaRef(path)
            r = m.logits(tokens)
            sens = float(np.max(fwdutil.rel_err_rows(r_plain, r)))
            ck.check(sens > 10 * TOL, "%s: scaling changes the reference logits by %.3e" % (name, sens))
            c = fwdutil.eval_logits(path, tokens, m.n_vocab, tmp, tag=name)
            ck.compare("%s (%d tokens)" % (name, len(tokens)), c, r, TOL)
    ck.done()


if __name__ == "__main__":
    main()
