#!/usr/bin/env python3
# EAGLE-3 heads in the GGUF layout llama.cpp's converter writes (issue 36 item 4; read from
# ggml-org/llama.cpp conversion/llama.py and src/models/eagle3.cpp): arch eagle3 with llama's keys,
# eagle3.extract_layers (int32: the residual ENTERING each layer, as specd's eagle3.target_layers),
# eagle3.target_hidden_size, eagle3.norm_before_residual, the feature norm as blk.0.attn_norm_2,
# q/k rows permuted for llama's adjacent-pair RoPE, d2t as I64 absolute target ids, and no
# token_embd.weight when the checkpoint has no embed_tokens (the target's is used). Written here with
# numpy from the same kind of checkpoint test_eagle3_convert.py writes, then:
#   1. run beside stories260K (eagle3_dump --target) against the checkpoint's own float64 forward with
#      Hugging Face RoPE (rotate-half on the unpermuted q/k): the permutation is honoured;
#   2. a specd-layout head (convert-eagle3) rewritten into llama.cpp's layout computes the same logits
#      bit for bit, with and without its own token_embd;
#   3. `specd generate --eagle` with the rewritten head (d2t as I64 ids, or as offsets under
#      "d2t.weight") gives the same tokens and the same speculation counts as the specd head, also with
#      extract_layers [1, 3, 4] against target_layers [1, 3, 4];
#   4. refusals with their reason: no token_embd loaded alone, extract_layers outside the target,
#      norm_before_residual, fc_norm.weight, a repeated d2t id.
#   test_eagle3_llamacpp.py EAGLE3_DUMP EAGLE3_PAIR_DUMP
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

import fwdutil
import gguf_reader
from ref_eagle3 import Eagle3Ref
from test_eagle3_convert import D, FF, H, KV, T1, T2, V, VD, checkpoint, config, write_safetensors

# GGUF value types and the ggml tensor types used here
U32, I32, F32T, BOOL, STR, ARR, I64V = 4, 5, 6, 7, 8, 9, 11
G_F32, G_F16, G_I32, G_I64 = 0, 1, 26, 27
NP_VT = {np.dtype(np.float32): F32T, np.dtype(np.int32): I32, np.dtype(np.uint32): U32, np.dtype(np.int64): I64V,
         np.dtype(np.uint8): 0, np.dtype(np.int8): 1}


def _s(x):
    b = x.encode("utf-8", errors="surrogateescape")
    return struct.pack("<Q", len(b)) + b


def _val(t, v):
    if t == STR:
        return _s(v)
    if t == BOOL:
        return struct.pack("<B", int(v))
    if t == ARR:
        if isinstance(v, list):
            return struct.pack("<IQ", STR, len(v)) + b"".join(_s(x) for x in v)
        a = np.asarray(v)
        return struct.pack("<IQ", NP_VT[a.dtype], len(a)) + a.tobytes()
    fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", U32: "<I", I32: "<i", F32T: "<f", 10: "<Q", I64V: "<q", 12: "<d"}[t]
    return struct.pack(fmt, v)


def write_gguf(path, kvs, tensors):
    """kvs: [(key, gguf type, value)]; tensors: [(name, ne, ggml type, bytes)]. GGUF v3, alignment 32."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += _s(k) + struct.pack("<I", t) + _val(t, v)
    off, data = 0, b""
    for name, ne, t, b in tensors:
        out += _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", t, off)
        pad = (-len(b)) % 32
        data += b + b"\0" * pad
        off += len(b) + pad
    out += b"\0" * ((-len(out)) % 32)
    with open(path, "wb") as f:
        f.write(out + data)


def permute(w, n_head):
    """llama.cpp's LlamaModel.permute: rows of each head from rotate-half order to adjacent pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokenizer_kvs(g):
    return [(k, g.kv_types[k], v) for k, v in g.kv.items() if k.startswith("tokenizer.")]


def llamacpp_from_checkpoint(path, stored, ids, tg, layers, embed=False, output=True):
    """The GGUF llama.cpp's converter writes for this checkpoint (q/k permuted, norms F32, d2t absolute I64)."""
    hd = D // H
    kvs = [("general.architecture", STR, "eagle3"), ("general.name", STR, "eagle3 test head"),
           ("eagle3.vocab_size", U32, V), ("eagle3.context_length", U32, 2048), ("eagle3.embedding_length", U32, D),
           ("eagle3.block_count", U32, 1), ("eagle3.feed_forward_length", U32, FF),
           ("eagle3.attention.head_count", U32, H), ("eagle3.attention.head_count_kv", U32, KV),
           ("eagle3.rope.freq_base", F32T, 10000.0), ("eagle3.attention.layer_norm_rms_epsilon", F32T, 1e-5),
           ("eagle3.rope.dimension_count", U32, hd), ("eagle3.extract_layers", ARR, np.array(layers, np.int32)),
           ("eagle3.target_hidden_size", U32, D), ("eagle3.norm_before_residual", BOOL, False)] + tokenizer_kvs(tg)
    names = {"fc.weight": "fc.weight", "midlayer.hidden_norm.weight": "blk.0.attn_norm_2.weight",
             "midlayer.input_layernorm.weight": "blk.0.attn_norm.weight",
             "midlayer.self_attn.q_proj.weight": "blk.0.attn_q.weight",
             "midlayer.self_attn.k_proj.weight": "blk.0.attn_k.weight",
             "midlayer.self_attn.v_proj.weight": "blk.0.attn_v.weight",
             "midlayer.self_attn.o_proj.weight": "blk.0.attn_output.weight",
             "midlayer.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
             "midlayer.mlp.gate_proj.weight": "blk.0.ffn_gate.weight", "midlayer.mlp.up_proj.weight": "blk.0.ffn_up.weight",
             "midlayer.mlp.down_proj.weight": "blk.0.ffn_down.weight", "norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    tensors = []
    for src, dst in names.items():
        if src == "lm_head.weight" and not output:
            continue
        dt, a = stored[src]
        assert dt == "F16"
        if src.endswith("q_proj.weight"):
            a = permute(a, H)
        elif src.endswith("k_proj.weight"):
            a = permute(a, KV)
        if a.ndim == 1:
            tensors.append((dst, [a.shape[0]], G_F32, a.astype(np.float32).tobytes()))
        else:
            tensors.append((dst, [a.shape[1], a.shape[0]], G_F16, np.ascontiguousarray(a).tobytes()))
    if embed:
        e = tg.tensor("token_embd.weight").astype(np.float32)
        tensors.append(("token_embd.weight", [D, V], G_F32, e.tobytes()))
    if output:
        tensors.append(("d2t", [VD], G_I64, ids.astype(np.int64).tobytes()))
    write_gguf(path, kvs, tensors)


def rewrite(src, dst, tg, drop_embd=True, d2t="ids", layers=None, nbr=False, extra_tensors=(), target_layers=None):
    """A specd-layout head (src) in llama.cpp's layout: same tensor bytes, llama.cpp's names and keys.
    d2t: "ids" (I64 "d2t") or "offsets" (I64 "d2t.weight") of the head's map, or (form, target ids).
    target_layers: instead, keep specd's layout and add eagle3.target_layers (u32)."""
    g = gguf_reader.read(src)
    kvs = [(k, g.kv_types[k], v) for k, v in g.kv.items() if k != "general.alignment"]
    tensors = []
    for name in g.tensor_order:
        t = g.tensors[name]
        b = bytes(g.raw(name))
        if target_layers is None and name == "blk.0.hidden_norm.weight":
            name = "blk.0.attn_norm_2.weight"
        if target_layers is None and name == "token_embd.weight" and drop_embd:
            continue
        if target_layers is None and name == "d2t":
            form, ids = d2t if isinstance(d2t, tuple) else (d2t, np.frombuffer(b, "<i4").astype(np.int64))
            if form == "offsets":
                name, ids = "d2t.weight", ids - np.arange(len(ids))
            tensors.append((name, t.ne, G_I64, ids.tobytes()))
            continue
        tensors.append((name, t.ne, t.type, b))
    if target_layers is not None:
        kvs.append(("eagle3.target_layers", ARR, np.array(target_layers, np.uint32)))
    else:
        kvs += [("eagle3.extract_layers", ARR, np.array(layers, np.int32)), ("eagle3.target_hidden_size", U32, D),
                ("eagle3.norm_before_residual", BOOL, nbr)]
    tensors += list(extra_tensors)
    write_gguf(dst, kvs, tensors)


def pair_dump(pd, target, head, tok, ft, fo, tmp):
    inp, out = os.path.join(tmp, "pin.bin"), os.path.join(tmp, "pout.bin")
    with open(inp, "wb") as f:
        f.write(np.array([len(ft), len(fo)], np.int32).tobytes() + np.asarray(tok, np.int32).tobytes() +
                np.asarray(ft, np.float32).tobytes() + np.asarray(fo, np.float32).tobytes())
    cp = subprocess.run([pd, "--target", target, head, inp, out], capture_output=True, text=True, timeout=60)
    return cp, (np.fromfile(out, dtype="<f4").astype(np.float64) if cp.returncode == 0 else None)


def main():
    dump = pd = sys.argv[1]  # eagle3_dump, alone or --target (beside the target)
    ck = fwdutil.Checker("fwd_eagle3_llamacpp")
    target = fwdutil.model_path("stories260K.gguf")
    tg = gguf_reader.read(target)
    emb = tg.tensor("token_embd.weight")
    L = int(tg.get("llama.block_count"))
    rng = np.random.default_rng(5)
    ids = np.sort(rng.choice(V, VD, replace=False))
    tok = rng.integers(0, V, T1 + T2).astype(np.int32)
    ft = (rng.standard_normal((T1, 3 * D)) * 2).astype(np.float32)
    fo = rng.standard_normal((T2, D)).astype(np.float32)
    n = T1 + T2
    with tempfile.TemporaryDirectory() as tmp:
        stored, w = checkpoint(tmp, rng, "F16", "midlayer.", ids)
        # 1. llama.cpp's converter output for the checkpoint vs its own forward (HF RoPE: rotate-half)
        w["token_embd"] = emb
        ref = Eagle3Ref.from_weights(w, D, H, KV)
        ref.neox = True
        rl, rh = ref.run_two(tok, T1, ft, fo)
        for embed in (False, True):
            head = os.path.join(tmp, "lcpp%d.gguf" % embed)
            llamacpp_from_checkpoint(head, stored, ids, tg, [2, L // 2, L - 3], embed=embed)
            r, a = pair_dump(pd, target, head, tok, ft, fo, tmp)
            what = "llama.cpp head %s token_embd" % ("with" if embed else "without")
            ck.check(r.returncode == 0, "%s loads beside the target: %s" % (what, r.stderr.strip()))
            if r.returncode:
                continue
            e = fwdutil.rel_err_rows(a[:n * VD].reshape(n, VD), rl).max()
            ck.check(e < 1e-4, "%s: logits vs the checkpoint's forward (rotate-half RoPE): %.2e" % (what, e))
            eh = fwdutil.rel_err_rows(a[n * VD:].reshape(n, D), rh).max()
            ck.check(eh < 1e-4, "%s: final residual vs the checkpoint's forward: %.2e" % (what, eh))
        # no output.weight (and so no d2t): the target's output head, over the whole vocabulary
        head = os.path.join(tmp, "lcpp_noout.gguf")
        llamacpp_from_checkpoint(head, stored, ids, tg, [2, L // 2, L - 3], output=False)
        wo = dict(w, output=tg.tensor("output.weight" if "output.weight" in tg.tensors else "token_embd.weight"))
        ref_o = Eagle3Ref.from_weights(wo, D, H, KV)
        ref_o.neox = True
        rlo, _ = ref_o.run_two(tok, T1, ft, fo)
        r, a = pair_dump(pd, target, head, tok, ft, fo, tmp)
        ck.check(r.returncode == 0 and fwdutil.rel_err_rows(a[:n * V].reshape(n, V), rlo).max() < 1e-4,
                 "a head without output.weight uses the target's over all %d tokens %s" % (V, r.stderr.strip()))
        ref2 = Eagle3Ref.from_weights(w, D, H, KV)  # adjacent pairs on the unpermuted rows: must differ
        rl2, _ = ref2.run_two(tok, T1, ft, fo)
        ck.check(fwdutil.rel_err_rows(rl2, rl).max() > 1e-2, "the RoPE convention matters here (a dropped permutation "
                 "would be caught)")
        r, _ = fwdutil.eagle3_dump(dump, os.path.join(tmp, "lcpp0.gguf"), tok, ft, fo, tmp)
        ck.check(r.returncode != 0 and "token_embd.weight" in r.stderr and "beside its target" in r.stderr,
                 "a head without token_embd loaded alone is refused: " + r.stderr.strip()[-160:])

        # 2. a specd head (convert-eagle3) rewritten into llama.cpp's layout: the same bits
        st, sp = os.path.join(tmp, "model.safetensors"), os.path.join(tmp, "specd.gguf")
        write_safetensors(st, stored)
        fwdutil.run(["convert-eagle3", "--config", config(tmp), "--weights", st, "--target", target, "-o", sp])
        r0, a0 = fwdutil.eagle3_dump(dump, sp, tok, ft, fo, tmp)
        ck.check(r0.returncode == 0, "the specd head runs: " + r0.stderr.strip())
        heads = {}
        for drop in (True, False):
            for form in ("ids", "offsets"):
                h = os.path.join(tmp, "rw_%d_%s.gguf" % (drop, form))
                rewrite(sp, h, tg, drop_embd=drop, d2t=form, layers=[2, L // 2, L - 3])
                heads[(drop, form)] = h
            r, a = pair_dump(pd, target, heads[(drop, "ids")], tok, ft, fo, tmp)
            ck.check(r.returncode == 0 and a0 is not None and np.array_equal(a, a0),
                     "rewritten %s token_embd: logits and residuals equal the specd head's bit for bit %s" %
                     ("without" if drop else "with", r.stderr.strip()))

        # 3. through the proposer: generate --eagle, same tokens and drafts as the specd head
        # sampled (T = 1, fixed seed): the lossless rule draws on the drafted tokens and their q, so the
        # sampled tokens change with what the head drafts (a random head's drafts are rarely accepted greedily)
        def gen(head, prompt="Once upon a time", temp="1.0"):
            cp = fwdutil.run(["generate", "-m", target, "-p", prompt, "-n", "48", "--temp", temp, "--seed", "7", "--json",
                              "--quiet", "--gamma", "4", "--eagle", head], check=False)
            if cp.returncode:
                return None, cp.stderr
            o = json.loads(cp.stdout)
            s = o["speculation"]
            return (o["tokens"], {k: s.get(k) for k in ("verify_steps", "drafted", "accepted") if k in s}), cp.stderr

        plain = json.loads(fwdutil.run(["generate", "-m", target, "-p", "Once upon a time", "-n", "48", "--temp", "0",
                                        "--json", "--quiet", "--no-spec"]).stdout)["tokens"]
        greedy, _ = gen(sp, temp="0")
        ck.check(greedy is not None and greedy[0] == plain, "the specd head: greedy equals plain (%s)" %
                 (greedy and greedy[1]))
        base, _ = gen(sp)
        wrong = os.path.join(tmp, "wrong.gguf")  # the same target ids, each one draft id off
        rewrite(sp, wrong, tg, layers=[2, L // 2, L - 3], d2t=("ids", np.roll(ids, 1)))
        w_, _ = gen(wrong)
        ck.check(base is not None and w_ is not None and w_[0] != base[0], "sampled tokens tell drafts apart (another "
                 "d2t: %s vs %s)" % (w_ and w_[1], base and base[1]))
        for (drop, form), h in heads.items():
            got, err = gen(h)
            ck.check(got == base, "generate with the llama.cpp-layout head (%s token_embd, d2t %s) = the specd head's: "
                     "%s %s" % ("no" if drop else "own", form, got and got[1], err.strip()[-160:]))
        # extract_layers means what target_layers means (the residual entering each layer)
        sp_l, lc_l = os.path.join(tmp, "specd_l.gguf"), os.path.join(tmp, "lcpp_l.gguf")
        rewrite(sp, sp_l, tg, target_layers=[1, 3, 4])
        rewrite(sp, lc_l, tg, layers=[1, 3, 4])
        a_, _ = gen(sp_l, "The little dog")
        b_, err = gen(lc_l, "The little dog")
        c_, _ = gen(sp, "The little dog")
        ck.check(a_ is not None and a_ == b_ and a_[0] != c_[0], "extract_layers [1,3,4] = target_layers [1,3,4] "
                 "(and not the default layers): %s %s" % (b_ and b_[1], err.strip()[-120:]))

        # 4. refusals, each with its reason
        def refused(head, want, what):
            got, err = gen(head)
            ck.check(got is None and want in err, "%s refused: %s" % (what, err.strip()[-200:]))

        bad = os.path.join(tmp, "bad.gguf")
        rewrite(sp, bad, tg, layers=[2, 3, L + 4])
        refused(bad, "reads target layer %d" % (L + 4), "extract_layers outside the target")
        rewrite(sp, bad, tg, layers=[2, 3])
        refused(bad, "extract_layers must be 3", "two extract_layers")
        rewrite(sp, bad, tg, layers=[2, 2, 2], nbr=True)
        refused(bad, "norm_before_residual", "norm_before_residual")
        rewrite(sp, bad, tg, layers=[2, 2, 2],
                extra_tensors=[("fc_norm.weight", [D, 3], G_F32, np.ones((3, D), np.float32).tobytes())])
        refused(bad, "fc_norm.weight", "per-layer feature norms")
        dup = ids.astype(np.int64).copy()
        dup[1] = dup[0]
        rewrite(sp, bad, tg, layers=[2, 2, 2], d2t=("ids", dup))
        refused(bad, "repeats a target id", "a repeated d2t id")
        over = ids.astype(np.int64).copy()
        over[-1] = V  # as an offset table: draft id VD-1 + offset past the vocabulary
        rewrite(sp, bad, tg, layers=[2, 2, 2], d2t=("offsets", over))
        refused(bad, "outside the vocabulary", "a d2t offset outside the vocabulary")
    ck.done()


if __name__ == "__main__":
    main()
