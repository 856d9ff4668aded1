#!/usr/bin/env python3
# `specd convert-eagle3` (issue 36 item 4): EAGLE-3 heads in the layout they are published in
# (Hugging Face config.json + safetensors; SafeAILab's "midlayer." names and the speculators'
# "layers.0." ones), written here with numpy, converted for stories260K as the target, then run by
# the C forward (eagle3_dump) and compared with a float64 forward computed from the checkpoint's
# own arrays (ref_eagle3.Eagle3Ref.from_weights: the reference never reads specd's file). Also: the
# d2t map becomes the draft ids' target ids, the target's tokenizer is carried, and a head that
# does not fit (hidden size, vocabulary, layers), a corrupt header, a missing tensor or a d2t
# pointing outside the vocabulary is refused with its reason.
#   test_eagle3_convert.py EAGLE3_DUMP
import json
import os
import sys
import tempfile

import numpy as np

import fwdutil
import gguf_reader
from ref_eagle3 import Eagle3Ref

D, H, KV, FF, V, VD = 64, 8, 4, 172, 512, 256
T1, T2 = 9, 5


def bf16(a):
    """float32 -> bfloat16 bits (round to nearest even) and the float64 values they hold."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r, (r.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, numpy array of the stored bits/values)."""
    hdr, off, blobs = {}, 0, []
    for name, (dt, arr) in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        hdr[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(np.uint64(len(h)).tobytes() + h + b"".join(blobs))


def checkpoint(tmp, rng, dtype, prefix, ids):
    """A head: the stored tensors and the float64 weights they hold, under specd's names."""
    shapes = {"fc.weight": (D, 3 * D), prefix + "input_layernorm.weight": (D,), prefix + "hidden_norm.weight": (D,),
              prefix + "self_attn.q_proj.weight": (H * D // H, 2 * D), prefix + "self_attn.k_proj.weight": (KV * D // H, 2 * D),
              prefix + "self_attn.v_proj.weight": (KV * D // H, 2 * D), prefix + "self_attn.o_proj.weight": (D, H * D // H),
              prefix + "post_attention_layernorm.weight": (D,), prefix + "mlp.gate_proj.weight": (FF, D),
              prefix + "mlp.up_proj.weight": (FF, D), prefix + "mlp.down_proj.weight": (D, FF), "norm.weight": (D,),
              "lm_head.weight": (VD, D)}
    spec = {"fc.weight": "fc", "input_layernorm.weight": "blk.0.attn_norm", "hidden_norm.weight": "blk.0.hidden_norm",
            "self_attn.q_proj.weight": "blk.0.attn_q", "self_attn.k_proj.weight": "blk.0.attn_k",
            "self_attn.v_proj.weight": "blk.0.attn_v", "self_attn.o_proj.weight": "blk.0.attn_output",
            "post_attention_layernorm.weight": "blk.0.ffn_norm", "mlp.gate_proj.weight": "blk.0.ffn_gate",
            "mlp.up_proj.weight": "blk.0.ffn_up", "mlp.down_proj.weight": "blk.0.ffn_down", "norm.weight": "output_norm",
            "lm_head.weight": "output"}
    stored, w = {}, {}
    for name, shp in shapes.items():
        x = (1.0 + 0.3 * rng.standard_normal(shp)) if len(shp) == 1 else rng.standard_normal(shp) / np.sqrt(shp[-1])
        if dtype == "F16":
            v = x.astype(np.float16)
            stored[name], val = ("F16", v), v.astype(np.float64)
        else:
            bits, val = bf16(x)
            stored[name] = ("BF16", bits)
        w[spec[name[len(prefix):] if name.startswith(prefix) else name]] = val
    stored["d2t"] = ("I64", (ids - np.arange(VD)).astype(np.int64))
    t2d = np.zeros(V, np.uint8)
    t2d[ids] = 1
    stored["t2d"] = ("BOOL", t2d)
    return stored, w


def config(tmp, **over):
    c = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": D, "num_attention_heads": H,
         "num_key_value_heads": KV, "intermediate_size": FF, "num_hidden_layers": 1, "vocab_size": V,
         "draft_vocab_size": VD, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 2048}
    c.update(over)
    p = os.path.join(tmp, "config.json")
    with open(p, "w") as f:
        json.dump(c, f)
    return p


def main():
    dump = sys.argv[1]
    ck = fwdutil.Checker("fwd_eagle3_convert")
    target = fwdutil.model_path("stories260K.gguf")
    tg = gguf_reader.read(target)
    emb = tg.tensor("token_embd.weight")
    ck.check(emb.shape == (V, D), "the target is %dx%d (%s)" % (V, D, emb.shape))
    rng = np.random.default_rng(11)
    ids = np.sort(rng.choice(V, VD, replace=False))
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, prefix in (("F16", "midlayer."), ("BF16", "layers.0.")):
            stored, w = checkpoint(tmp, rng, dtype, prefix, ids)
            st, head = os.path.join(tmp, "model.safetensors"), os.path.join(tmp, "head.gguf")
            write_safetensors(st, stored)
            cp = fwdutil.run(["convert-eagle3", "--config", config(tmp), "--weights", st, "--target", target, "-o", head],
                             check=False)
            ck.check(cp.returncode == 0, "%s %s: converted (%s)" % (dtype, prefix, cp.stderr.strip()[-200:]))
            if cp.returncode:
                continue
            g = gguf_reader.read(head)
            ck.check(g.get("general.architecture") == "eagle3", "%s: arch eagle3" % dtype)
            ck.check(list(g.tensor("d2t").reshape(-1).astype(np.int64)) == list(ids), "%s: d2t holds the target ids" % dtype)
            ck.check(g.get("tokenizer.ggml.tokens") == tg.get("tokenizer.ggml.tokens"), "%s: the target's tokenizer" % dtype)
            # the C forward against the checkpoint's own arrays (embedding: the target's)
            w["token_embd"] = emb
            tok = rng.integers(0, V, T1 + T2).astype(np.int32)
            ft = (rng.standard_normal((T1, 3 * D)) * 2).astype(np.float32)
            fo = rng.standard_normal((T2, D)).astype(np.float32)
            r, a = fwdutil.eagle3_dump(dump, head, tok, ft, fo, tmp)
            ck.check(r.returncode == 0, "%s: eagle3_dump ran: %s" % (dtype, r.stderr.strip()))
            if r.returncode:
                continue
            lg = a[:(T1 + T2) * VD].reshape(-1, VD)
            ref = Eagle3Ref.from_weights(w, D, H, KV)
            ref.neox = True  # the checkpoint's own convention: rotate-half RoPE on its unpermuted q/k rows
            rl, _ = ref.run_two(tok, T1, ft, fo)
            e = fwdutil.rel_err_rows(lg, rl).max()
            ck.check(e < 1e-4, "%s: logits over the draft vocabulary vs the checkpoint's forward: %.2e" % (dtype, e))
        # refusals, each with its reason
        stored, _ = checkpoint(tmp, rng, "F16", "midlayer.", ids)
        st = os.path.join(tmp, "model.safetensors")
        write_safetensors(st, stored)

        def refused(cfg, weights, want, what):
            cp = fwdutil.run(["convert-eagle3", "--config", cfg, "--weights", weights, "--target", target, "-o",
                              os.path.join(tmp, "bad.gguf")], check=False)
            ck.check(cp.returncode == 1 and want in cp.stderr, "%s refused: %s" % (what, cp.stderr.strip()[-160:]))

        refused(config(tmp, hidden_size=128, num_attention_heads=16), st, "hidden size", "another hidden size")
        refused(config(tmp, vocab_size=600), st, "tokens", "another vocabulary")
        refused(config(tmp, num_hidden_layers=2), st, "layers", "two layers")
        refused(config(tmp, rope_scaling={"rope_type": "yarn", "factor": 4.0}), st, "not supported", "yarn scaling")
        # Llama 3.1 heads: llama3 RoPE scaling carried into the head's file
        head = os.path.join(tmp, "scaled.gguf")
        cp = fwdutil.run(["convert-eagle3", "--config", config(tmp, rope_theta=500000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}), "--weights", st, "--target", target, "-o", head], check=False)
        ck.check(cp.returncode == 0, "llama3 scaling converted: " + cp.stderr.strip()[-200:])
        if cp.returncode == 0:
            g = gguf_reader.read(head)
            ck.check(g.get("eagle3.rope.scaling.type") == "llama3" and abs(g.get("eagle3.rope.scaling.factor") - 8.0) < 1e-6
                     and int(g.get("eagle3.rope.scaling.original_context_length")) == 8192
                     and abs(g.get("eagle3.rope.freq_base") - 500000.0) < 1, "llama3 scaling keys in the head")
        bad = dict(stored)
        del bad["midlayer.hidden_norm.weight"]
        write_safetensors(st, bad)
        refused(config(tmp), st, "missing tensor", "a missing tensor")
        bad = dict(stored)
        bad["d2t"] = ("I64", np.full(VD, V, np.int64))
        write_safetensors(st, bad)
        refused(config(tmp), st, "outside", "a d2t outside the vocabulary")
        with open(st, "wb") as f:
            f.write(np.uint64(1 << 40).tobytes() + b"{}")
        refused(config(tmp), st, "corrupt", "a corrupt header")
    ck.done()


if __name__ == "__main__":
    main()
