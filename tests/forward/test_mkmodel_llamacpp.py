# Every `specd mkmodel` variant writes a GGUF file llama.cpp would load: read back by the
# independent Python reader (gguf_reader.py, not the C engine), each file carries the metadata
# keys llama.cpp's llama/qwen2 loaders read, with the value types they insist on, a tensor set of
# the right names and shapes, and no key llama.cpp refuses or misreads.
#
# Facts about llama.cpp relied on (its loader and its converter, convert_hf_to_gguf.py):
#   * {arch}.context_length, embedding_length, block_count, feed_forward_length and
#     attention.head_count are required UINT32; attention.head_count_kv, rope.dimension_count,
#     attention.key_length / value_length, vocab_size are optional UINT32;
#     attention.layer_norm_rms_epsilon is a required FLOAT32, rope.freq_base an optional FLOAT32.
#     A key of another GGUF type is an error ("key ... has wrong type").
#   * {arch}.rope.scaling.type must be none, linear, yarn or longrope: anything else ("llama3")
#     aborts the load. Llama-3.x scaling is the rope_freqs.weight tensor alone (F32, n_rot/2
#     values), and {arch}.rope.scaling.factor, when present, is applied as LINEAR scaling, so a
#     file with rope_freqs.weight must not carry one.
#   * tokenizer.ggml.model is "llama" (scores FLOAT32[n_vocab]) or "gpt2" (merges STRING[]);
#     tokens STRING[n_vocab], token_type INT32[n_vocab]; special ids UINT32 below n_vocab
#     (UINT32_MAX is ignored with a warning).
#   * tensor offsets are multiples of general.alignment (default 32); output.weight may be
#     absent (tied to token_embd.weight); qwen2 has attn_{q,k,v}.bias; qwen3 (llama.cpp's
#     LLM_ARCH_QWEN3) has no biases and blk.N.attn_q_norm.weight / attn_k_norm.weight of
#     [head dim] (key_length) each, under qwen3.* keys.
import os
import tempfile

import fwdutil
import gguf_reader

T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
ROPE_TYPES = {"none", "linear", "yarn", "longrope"}
GGML_BLOCK = {0: 1, 1: 1, 30: 1, 8: 32, 2: 32, 12: 256, 13: 256, 14: 256}


def check_file(ck, label, path, want_arch="llama", want_rope_freqs=False):
    try:
        g = gguf_reader.read(path)
    except gguf_reader.GGUFError as e:
        ck.check(False, "%s: the Python reader refuses the file: %s" % (label, e))
        return
    ok = [True]

    def need(cond, msg):
        if not cond:
            ok[0] = False
            ck.check(False, "%s: %s" % (label, msg))

    def key(k, t, required=True):
        if k not in g.kv:
            need(not required, "missing %s" % k)
            return None
        need(g.kv_types[k] == t, "%s has GGUF type %d, llama.cpp wants %d" % (k, g.kv_types[k], t))
        return g.kv[k]

    need(g.version == 3, "GGUF version %d" % g.version)
    arch = key("general.architecture", T_STR)
    need(arch == want_arch, "general.architecture %r, expected %r" % (arch, want_arch))
    a = (arch or want_arch) + "."
    align = key("general.alignment", T_U32, required=False) or 32
    need(align & (align - 1) == 0, "general.alignment %d is not a power of two" % align)
    key("general.file_type", T_U32, required=False)
    key("general.name", T_STR, required=False)
    ctx = key(a + "context_length", T_U32)
    dim = key(a + "embedding_length", T_U32)
    nl = key(a + "block_count", T_U32)
    ff = key(a + "feed_forward_length", T_U32)
    nh = key(a + "attention.head_count", T_U32)
    nkv = key(a + "attention.head_count_kv", T_U32, required=False) or nh
    key(a + "attention.layer_norm_rms_epsilon", T_F32)
    key(a + "rope.freq_base", T_F32, required=False)
    kl = key(a + "attention.key_length", T_U32, required=False)
    vl = key(a + "attention.value_length", T_U32, required=False)
    n_rot = key(a + "rope.dimension_count", T_U32, required=False)
    if None in (ctx, dim, nl, ff, nh):
        return
    hd = kl or dim // nh
    need(vl in (None, hd), "value_length %r differs from key_length %d" % (vl, hd))
    need(kl is not None or dim % nh == 0, "head dim not given and dim %% heads != 0")
    n_rot = n_rot or hd

    st = g.get(a + "rope.scaling.type")
    if st is not None:
        key(a + "rope.scaling.type", T_STR)
        need(st in ROPE_TYPES, "rope.scaling.type %r: llama.cpp aborts on it (knows %s)"
             % (st, sorted(ROPE_TYPES)))
    rf = g.tensors.get("rope_freqs.weight")
    need((rf is not None) == want_rope_freqs, "rope_freqs.weight %s" % ("missing" if rf is None else
                                                                      "unexpected"))
    if rf is not None:
        need(rf.type == 0 and rf.ne[:1] == [n_rot // 2] and rf.n_elements() == n_rot // 2,
             "rope_freqs.weight must be F32 [%d], is type %d %r" % (n_rot // 2, rf.type, rf.ne))
        need(a + "rope.scaling.factor" not in g.kv,
             "rope.scaling.factor beside rope_freqs.weight: llama.cpp would scale linearly too")
        need(st in (None, "none"), "rope.scaling.type %r beside rope_freqs.weight" % st)

    model = key("tokenizer.ggml.model", T_STR)
    toks = key("tokenizer.ggml.tokens", T_ARR)
    nv = len(toks) if toks is not None else 0
    if model == "llama":
        sc = key("tokenizer.ggml.scores", T_ARR)
        need(sc is not None and len(sc) == nv and sc.dtype.kind == "f", "scores: FLOAT32[%d]" % nv)
    elif model == "gpt2":
        mg = key("tokenizer.ggml.merges", T_ARR)
        need(isinstance(mg, list) and len(mg) > 0, "gpt2 tokenizer without merges")
    else:
        need(False, "tokenizer.ggml.model %r" % model)
    tt = key("tokenizer.ggml.token_type", T_ARR, required=False)
    need(tt is None or (len(tt) == nv and tt.dtype.kind == "i"), "token_type: INT32[%d]" % nv)
    for sk in ("bos", "eos", "unknown", "padding"):
        v = key("tokenizer.ggml.%s_token_id" % sk, T_U32, required=False)
        # UINT32_MAX ("none", as stories260K's converter writes it) is warned about and
        # ignored by llama.cpp; any other id past the vocabulary is a broken file
        need(v is None or v < nv or v == 0xFFFFFFFF, "%s id %r >= n_vocab %d" % (sk, v, nv))
    vs = key(a + "vocab_size", T_U32, required=False)
    need(vs in (None, nv), "vocab_size %r != %d tokens" % (vs, nv))

    want = {"token_embd.weight": [dim, nv], "output_norm.weight": [dim]}
    opt = {"output.weight": [dim, nv]}
    if rf is not None:
        opt["rope_freqs.weight"] = rf.ne
    for L in range(nl):
        b = "blk.%d." % L
        want.update({b + "attn_norm.weight": [dim], b + "attn_q.weight": [dim, nh * hd],
                     b + "attn_k.weight": [dim, nkv * hd], b + "attn_v.weight": [dim, nkv * hd],
                     b + "attn_output.weight": [nh * hd, dim], b + "ffn_norm.weight": [dim],
                     b + "ffn_gate.weight": [dim, ff], b + "ffn_up.weight": [dim, ff],
                     b + "ffn_down.weight": [ff, dim]})
        if arch == "qwen2":
            want.update({b + "attn_q.bias": [nh * hd], b + "attn_k.bias": [nkv * hd],
                         b + "attn_v.bias": [nkv * hd]})
        if arch == "qwen3":
            want.update({b + "attn_q_norm.weight": [hd], b + "attn_k_norm.weight": [hd]})
    for n, ne in want.items():
        t = g.tensors.get(n)
        need(t is not None and t.ne == ne, "tensor %s: %r, want %r" % (n, t and t.ne, ne))
    for n, ne in opt.items():
        t = g.tensors.get(n)
        need(t is None or t.ne == ne, "tensor %s: %r, want %r" % (n, t and t.ne, ne))
    extra = set(g.tensors) - set(want) - set(opt)
    need(not extra, "tensors llama.cpp does not know for %s: %s" % (arch, sorted(extra)[:4]))
    for n, t in g.tensors.items():
        need(t.type in GGML_BLOCK and t.ne[0] % GGML_BLOCK[t.type] == 0, "%s: type %d, ne0 %d"
             % (n, t.type, t.ne[0]))
        need((t.offset - g.data_start) % align == 0, "%s: offset not a multiple of %d" % (n, align))
    if ok[0]:
        ck.check(True, "%s: %s, %d tensors, %d keys: what llama.cpp reads" % (label, arch, len(g.tensors),
                                                                            len(g.kv)))


class Refusals:
    """A Checker for the negative control: its refusals are expected, so they print as such."""
    failures = 0

    def check(self, ok, msg):
        if not ok:
            self.failures += 1
            print("refused, as it must be: " + msg)
        return ok


def main():
    ck = fwdutil.Checker("test_mkmodel_llamacpp")
    stories = os.path.join(fwdutil.models_dir(), "stories260K.gguf")
    with tempfile.TemporaryDirectory(prefix="specd-llamacpp-") as d:
        p = lambda n: os.path.join(d, n + ".gguf")  # noqa: E731
        small = dict(layers=2, dim=256, heads=4, kv_heads=2, ff=256, vocab=320, ctx=128, seed=5)
        fwdutil.mkmodel(p("random"), **small)
        check_file(ck, "random f32", p("random"))
        for ty in ("f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"):
            fwdutil.mkmodel(p("type-" + ty), type=ty, **small)
            check_file(ck, "--type " + ty, p("type-" + ty))
        fwdutil.mkmodel(p("tied"), tied=True, **small)
        check_file(ck, "--tied", p("tied"))
        # files specd trained (specd train, distill-draft): the built-in pair
        pair = os.path.join(os.environ.get("SPECD_SRC") or os.path.join(os.path.dirname(__file__), "../.."),
                            "cli", "data", "default-pair")
        for name in ("target", "draft"):
            f = os.path.join(pair, name + ".gguf")
            if os.path.exists(f):
                check_file(ck, "default pair " + name + " (specd-trained)", f)
        fwdutil.mkmodel(p("hd"), head_dim=32, **small)
        check_file(ck, "--head-dim 32", p("hd"))
        fwdutil.mkmodel(p("qwen2"), arch="qwen2", **small)
        check_file(ck, "--arch qwen2", p("qwen2"), want_arch="qwen2")
        fwdutil.mkmodel(p("qwen3"), arch="qwen3", **small)
        check_file(ck, "--arch qwen3", p("qwen3"), want_arch="qwen3")
        fwdutil.mkmodel(p("qwen3-hd"), arch="qwen3", **dict(small, head_dim=128))
        check_file(ck, "--arch qwen3 --head-dim 128", p("qwen3-hd"), want_arch="qwen3")
        fwdutil.mkmodel(p("mistral"), arch="mistral", **small)
        check_file(ck, "--arch mistral", p("mistral"))
        fwdutil.mkmodel(p("rope"), rope_scaling="llama3", **small)
        check_file(ck, "--rope-scaling llama3", p("rope"), want_rope_freqs=True)
        fwdutil.mkmodel(p("rope-tied"), rope_scaling="llama3", tied=True, **small)
        check_file(ck, "--rope-scaling llama3 --tied", p("rope-tied"), want_rope_freqs=True)
        fwdutil.run(["mkmodel", "-o", p("widen-rope"), "--widen", p("rope"), "--dim", 512, "--ff", 512])
        check_file(ck, "--widen of a llama3-scaled model", p("widen-rope"), want_rope_freqs=True)
        fwdutil.run(["mkmodel", "-o", p("quant-rope"), "--quantize", "q8_0", p("rope")])
        check_file(ck, "--quantize q8_0 of a llama3-scaled model", p("quant-rope"), want_rope_freqs=True)
        if os.path.exists(stories):
            fwdutil.mkmodel(p("tok"), tokenizer=stories, **dict(small, vocab=512))
            check_file(ck, "--tokenizer stories260K", p("tok"))
            fwdutil.run(["mkmodel", "-o", p("widen"), "--widen", stories, "--dim", 128, "--ff", 384,
                         "--layers", 6])
            check_file(ck, "--widen stories260K", p("widen"))
            fwdutil.run(["mkmodel", "-o", p("widen-q"), "--widen", stories, "--dim", 128, "--ff", 192, "--type", "q8_0"])
            check_file(ck, "--widen --type q8_0", p("widen-q"))
            for ty in ("f16", "bf16"):
                fwdutil.run(["mkmodel", "-o", p("quant-" + ty), "--quantize", ty, stories])
                check_file(ck, "--quantize %s stories260K" % ty, p("quant-" + ty))
            for ty in ("q8_0", "q4_0"):  # the widened copy: rows of multiples of 32
                fwdutil.run(["mkmodel", "-o", p("quant-" + ty), "--quantize", ty, p("widen")])
                check_file(ck, "--quantize %s of the widened stories260K" % ty, p("quant-" + ty))
        else:
            print("note: %s absent: the --widen/--quantize/--tokenizer cases of real models skipped" % stories)
        # the check itself can fail: a file with the key llama.cpp refuses
        gguf_reader.copy_with_kv(p("rope"), p("bad"), {"llama.rope.scaling.type": "llama3"})
        neg = Refusals()
        check_file(neg, "negative control", p("bad"), want_rope_freqs=True)
        ck.check(neg.failures > 0, "the check refuses a copy with rope.scaling.type = llama3")
    ck.done()


if __name__ == "__main__":
    main()
